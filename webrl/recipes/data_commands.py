"""`webrl resim` and `webrl segments`: SFT demonstrations from the seeds' methods, as CLI commands.

    webrl resim n=32 out=data/resim "sites=[widgets]" resim.branching=3     # ReSim traces
    webrl segments runs/default-<time> out=data/segments                    # credit-assignment SFT
    webrl sft sft.demos_dir=data/resim                                       # then train on either

Thin shells: the methods are `webrl.recipes.resim` and `webrl.recipes.segments`.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from webrl.recipes.resim import ResimConfig
from webrl.recipes.segments import SegmentConfig


@dataclass
class ResimCommandConfig:
    n: int = 32
    """Episodes (sandbox tasks drawn with resim.seed); each state of each becomes one trace."""
    out: str = "resim"
    """Output folder: demos.jsonl (+ images/), what `webrl sft sft.demos_dir=OUT` reads."""
    levels: list[int] = field(default_factory=lambda: [0])
    """Difficulty levels to draw from."""
    sites: list[str] = field(default_factory=lambda: ["widgets"])
    """Sandbox sites to draw from."""
    split: str = "train"
    """train | test."""
    viewport: str = "openwebrl"
    """Browser viewport preset or WxH (the one the policy is trained at)."""
    resim: ResimConfig = field(default_factory=ResimConfig)
    """Branching, depth, values, trace format and which episodes are kept (`ResimConfig`)."""


def resim_main(config: ResimCommandConfig) -> int:
    from webrl.envs import BrowserSession, WebEnv, WebEnvConfig
    from webrl.envs.sites.source import SandboxTaskSource
    from webrl.recipes.resim import resim_demos
    from webrl.rollout.slots import GymSlot

    source = SandboxTaskSource(sites=tuple(config.sites), levels=tuple(config.levels), split=config.split)
    session = BrowserSession()
    try:
        env = WebEnv(WebEnvConfig.from_dict({"browser": {"viewport": config.viewport}}), session=session)
        try:
            counts = resim_demos(source, GymSlot(env), config.n, config.out, config.resim)
        finally:
            env.close()
    finally:
        session.close()
    print(f"ReSim: {counts.traces} traces from {counts.episodes - counts.not_kept} of {counts.episodes} episodes "
          f"({counts.states} states, {counts.branches} branches, {counts.env_steps} env steps, {counts.diverged} "
          f"diverged replays, {counts.not_kept} episodes not kept) in {Path(config.out) / 'demos.jsonl'}; "
          f"train with: webrl sft sft.demos_dir={config.out}")
    return 0


@dataclass
class SegmentCommandConfig:
    source: str = ""
    """A run folder (its trajectories/trajectories.jsonl) or a trajectories .jsonl file."""
    out: str = "segments"
    """Output folder: demos.jsonl, what `webrl sft sft.demos_dir=OUT` reads."""
    segments: SegmentConfig = field(default_factory=SegmentConfig)
    """Which turns of failed trajectories are kept (`SegmentConfig`)."""


def segments_main(config: SegmentCommandConfig) -> int:
    from webrl.config import ConfigError
    from webrl.recipes.segments import write_segment_demos

    if not config.source:
        raise ConfigError("segments needs a run folder or trajectories file: webrl segments RUN_DIR out=DIR")
    stats = write_segment_demos(config.source, config.out, config.segments)
    print(json.dumps(dataclasses.asdict(stats), indent=1))
    print(f"train with: webrl sft sft.demos_dir={config.out}")
    return 0

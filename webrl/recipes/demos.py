"""Oracle demonstrations through `WebEnv`: the supervised targets for SFT initialisation (`webrl demos`).

    summary = record_demos(64, "data/demos", seed=0, levels=(0, 1), sites=("shop", "wiki"))
    result = run_oracle_episode(env, task)                      # one episode, not written

`run_oracle_episode(env, task)` is one episode of the episode runner (`webrl.rollout.episode`) with
the task's scripted oracle as the agent (`OracleAgent`: it sees `oracle_view`, what the env shows,
never hidden state). Each turn is what the runner records for every episode: the Set-of-Mark
screenshot the policy would see (none with `record_images=False`), the action in the compact
grammar as the response text, `decided_by="oracle"` and no token ids (the SFT converter
tokenises), the env's feedback, and the observation record with the Set-of-Mark element list in
compact form (`compact_elements`: id, bbox, role, tag, name, in_viewport, and options/selected for
selects; no value, href or raw HTML), which the decision heads train on
(`webrl.policy.types.marked_from_turn`). The checker's outcome goes to
`trajectory.info.task_reward`; `trajectory.reward` is left to a reward function, as for rollouts.

`record_demos` runs `n` such episodes on sandbox tasks and writes the successful ones (reward 1:
they are supervised targets) to `out_dir/demos.jsonl` with `save_trajectories` (images in
out_dir/images/); failures and infrastructure drops are counted in the returned summary (and in
out_dir/summary.json).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from webrl.envs.sites.source import SITE_NAMES, SandboxTaskSource
from webrl.rollout.agents import OracleAgent
from webrl.rollout.episode import EpisodeInfraError, EpisodeSpec, new_trajectory, run_episode
from webrl.rollout.slots import GymSlot
from webrl.types import Trajectory


@dataclass
class OracleResult:
    trajectory: Trajectory
    reward: float
    steps: int
    infra_error: Optional[str] = None


def run_oracle_episode(env: Any, task: Any, record_images: bool = True) -> OracleResult:
    """One episode of `task` in the `WebEnv` `env` driven by its oracle; reward as the env computed
    it. An infrastructure failure gives an empty trajectory, dropped with the env's report."""
    spec = EpisodeSpec(task, max_turns=env.config.max_steps or task.spec.max_steps)
    try:
        episode = run_episode(spec, GymSlot(env), OracleAgent(task, record_images))
    except EpisodeInfraError as error:
        trajectory = new_trajectory(task)
        trajectory.drop(f"infra_error: {error}")
        return OracleResult(trajectory, 0.0, 0, str(error))
    return OracleResult(episode.trajectory, float(episode.final.reward), episode.env_steps)


def record_demos(n: int, out_dir: str | Path, seed: int = 0, levels: Sequence[int] = (0, 1, 2),
                 sites: Sequence[str] = SITE_NAMES, split: str = "train", viewport: str = "openwebrl",
                 session: Optional[Any] = None) -> dict[str, Any]:
    """Run `n` oracle episodes on tasks drawn from (sites, levels, split) with `seed`; write the
    successful ones to `out_dir/demos.jsonl` (images in `out_dir/images/`). Returns a summary."""
    import numpy as np

    from webrl.envs import BrowserSession, WebEnv, WebEnvConfig
    from webrl.types import save_trajectories

    if n < 1:
        raise ValueError(f"record_demos: n must be >= 1, got {n!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "demos.jsonl"
    path.write_text("")
    source = SandboxTaskSource(sites=tuple(sites), levels=tuple(levels), split=split)
    rng = np.random.default_rng(seed)
    own_session = session is None
    session = session or BrowserSession()
    env = WebEnv(WebEnvConfig.from_dict({"browser": {"viewport": viewport}}), session=session)
    summary = {"episodes": 0, "saved": 0, "failed": [], "dropped": [], "steps": 0, "path": str(path)}
    try:
        for _ in range(n):
            task = source.sample(rng)
            result = run_oracle_episode(env, task)
            summary["episodes"] += 1
            summary["steps"] += result.steps
            if result.infra_error:
                summary["dropped"].append(task.spec.id)
            elif result.reward < 1.0:
                summary["failed"].append(task.spec.id)
            else:
                save_trajectories(path, [result.trajectory])
                summary["saved"] += 1
    finally:
        env.close()
        if own_session:
            session.close()
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary

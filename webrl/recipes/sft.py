"""The SFT stage: oracle demonstrations -> per-turn SFT samples -> SFT learner -> HF checkpoint.

    path = sft_stage(config, run_dir, model_path, actors, log)   # the HF folder of the SFT weights

Each phase of `sft.curriculum` ([max_level, epochs]; default one phase of `sft.epochs` over
everything) shuffles its turns every pass with the run's seed and takes one optimizer step per
`sft.batch_size` turns; the checkpoint at `<run>/sft` is rewritten after every pass, so a long
run can be stopped and its last pass used. Prompts are rendered by the rollout policy's own
`GeneratorPolicy`, so SFT trains on exactly the tokens rollouts will produce.

Departure from the OpenWebRL recipe: the demonstrations are recorded from the sandbox oracles
(or read from `sft.demos_dir`) instead of loading the recipe's 0.4K human trajectories.
"""
from __future__ import annotations

import dataclasses
import random
import time
from pathlib import Path
from typing import Any, Callable

from webrl.train_config import WebRLConfig, learner_run


def sft_stage(config: WebRLConfig, run_dir: Path, model_path: str, actors: Any, log: Callable) -> str:
    """Train `model_path` on the demonstrations; returns the HF folder of the result (or
    `model_path` unchanged when there is nothing to train on)."""
    from webrl.learner.samples import LearnerSample
    from webrl.models.shipped import write_trained_prompt
    from webrl.policy import sft_samples_from_trajectory

    cfg = config
    demos = demonstrations(cfg, run_dir, log)
    policy = _render_policy(model_path, cfg)
    samples = [(int(traj.info.level), LearnerSample(s.prompt_ids, s.response_ids, images=list(s.images)))
               for traj in demos for s in sft_samples_from_trajectory(traj, policy)]
    if not samples:
        print("webrl sft: no demonstrations to train on; skipping the SFT stage")
        return model_path
    phases = [(int(lv), int(n)) for lv, n in cfg.sft.curriculum] or [(max(lv for lv, _ in samples), cfg.sft.epochs)]
    batch = cfg.sft.batch_size
    pools = [[s for lv, s in samples if lv <= max_level] for max_level, _ in phases]
    steps = sum(n * -(-len(pool) // batch) for (_, n), pool in zip(phases, pools))
    section = cfg.sft.learner
    section = dataclasses.replace(section, batching=dataclasses.replace(section.batching, mini_batches=1, ppo_epochs=1),
                                  optim=dataclasses.replace(section.optim, total_steps=max(steps, 1)))
    learner = actors.start_learner(section, learner_run(cfg, model_path))
    rng, epoch, path = random.Random(f"{cfg.run.seed}:sft"), 0, ""
    try:
        for (max_level, n), pool in zip(phases, pools):
            for _ in range(n):
                t0, order = time.monotonic(), rng.sample(pool, len(pool))
                metrics = [learner.update(order[i:i + batch]) for i in range(0, len(order), batch)]
                epoch += 1
                mean = {k: sum(m[k] for m in metrics) / len(metrics) for k in metrics[0]
                        if k not in ("policy_version", "optimizer_steps")}
                path = learner.save(str(run_dir / "sft"), {"stage": "sft", "epoch": epoch})
                write_trained_prompt(path, dataclasses.asdict(cfg.generator.prompt))
                log({"stage": "sft", "epoch": epoch, "max_level": max_level, "samples": len(pool),
                     "optimizer_steps": len(metrics), "time_s": time.monotonic() - t0, **mean})
    finally:
        actors.stop_learner(learner)
    return str(Path(path) / "hf")


def demonstrations(config: WebRLConfig, run_dir: Path, log: Callable) -> list:
    """`sft.demos_dir`'s demos.jsonl, or `sft.demos` oracle episodes recorded into `<run>/demos`."""
    from webrl.envs.sites.cli import record_demos
    from webrl.types import load_trajectories

    cfg = config
    folder = Path(cfg.sft.demos_dir) if cfg.sft.demos_dir else run_dir / "demos"
    if not cfg.sft.demos_dir:
        summary = record_demos(cfg.sft.demos, folder, seed=cfg.run.seed, levels=cfg.sft.demo_levels,
                               sites=cfg.tasks.sites, split="train", viewport=cfg.env.env.browser.viewport)
        log({"stage": "demos", "episodes": summary["episodes"], "saved": summary["saved"]})
    return load_trajectories(folder / "demos.jsonl")


def _render_policy(model_path: str, config: WebRLConfig):
    """A GeneratorPolicy used only to render prompts (SFT shares the rollout's prompt code)."""
    from webrl.models import load_model
    from webrl.policy import GeneratorPolicy

    model, processor = load_model(model_path)
    return GeneratorPolicy(model, processor, config.generator)

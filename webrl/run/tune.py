"""Ray Tune over webrl runs: `WebRLTrainable`, one `Trainer` per trial.

A trial's config is a preset plus dotted keys, the same mechanism as the command line::

    {"preset": "default", "overrides": ["trainer.stages=[rl]"],
     "learner.optim.lr": tune.loguniform(1e-5, 1e-3), "learner.loss.kl_coef": tune.choice([0.0, 0.01])}

Each Tune iteration (`step`) is one RL iteration (collect -> reward -> advantages -> update ->
sync); its metrics are the trainer's (`reward/mean`, `reward/success_rate`, `kl`, ...; with
`trainer.eval_every` also `eval_success`). `save_checkpoint` writes the learner state and the
iteration; `load_checkpoint` restores them into a freshly set up trial (Tune's restore after a
failure, PBT exploits). `default_resource_request` reserves one placement group per trial that
covers the trial's driver, learner ranks, inference workers (rollout + greedy eval), env
workers and the inference servers the run launches (`rollout.server.launch`;
`webrl.run.resources.run_layout`); `setup` hands that group
(`ray.util.get_current_placement_group()`) to the Trainer, which puts every actor into its bundle.

Choices where the issue is silent: the trial's run folder is the trial's own directory
(`<trial dir>/run`), so checkpoints Tune does not manage (SFT weights, the trajectory log) stay
with the trial; `reset_config` rebuilds the Trainer in place (the actors' settings depend on the
config) and returns True, so `reuse_actors=True` saves the trial actor's start-up, not the
Trainer's. The SFT stage, when in `trainer.stages`, runs in every trial's `setup`; the example
runs SFT once and tunes from its checkpoint instead (examples/tune_grpo.py).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from ray import tune

from webrl.config import load_config
from webrl.run.config import WebRLConfig

RESERVED_KEYS = ("preset", "overrides")


def trial_config(config: Mapping[str, Any], run_dir: str = "") -> WebRLConfig:
    """A `WebRLConfig` from a Tune config: `preset`, `overrides` (key=value strings) and any
    dotted keys (`"learner.optim.lr": 3e-4`); `run_dir` (if given) becomes run.run_dir."""
    overrides = list(config.get("overrides", ()))
    overrides += [f"{k}={_literal(v)}" for k, v in config.items() if k not in RESERVED_KEYS]
    if run_dir:
        overrides.append(f"run.run_dir={run_dir}")
    return load_config(WebRLConfig, config.get("preset") or None, overrides)


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_literal(v) for v in value) + "]"
    return str(value)


class WebRLTrainable(tune.Trainable):
    """One webrl run as a Tune trial; a Tune iteration is one RL iteration."""

    def setup(self, config: dict) -> None:
        import ray

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        from webrl.run.trainer import Trainer

        self.webrl_config = trial_config(config, run_dir=str(Path(self.logdir) / "run"))
        self.trainer = Trainer(self.webrl_config, placement_group=ray.util.get_current_placement_group())
        self.trainer.prepare(evaluate_before=False)

    def step(self) -> dict:
        metrics = self.trainer.step()
        return {k: v for k, v in metrics.items() if isinstance(v, (int, float))}

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        self.trainer.save(Path(checkpoint_dir) / "learner")
        return None

    def load_checkpoint(self, checkpoint: Any) -> None:
        folder = checkpoint if isinstance(checkpoint, (str, os.PathLike)) else checkpoint.get("path")
        self.trainer.load(Path(folder) / "learner")

    def reset_config(self, new_config: dict) -> bool:
        self.cleanup()
        self.setup(new_config)
        self.config = new_config
        return True

    def cleanup(self) -> None:
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            trainer.close()
            self.trainer = None

    @classmethod
    def default_resource_request(cls, config: dict) -> tune.PlacementGroupFactory:
        from webrl.run.resources import run_layout

        return tune.PlacementGroupFactory(run_layout(trial_config(config)).bundles, strategy="PACK")

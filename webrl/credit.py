"""Credit assignment: scored trajectories -> learner samples, one pure in-process function.

    samples, metrics = trajectories_to_samples(trajectories, "grpo", config.learner.grpo)

Notation: N trajectories that are trained on (status "ok" and scored), G groups among them, S
turn samples (the turns of the N trajectories that have sampled tokens).

The advantage stage is chosen by objective from `ADVANTAGE_STAGES`, a plain dict whose entries
all take `(trajectories, objective config)` and return `(per-trajectory advantages (N,), keep
mask (N,), metrics)`, as `webrl.algos` dispatches its estimators. GRPO's stage normalises each
trajectory's outcome reward within its group (`algos.group_advantages`) and the trajectory's
advantage is broadcast to every turn (the recipe's choice). Multi-turn PPO needs per-turn values
and returns that nothing produces yet, so "ppo" has no stage here and `WebRLConfig` refuses it.

No Ray, no model, no I/O: a test builds trajectories by hand and checks the samples.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from webrl.types import Trajectory

AdvantageStage = Callable[[Sequence[Trajectory], Any], tuple[Tensor, Tensor, dict[str, float]]]


def grpo_stage(trajectories: Sequence[Trajectory], config: Any) -> tuple[Tensor, Tensor, dict[str, float]]:
    """GRPO: group-normalised outcome rewards. Groups are numbered in order of first appearance.

    Returns advantages (N,), keep (N,) bool (False: a zero-variance group the config filters
    out), and the estimator's metrics.
    """
    from webrl.algos import group_advantages

    groups = {g: i for i, g in enumerate(dict.fromkeys(t.group_id for t in trajectories))}
    rewards = torch.tensor([t.reward for t in trajectories], dtype=torch.float32)  # (N,)
    group_index = torch.tensor([groups[t.group_id] for t in trajectories])  # (N,)
    result = group_advantages(rewards, group_index, config)
    return result.advantages, result.keep, dict(result.metrics)


ADVANTAGE_STAGES: dict[str, AdvantageStage] = {"grpo": grpo_stage}


def trajectories_to_samples(trajectories: Sequence[Trajectory], objective: str,
                            config: Any) -> tuple[list, dict[str, float]]:
    """Learner samples (S of them, trajectory order, turns in time order) and the stage's metrics.

    Trajectories that were dropped or never scored are left out first; with none left the
    result is ([], {"kept_trajectories": 0.0}) and the trainer skips the update.
    """
    from webrl.learner.samples import samples_from_trajectories

    if objective not in ADVANTAGE_STAGES:
        raise ValueError(f"no advantage stage for objective {objective!r}; stages: {sorted(ADVANTAGE_STAGES)}")
    trained = [t for t in trajectories if t.status == "ok" and t.reward is not None]
    if not trained:
        return [], {"kept_trajectories": 0.0}
    advantages, keep, metrics = ADVANTAGE_STAGES[objective](trained, config)
    return samples_from_trajectories(trained, advantages.tolist(), keep.tolist()), metrics

"""Credit assignment: scored trajectories -> learner samples, pure in-process functions.

    samples, metrics = trajectories_to_samples(trajectories, "grpo", config.learner.objective_config)
    samples, metrics = gae_stage(samples, values, config.learner.objective_config)   # PPO, once values exist

Notation: N trajectories that are trained on (status "ok" and scored), G groups among them, S
turn samples (the turns of the N trajectories that have sampled tokens).

The stage is chosen by objective from `ADVANTAGE_STAGES`, a plain dict whose entries all take
`(trajectories, objective config)` and return `(samples (S,), metrics)`, as `webrl.algos`
dispatches its estimators.

- "grpo": each trajectory's outcome reward is normalised within its group
  (`algos.group_advantages`) and broadcast to every turn (the recipe's choice).
  With `grpo.step.weight` > 0, GiGPO's step-level advantages from repeated page states are
  added per turn (`algos.step_advantages`).
- "ppo": every trajectory is trained on (the value baseline, not the group, gives the signal,
  so nothing is filtered); each turn sample carries its reward r_t (the outcome on the
  trajectory's last turn sample, 0 before). Advantages need per-turn values V(s_t) of the
  weights about to be updated, which only the learner can compute: `LearnerGroup` runs
  `gae_stage` at the start of each update, on the same forward pass that gives the proximal
  log-probs, so PPO costs no extra pass when ppo_epochs x mini_batches > 1.

KL trust region in the rewards (`loss.kl_mode="reward"`, needs `learner.reference`): the KL to
the frozen reference needs the reference's log-probs, which only the learner has, so it enters
after this stage. PPO: each turn's KL (start-of-update policy vs reference, summed over its
tokens) comes off the turn reward before GAE (`gae_stage(kl_penalty=...)`). GRPO: the per-token
KL comes off the group-normalised advantage inside the objective (`algos.objectives.grpo`,
which says why it is after the normalisation).

No Ray, no model, no I/O: a test builds trajectories by hand and checks the samples.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

import torch

from webrl.types import Trajectory

AdvantageStage = Callable[[Sequence[Trajectory], Any], tuple[list, dict[str, float]]]

SUCCESS_THRESHOLD = 0.5
"""PPO's success_rate metric counts rewards >= this (GRPO's comes from its advantage config)."""


def _group_numbers(trajectories: Sequence[Trajectory]) -> torch.Tensor:
    """(N,) long: group ids numbered in order of first appearance."""
    groups = {g: i for i, g in enumerate(dict.fromkeys(t.group_id for t in trajectories))}
    return torch.tensor([groups[t.group_id] for t in trajectories])


def grpo_stage(trajectories: Sequence[Trajectory], config: Any) -> tuple[list, dict[str, float]]:
    """GRPO: group-normalised outcome rewards, broadcast to every turn of the trajectory; the
    trajectories of zero-variance groups are left out when the config filters them.

    With config.step.weight = w > 0 (GiGPO), each turn sample's advantage becomes
    A^E + w * A^S (`algos.step_advantages`): turns of a group that acted on the same page state
    (`turn_state_key`) are compared by their discounted returns. A turn of a filtered group is
    then kept when its step part is non-zero: an all-success group still says which turns
    reached the goal sooner from a shared state (with gamma < 1). Such a trajectory is kept in
    part (`step_kept_samples` counts its turns; `kept_trajectories` counts only whole ones), and
    with a per-trajectory aggregation its kept turns carry the trajectory's whole weight. The
    discount runs over sampled turns (turns without sampled tokens, e.g. scripted ones, are not
    steps of the return).
    """
    from webrl.algos import group_advantages, step_advantages
    from webrl.learner.samples import samples_from_trajectories

    rewards = torch.tensor([t.reward for t in trajectories], dtype=torch.float32)  # (N,)
    groups = _group_numbers(trajectories)
    result = group_advantages(rewards, groups, config)
    keep = result.keep.tolist()
    if config.step.weight == 0:
        return samples_from_trajectories(trajectories, result.advantages.tolist(), keep), dict(result.metrics)
    samples = samples_from_trajectories(trajectories, result.advantages.tolist())  # (S,) every turn
    trajectory = torch.tensor([s.trajectory_index for s in samples])
    keys = [turn_state_key(trajectories[s.trajectory_index], s.trajectory_index, s.turn_index) for s in samples]
    combined, step, metrics = step_advantages(
        torch.tensor([s.advantage for s in samples], dtype=torch.float64),
        torch.tensor([s.reward for s in samples], dtype=torch.float64), keys, groups[trajectory], trajectory,
        config.step)
    kept = [dataclasses.replace(s, advantage=float(a)) for s, a, part in zip(samples, combined.tolist(), step.tolist())
            if keep[s.trajectory_index] or part != 0.0]
    metrics.update(result.metrics, step_kept_samples=float(sum(not keep[s.trajectory_index] for s in kept)))
    return kept, metrics


def turn_state_key(trajectory: Trajectory, n: int, t: int) -> str:
    """The page state turn t of trajectory n acted on (`algos.state_key`: URL + element list). A
    turn with neither recorded (an imported step) gets a key of its own, so it joins no step group."""
    from webrl.algos import state_key

    observation = trajectory.turns[t].observation
    if not (observation.url or observation.elements_text):
        return f"\x00unrecorded/{n}/{t}"
    return state_key(observation.url, observation.elements_text)


def ppo_stage(trajectories: Sequence[Trajectory], config: Any) -> tuple[list, dict[str, float]]:
    """PPO, trajectory part: every turn sample with its turn reward and advantage 0 (GAE fills
    the advantage in, `gae_stage`)."""
    from webrl.learner.samples import samples_from_trajectories

    rewards = torch.tensor([t.reward for t in trajectories], dtype=torch.float32)  # (N,)
    samples = samples_from_trajectories(trajectories, [0.0] * len(trajectories))
    metrics = {"reward_mean": float(rewards.mean()), "success_rate": float((rewards >= SUCCESS_THRESHOLD).float().mean()),
               "num_groups": float(len(set(t.group_id for t in trajectories))),
               "filtered_groups": 0.0, "kept_trajectories": float(len(trajectories))}
    return samples, metrics


def gae_stage(samples: Sequence[Any], values: Sequence[float], config: Any,
              kl_penalty: Optional[Sequence[float]] = None) -> tuple[list, dict[str, float]]:
    """PPO, value part: turn-level GAE over each trajectory's turn samples.

    samples: (S,) `LearnerSample`s in trajectory order, turns in time order (what `ppo_stage`
    gives), with `reward` set; values: (S,) V(s_t) of the weights about to be updated, at each
    turn's last prompt token; kl_penalty: (S,) each turn's KL to the reference summed over its
    response tokens, or None. With config.loss.kl_mode="reward" the turn reward becomes
    r_t - kl_coef * kl_t before GAE (the InstructGPT / verl placement). Returns the samples with
    advantage (whitened over the S samples when config.whiten_advantages), old_value = V(s_t) and
    value_return = A_t + V(s_t) (before whitening), and the estimator's metrics.
    """
    from webrl.algos import ppo_advantages

    if len(values) != len(samples):
        raise ValueError(f"gae_stage got {len(values)} values for {len(samples)} samples")
    if kl_penalty is not None and len(kl_penalty) != len(samples):
        raise ValueError(f"gae_stage got {len(kl_penalty)} KL penalties for {len(samples)} samples")
    if not samples:
        return [], {}
    last: dict[int, int] = {}
    for s in samples:  # turn_gae reads each trajectory's samples in time order
        if s.turn_index <= last.get(s.trajectory_index, -1):
            raise ValueError(f"gae_stage needs each trajectory's samples in time order: trajectory "
                             f"{s.trajectory_index} has turn {s.turn_index} after turn {last[s.trajectory_index]}")
        last[s.trajectory_index] = s.turn_index
    rewards = torch.tensor([s.reward for s in samples], dtype=torch.float64)  # (S,)
    v = torch.tensor([float(x) for x in values], dtype=torch.float64)  # (S,)
    trajectory = torch.tensor([s.trajectory_index for s in samples])  # (S,)
    kl = None if kl_penalty is None else torch.tensor([float(x) for x in kl_penalty], dtype=torch.float64)  # (S,)
    advantages, returns, metrics = ppo_advantages(rewards, v, trajectory, config, kl_penalty=kl)
    if kl is not None:
        metrics["kl_penalty_mean"] = float(kl.mean())
    out = [dataclasses.replace(s, advantage=float(a), old_value=float(x), value_return=float(r))
           for s, a, x, r in zip(samples, advantages.tolist(), v.tolist(), returns.tolist())]
    return out, metrics


ADVANTAGE_STAGES: dict[str, AdvantageStage] = {"grpo": grpo_stage, "ppo": ppo_stage}


def trajectories_to_samples(trajectories: Sequence[Trajectory], objective: str,
                            config: Any) -> tuple[list, dict[str, float]]:
    """Learner samples (S of them, trajectory order, turns in time order) and the stage's metrics.

    Trajectories that were dropped or never scored are left out first; with none left the
    result is ([], {"kept_trajectories": 0.0}) and the trainer skips the update.
    """
    if objective not in ADVANTAGE_STAGES:
        raise ValueError(f"no advantage stage for objective {objective!r}; stages: {sorted(ADVANTAGE_STAGES)}")
    trained = [t for t in trajectories if t.status == "ok" and t.reward is not None]
    if not trained:
        return [], {"kept_trajectories": 0.0}
    return ADVANTAGE_STAGES[objective](trained, config)

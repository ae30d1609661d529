"""Advantage estimators for multi-turn web episodes.

Notation: N trajectories (or turn samples where said), G trajectories per group (one task, one
rollout), B turn samples, T tokens. `group_index` (N,) holds group ids that need not be 0..K-1
(rows of one group share the id); `trajectory_index` (B,) holds each turn sample's trajectory id
(row of the per-trajectory tensors for `broadcast_to_turns`; any ids for the GAE helpers).

Outcome estimators share one signature, `(rewards (N,), group_index (N,), *, eps) -> (N,)`, and
are dispatched by name from ADVANTAGE_ESTIMATORS:

- "grpo":   A_i = (r_i - mean_g) / (std_g + eps), std with Bessel's correction (G - 1).
- "drgrpo": A_i = r_i - mean_g (Dr. GRPO: dividing by the std over-weights groups that nearly
            all succeed or all fail, so it is left out).
- "rloo":   A_i = r_i - mean of the other G - 1 rewards = G / (G - 1) * (r_i - mean_g).

The trajectory advantage is then broadcast to every turn sample of the trajectory
(`broadcast_to_turns`) and to every trained token of that sample (`broadcast_to_tokens`), as in
the OpenWebRL recipe.

Departures and choices where the papers are silent:
- A group of size 1 has no baseline: its advantage is 0 for every estimator (verl instead passes
  the raw reward through). It is also a zero-variance group, so the filter drops it.
- Zero-variance groups give exactly 0 advantage (never NaN); `zero_variance_filter` reports them
  so the trainer can drop them (dynamic sampling) and log how many.
- Success-adaptive negative scaling (GUI-Libra) multiplies negative advantages by s(p), p the
  group's success rate (fraction of rewards >= success_threshold). The paper's exact form is not
  public. Default "linear": s(p) = floor + (1 - floor) * p with floor 0.25: when most of the group
  fails (low p), a failure says little about what would have worked and may be a valid action the
  checker did not recognise (partial verifiability), so its push-down is damped; when most of the
  group succeeds, a failure is a clear deviation and keeps (almost) full weight. "sqrt" damps
  less at mid p; "none" is s = 1. Positive advantages are never scaled. `GroupAdvantageConfig`
  leaves it off (negative_scale="none") because the OpenWebRL recipe does not use it; set
  negative_scale="linear" for GUI-Libra-style RL.
- Turn-level GAE treats each turn (one agent step) as one time step; the last turn of every
  trajectory is terminal (next value 0). A horizon cut-off is scored by the reward function like
  any ending, so it is not bootstrapped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, ClassVar

import torch
from torch import Tensor

from .aggregation import index_sum
from webrl.config import fixed

__all__ = [
    "ADVANTAGE_ESTIMATORS", "NEGATIVE_SCALES", "GroupAdvantageConfig", "grpo_advantages",
    "drgrpo_advantages", "rloo_advantages", "zero_variance_filter", "group_success_rate",
    "scale_negative_advantages", "broadcast_to_turns", "broadcast_to_tokens", "outcome_turn_rewards",
    "turn_gae", "whiten",
]


def _group_moments(rewards: Tensor, group_index: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-row group size, mean and unbiased variance (0 for groups of one). All (N,), float64."""
    r = rewards.detach().to(torch.float64)
    counts, inverse = index_sum(torch.ones_like(r), group_index)  # (K,), (N,)
    sums, _ = index_sum(r, group_index)
    mean = sums / counts  # (K,)
    sq_dev, _ = index_sum((r - mean[inverse]) ** 2, group_index)
    var = torch.where(counts > 1, sq_dev / (counts - 1).clamp(min=1), torch.zeros_like(sq_dev))
    return counts[inverse], mean[inverse], var[inverse]


def grpo_advantages(rewards: Tensor, group_index: Tensor, *, eps: float = 1e-6,
                    std_normalize: bool = True) -> Tensor:
    """GRPO group-normalised advantages. rewards, group_index: (N,). Returns (N,) in rewards' dtype.

    std_normalize=False is Dr. GRPO (mean-centred only).
    """
    counts, mean, var = _group_moments(rewards, group_index)
    adv = rewards.detach().to(torch.float64) - mean
    if std_normalize:
        # a group of identical rewards must give exactly 0, also with eps=0 (mean's rounding
        # error divided by a ~0 std would otherwise give +-1 or 0/0)
        flat = ~zero_variance_filter(rewards, group_index, atol=0.0)[0]
        adv = torch.where(flat, torch.zeros_like(adv), adv / torch.where(flat, 1.0, var.sqrt() + eps))
    adv = torch.where(counts > 1, adv, torch.zeros_like(adv))
    return adv.to(rewards.dtype)


def drgrpo_advantages(rewards: Tensor, group_index: Tensor, *, eps: float = 1e-6) -> Tensor:
    """Dr. GRPO: r_i - mean_g. `eps` is accepted for the shared signature and unused."""
    return grpo_advantages(rewards, group_index, eps=eps, std_normalize=False)


def rloo_advantages(rewards: Tensor, group_index: Tensor, *, eps: float = 1e-6) -> Tensor:
    """RLOO: r_i minus the mean of the other rewards of its group. `eps` unused."""
    counts, mean, _ = _group_moments(rewards, group_index)
    scale = counts / (counts - 1).clamp(min=1)
    adv = torch.where(counts > 1, scale * (rewards.detach().to(torch.float64) - mean), torch.zeros_like(mean))
    return adv.to(rewards.dtype)


ADVANTAGE_ESTIMATORS: dict[str, Callable[..., Tensor]] = {
    "grpo": grpo_advantages,
    "drgrpo": drgrpo_advantages,
    "rloo": rloo_advantages,
}


def zero_variance_filter(rewards: Tensor, group_index: Tensor, *, atol: float = 1e-6) -> tuple[Tensor, int]:
    """Dynamic sampling: drop groups whose rewards are all equal (they carry no GRPO signal).

    Returns (keep (N,) bool, number of groups dropped). A group of one is zero-variance.
    """
    r = rewards.detach().to(torch.float64)
    _, inverse = torch.unique(group_index, return_inverse=True)
    num = int(inverse.max()) + 1 if inverse.numel() else 0
    fill = torch.full((num,), math.inf, dtype=r.dtype, device=r.device)
    lo = fill.scatter_reduce(0, inverse, r, reduce="amin")
    hi = (-fill).scatter_reduce(0, inverse, r, reduce="amax")
    flat = (hi - lo) <= atol  # (K,)
    return ~flat[inverse], int(flat.sum())


def group_success_rate(rewards: Tensor, group_index: Tensor, *, threshold: float = 0.5) -> Tensor:
    """Fraction of each row's group with reward >= threshold. Returns (N,) float."""
    success = (rewards.detach() >= threshold).to(torch.float64)
    hits, inverse = index_sum(success, group_index)
    counts, _ = index_sum(torch.ones_like(success), group_index)
    return (hits / counts)[inverse].to(rewards.dtype if rewards.is_floating_point() else torch.float32)


def _linear_scale(p: Tensor, floor: float) -> Tensor:
    return floor + (1.0 - floor) * p


def _sqrt_scale(p: Tensor, floor: float) -> Tensor:
    return floor + (1.0 - floor) * p.clamp(min=0).sqrt()


def _no_scale(p: Tensor, floor: float) -> Tensor:
    return torch.ones_like(p)


# Each entry: (success rate p (N,), floor) -> multiplier for negative advantages (N,).
NEGATIVE_SCALES: dict[str, Callable[[Tensor, float], Tensor]] = {
    "none": _no_scale,
    "linear": _linear_scale,
    "sqrt": _sqrt_scale,
}


def scale_negative_advantages(advantages: Tensor, success_rate: Tensor, *, scale: str = "linear",
                              floor: float = 0.25) -> Tensor:
    """Success-adaptive scaling (GUI-Libra): A_i <- s(p_i) * A_i where A_i < 0. All (N,)."""
    if scale not in NEGATIVE_SCALES:
        raise ValueError(f"unknown negative scale {scale!r}; allowed: {sorted(NEGATIVE_SCALES)}")
    factor = NEGATIVE_SCALES[scale](success_rate.to(advantages.dtype), floor)
    return torch.where(advantages < 0, advantages * factor, advantages)


def broadcast_to_turns(trajectory_values: Tensor, trajectory_index: Tensor) -> Tensor:
    """Give every turn sample its trajectory's value.

    trajectory_values: (N,) one per trajectory, row k for trajectory id k (ids 0..N-1 here).
    trajectory_index: (B,) long. Returns (B,).
    """
    return trajectory_values[trajectory_index]


def broadcast_to_tokens(sample_values: Tensor, loss_mask: Tensor) -> Tensor:
    """(B,) per-sample values -> (B, T), the value on trained tokens and 0 elsewhere."""
    values = sample_values if sample_values.is_floating_point() else sample_values.float()
    return torch.where(loss_mask.bool(), values[:, None], torch.zeros((), dtype=values.dtype, device=values.device))


def outcome_turn_rewards(trajectory_rewards: Tensor, trajectory_index: Tensor) -> Tensor:
    """Per-turn rewards for GAE: the trajectory reward on its last turn sample, 0 on the others.

    trajectory_rewards: (B,) the trajectory's reward repeated on each of its turn samples (or any
    per-sample value); trajectory_index: (B,), turns of a trajectory in time order. Returns (B,).
    """
    ids = trajectory_index.tolist()
    is_last = [False] * len(ids)
    seen: set[int] = set()
    for i in range(len(ids) - 1, -1, -1):
        if ids[i] not in seen:
            seen.add(ids[i])
            is_last[i] = True
    last = torch.tensor(is_last, dtype=torch.bool, device=trajectory_index.device)
    return torch.where(last, trajectory_rewards, torch.zeros_like(trajectory_rewards))


def turn_gae(rewards: Tensor, values: Tensor, trajectory_index: Tensor, *, gamma: float = 1.0,
             lam: float = 1.0) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation across the turns of each trajectory.

    rewards, values: (B,) per turn sample; trajectory_index: (B,). Turns of one trajectory appear
    in time order; trajectories may interleave. Per trajectory, with V_{t+1} = 0 after the last turn:
        delta_t = r_t + gamma * V_{t+1} - V_t,   A_t = delta_t + gamma * lam * A_{t+1}.
    Returns (advantages (B,), returns = advantages + values (B,)), detached.
    """
    r, v, idx = rewards.detach().double().tolist(), values.detach().double().tolist(), trajectory_index.tolist()
    next_value: dict[int, float] = {}
    next_adv: dict[int, float] = {}
    adv = [0.0] * len(r)
    for i in range(len(r) - 1, -1, -1):
        k = idx[i]
        delta = r[i] + gamma * next_value.get(k, 0.0) - v[i]
        adv[i] = delta + gamma * lam * next_adv.get(k, 0.0)
        next_value[k], next_adv[k] = v[i], adv[i]
    advantages = torch.tensor(adv, dtype=values.dtype, device=values.device)
    return advantages, advantages + values.detach()


def whiten(x: Tensor, *, eps: float = 1e-8) -> Tensor:
    """(x - mean) / (std + eps) over all entries of x (a 1-D tensor); 0 for a single entry."""
    if x.numel() < 2:
        return torch.zeros_like(x)
    return (x - x.mean()) / (x.std() + eps)


@dataclass
class GroupAdvantageConfig:
    """How trajectory rewards become advantages (GRPO family)."""

    estimator: str = "grpo"
    """One of ADVANTAGE_ESTIMATORS: "grpo" (mean/std), "drgrpo" (mean only), "rloo"."""
    eps: ClassVar[float] = 1e-6
    """Added to the group std before dividing ("grpo" only); a constant, not a setting."""
    filter_zero_variance: bool = True
    """Drop groups whose rewards are all equal (dynamic sampling); they are counted in metrics."""
    negative_scale: str = "none"
    """Success-adaptive scaling of negative advantages: one of NEGATIVE_SCALES ("none", "linear",
    "sqrt"); "linear" is the documented GUI-Libra-style default when enabled."""
    negative_scale_floor: float = fixed(0.25, "the multiplier of negative advantages in a group where nothing succeeded")
    """s(0): the multiplier of negative advantages in a group where nothing succeeded."""
    success_threshold: float = fixed(0.5, "a reward at or above it counts as a success for the group success rate")
    """A reward >= this counts as a success for the group success rate."""

    def __post_init__(self) -> None:
        if self.estimator not in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"GroupAdvantageConfig.estimator must be one of {sorted(ADVANTAGE_ESTIMATORS)}, "
                             f"got {self.estimator!r}")
        if self.negative_scale not in NEGATIVE_SCALES:
            raise ValueError(f"GroupAdvantageConfig.negative_scale must be one of {sorted(NEGATIVE_SCALES)}, "
                             f"got {self.negative_scale!r}")
        if not 0.0 <= self.negative_scale_floor <= 1.0:
            raise ValueError(f"GroupAdvantageConfig.negative_scale_floor must be in [0, 1], "
                             f"got {self.negative_scale_floor}")

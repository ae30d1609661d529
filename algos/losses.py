"""Per-token policy losses, KL estimators, importance-sampling correction and the value loss.

Notation: B turn samples, T tokens. logprobs (B, T) are the learner's log-probs of input_ids
under the current parameters; old_logprobs (B, T) those the ratio is taken against (the rollout
log-probs, or the learner's own log-probs at the start of the update when they are recomputed);
advantages (B, T). Every function here is elementwise over (B, T) and returns (B, T): masking and
reduction happen in `aggregation`. Inputs must be finite where they are read; `objectives`
replaces masked positions by 0 before calling in, so prompt and padding never matter.

Policy losses share one signature, dispatched by name from POLICY_LOSSES:
    (logprobs, old_logprobs, advantages, *, clip_eps_low, clip_eps_high, dual_clip_c) -> PolicyLoss

- "ppo_clip": L = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)), r = exp(logp - old). Separate
  eps_low / eps_high is DAPO's clip-higher (OpenWebRL: 0.2 / 0.28). With dual_clip_c = c > 1,
  tokens with A < 0 are further capped at -A c (dual-clip PPO), so a huge ratio on a bad token
  cannot blow the loss up.
- "vanilla": L = -A r, no clipping (importance-weighted policy gradient; for ablations).

Numerical choices: log-ratios are clamped to [-20, 20] before exp, so extreme log-prob gaps give
finite losses (the clamp also stops gradients beyond it; such tokens are clipped by PPO anyway).

KL estimators (Schulman, "Approximating KL divergence"), with d = log pi - log pi_ref, samples
from pi: "k1" = d (unbiased, can be negative), "k2" = d^2 / 2, "k3" = exp(-d) + d - 1 (unbiased,
non-negative, low variance). Used either as a loss term or as a reward penalty (`objectives`).

Truncated importance sampling (asynchronous rollouts): when the learner recomputes its own
log-probs pi_prox at the start of an update, the ratio is taken against pi_prox and each token is
reweighted by w = min(pi_prox / mu, cap) (detached), mu the rollout (behaviour) policy. This
corrects the mismatch between the inference engine and the learner, or a stale policy version,
while bounding the variance (the "TIS" fix of Yao et al. and the decoupled PPO of AReaL).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

from .aggregation import LOSS_AGGREGATIONS
from webrl.config import fixed

__all__ = [
    "LOG_RATIO_CLAMP", "POLICY_LOSSES", "KL_ESTIMATORS", "KL_MODES", "PolicyLoss", "PolicyLossConfig",
    "ppo_clip_loss", "vanilla_policy_loss", "kl_k1", "kl_k2", "kl_k3", "truncated_is_weights",
    "clipped_value_loss",
]

LOG_RATIO_CLAMP = 20.0
KL_MODES = ("loss", "reward")


@dataclass
class PolicyLoss:
    """Per-token policy loss and what happened to each token. All (B, T).

    loss: the per-token loss L. ratio: exp(logp - old), detached. clipped: the clipped branch
    was taken (the token gives no gradient). dual_clipped: the dual-clip cap was taken.
    """

    loss: Tensor
    ratio: Tensor
    clipped: Tensor
    dual_clipped: Tensor


def _log_ratio(logprobs: Tensor, other: Tensor) -> Tensor:
    return (logprobs - other).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def ppo_clip_loss(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, *, clip_eps_low: float = 0.2,
                  clip_eps_high: float = 0.28, dual_clip_c: Optional[float] = None) -> PolicyLoss:
    """PPO clipped surrogate with clip-higher and optional dual-clip. All inputs (B, T)."""
    ratio = torch.exp(_log_ratio(logprobs, old_logprobs.detach()))  # (B, T)
    adv = advantages.detach()
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_eps_low, 1.0 + clip_eps_high)
    loss = torch.maximum(unclipped, clipped)
    took_clip = clipped > unclipped
    dual = torch.zeros_like(took_clip)
    if dual_clip_c is not None:
        cap = -adv * dual_clip_c
        dual = (adv < 0) & (loss > cap)
        loss = torch.where(dual, torch.minimum(loss, cap), loss)
    return PolicyLoss(loss, ratio.detach(), took_clip, dual)


def vanilla_policy_loss(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, *, clip_eps_low: float = 0.2,
                        clip_eps_high: float = 0.28, dual_clip_c: Optional[float] = None) -> PolicyLoss:
    """-A * r without clipping; the clip arguments are accepted for the shared signature, unused."""
    ratio = torch.exp(_log_ratio(logprobs, old_logprobs.detach()))
    never = torch.zeros_like(ratio, dtype=torch.bool)
    return PolicyLoss(-advantages.detach() * ratio, ratio.detach(), never, never)


POLICY_LOSSES: dict[str, Callable[..., PolicyLoss]] = {
    "ppo_clip": ppo_clip_loss,
    "vanilla": vanilla_policy_loss,
}


def kl_k1(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """d = log pi - log pi_ref. (B, T)."""
    return _log_ratio(logprobs, ref_logprobs.detach())


def kl_k2(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """d^2 / 2. (B, T)."""
    return 0.5 * _log_ratio(logprobs, ref_logprobs.detach()) ** 2


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """exp(-d) + d - 1 >= 0. (B, T)."""
    d = _log_ratio(logprobs, ref_logprobs.detach())
    return torch.exp(-d) + d - 1.0


KL_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


def truncated_is_weights(proximal_logprobs: Tensor, rollout_logprobs: Tensor, *, cap: float) -> Tensor:
    """w = min(exp(prox - rollout), cap), detached. (B, T)."""
    log_w = (proximal_logprobs.detach() - rollout_logprobs.detach()).clamp(-LOG_RATIO_CLAMP, math.log(cap))
    return torch.exp(log_w)


def clipped_value_loss(values: Tensor, old_values: Tensor, returns: Tensor, *,
                       clip_eps: Optional[float] = None) -> tuple[Tensor, Tensor]:
    """PPO value loss per turn sample. values, old_values, returns: (B,).

    L = 0.5 * max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2); without clip_eps,
    0.5 * (V - R)^2. Returns (loss (B,), clipped (B,) bool: the clipped branch was taken).
    """
    returns, old_values = returns.detach(), old_values.detach()
    unclipped = (values - returns) ** 2
    if clip_eps is None:
        return 0.5 * unclipped, torch.zeros_like(unclipped, dtype=torch.bool)
    v_clip = old_values + (values - old_values).clamp(-clip_eps, clip_eps)
    clipped = (v_clip - returns) ** 2
    return 0.5 * torch.maximum(unclipped, clipped), clipped > unclipped


@dataclass
class PolicyLossConfig:
    """The policy-gradient part of GRPO and PPO: surrogate, KL, entropy and aggregation."""

    policy_loss: str = "ppo_clip"
    """One of POLICY_LOSSES: "ppo_clip", "vanilla"."""
    clip_eps_low: float = 0.2
    """Lower clip: the ratio is clipped below at 1 - clip_eps_low."""
    clip_eps_high: float = 0.28
    """Upper clip (clip-higher): the ratio is clipped above at 1 + clip_eps_high."""
    dual_clip_c: Optional[float] = None
    """Dual-clip constant c > 1 (e.g. 3.0): tokens with A < 0 lose at most -A c. None disables."""
    tis_cap: Optional[float] = None
    """Truncated importance sampling cap (e.g. 2.0) on pi_prox / mu; needs proximal log-probs.
    None disables."""
    kl_coef: float = 0.0
    """Weight of the KL to the reference policy (0: no KL, no reference pass needed)."""
    kl_estimator: str = "k3"
    """One of KL_ESTIMATORS: "k1", "k2", "k3"."""
    kl_mode: str = "loss"
    """"loss": kl_coef * KL is added to the loss; "reward": a KL penalty instead, the loss then has
    no KL term (GRPO: the per-token KL comes off the group-normalised advantage,
    `objectives.kl_shaped_advantages`; PPO: each turn's summed KL comes off its reward before GAE)."""
    entropy_coef: float = 0.0
    """Entropy bonus weight: the loss gets -entropy_coef * aggregated entropy."""
    aggregation: str = "token-mean"
    """One of LOSS_AGGREGATIONS (see webrl.algos.aggregation)."""
    aggregation_constant: float = fixed(1.0, "C of the 'seq-mean-token-sum-norm' aggregation")
    """C of "seq-mean-token-sum-norm" (e.g. the per-turn response-token budget)."""

    def __post_init__(self) -> None:
        _one_of("PolicyLossConfig.policy_loss", self.policy_loss, POLICY_LOSSES)
        _one_of("PolicyLossConfig.kl_estimator", self.kl_estimator, KL_ESTIMATORS)
        _one_of("PolicyLossConfig.kl_mode", self.kl_mode, KL_MODES)
        _one_of("PolicyLossConfig.aggregation", self.aggregation, LOSS_AGGREGATIONS)
        if not 0.0 <= self.clip_eps_low < 1.0:
            raise ValueError(f"PolicyLossConfig.clip_eps_low must be in [0, 1), got {self.clip_eps_low}")
        if not self.clip_eps_high >= 0.0:
            raise ValueError(f"PolicyLossConfig.clip_eps_high must be >= 0, got {self.clip_eps_high}")
        if self.dual_clip_c is not None and not self.dual_clip_c > 1.0:
            raise ValueError(f"PolicyLossConfig.dual_clip_c must be None or > 1, got {self.dual_clip_c}")
        if self.tis_cap is not None and not self.tis_cap > 0.0:
            raise ValueError(f"PolicyLossConfig.tis_cap must be None or > 0, got {self.tis_cap}")
        for name in ("kl_coef", "entropy_coef"):
            if not getattr(self, name) >= 0.0:
                raise ValueError(f"PolicyLossConfig.{name} must be >= 0, got {getattr(self, name)}")
        if not self.aggregation_constant > 0.0:
            raise ValueError(f"PolicyLossConfig.aggregation_constant must be > 0, got {self.aggregation_constant}")


def _one_of(field: str, value: str, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{field} must be one of {sorted(allowed)}, got {value!r}")

"""GRPO, PPO and SFT objectives composed from the pure pieces of this package.

Notation: B turn samples, T tokens, N trajectories, m (B, T) = batch.loss_mask.

An objective never calls a model. The learner computes its outputs (`LearnerOutputs`: log-probs
(B, T) aligned with input_ids, optionally per-token entropy and per-turn values) and calls

    loss, metrics = OBJECTIVES[name](outputs, batch, config, extras=..., scale=...)

with one signature for all three. `batch` is a `webrl.types.Batch` (advantages already in
`batch.advantages`); `extras` (`BatchExtras`) carries what `Batch` does not: proximal log-probs for
truncated importance sampling, old values and returns for PPO, action / coordinate masks for SFT.
`metrics` maps names to floats.

Advantages are a separate stage run once on the whole rollout, before batching, because groups
and trajectories must not be split by micro-batching: `group_advantages` (GRPO family, with the
zero-variance filter whose `filtered_groups` count lands in its metrics) and `ppo_advantages`
(turn-level GAE).

Micro-batching: compute `full_batch_scale(batch, config, extras)` once on the full batch, pass
`scale.select(rows)` and `extras.select(rows)` with each micro-batch, and sum the micro-batch
losses (or backpropagate each): the gradients then equal the full batch's in every aggregation
mode (see `aggregation`). Without `scale`, the batch given is treated as the full batch.

Choices where the recipes are silent: KL and entropy terms use the policy loss's aggregation; the
value loss is a mean over turn samples with trained tokens; truncated IS weights multiply the
policy term only.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from webrl.types import Batch

from .advantages import (ADVANTAGE_ESTIMATORS, GroupAdvantageConfig, group_success_rate,
                         scale_negative_advantages, turn_gae, whiten, zero_variance_filter)
from .aggregation import LossScale, aggregate, aggregate_samples, loss_scale, masked_mean
from .losses import (KL_ESTIMATORS, POLICY_LOSSES, PolicyLossConfig, clipped_value_loss, kl_k3,
                     truncated_is_weights)
from .sft import SFTConfig, action_token_weights
from .step_advantages import StepAdvantageConfig

__all__ = [
    "OBJECTIVES", "GRPOConfig", "PPOConfig", "SFTConfig", "LearnerOutputs", "BatchExtras", "AdvantageResult",
    "grpo", "ppo", "sft", "group_advantages", "ppo_advantages", "kl_reward_penalty", "kl_shaped_advantages",
    "full_batch_scale",
]


@dataclass
class LearnerOutputs:
    """What the learner's forward pass produced for a batch.

    logprobs: (B, T) log-prob of each input_ids token under the current parameters (with grad).
    entropy: (B, T) per-token entropy of the policy, or None (needed when entropy_coef > 0).
    values: (B,) per-turn value predictions (PPO), or None.
    """

    logprobs: Tensor
    entropy: Optional[Tensor] = None
    values: Optional[Tensor] = None


@dataclass
class BatchExtras:
    """Per-sample inputs an objective may need that `Batch` does not carry.

    proximal_logprobs: (B, T) learner log-probs at the start of this update (no grad). When given,
      the PPO ratio is taken against them and batch.old_logprobs (rollout) only enter the
      truncated importance weights.
    old_values, returns: (B,) PPO value targets from `ppo_advantages`.
    action_mask, coordinate_mask: (B, T) tokens of the action / of its coordinates (SFT weights).
    """

    proximal_logprobs: Optional[Tensor] = None
    old_values: Optional[Tensor] = None
    returns: Optional[Tensor] = None
    action_mask: Optional[Tensor] = None
    coordinate_mask: Optional[Tensor] = None

    def select(self, index: Tensor | slice) -> "BatchExtras":
        """The rows of a micro-batch."""
        return BatchExtras(**{f.name: None if getattr(self, f.name) is None else getattr(self, f.name)[index]
                              for f in fields(self)})


@dataclass
class AdvantageResult:
    """advantages: (N,) per trajectory (0 where dropped); keep: (N,) bool, False for trajectories
    of zero-variance groups when filtering; metrics: names -> floats (incl. filtered_groups)."""

    advantages: Tensor
    keep: Tensor
    metrics: dict[str, float]


@dataclass
class GRPOConfig:
    """Multi-turn GRPO: group advantages per trajectory, broadcast to turns (plus, with
    step.weight > 0, GiGPO's step-level advantages), PPO-clip surrogate."""

    advantage: GroupAdvantageConfig = field(default_factory=GroupAdvantageConfig)
    """How rewards become advantages (estimator, zero-variance filter, negative scaling)."""
    loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    """Surrogate, clipping, KL, entropy and aggregation."""
    step: StepAdvantageConfig = field(default_factory=StepAdvantageConfig)
    """Step-level advantages from repeated page states (GiGPO); step.weight 0 (default) is off."""

    def __post_init__(self) -> None:
        if not isinstance(self.step, StepAdvantageConfig):
            raise ValueError(f"GRPOConfig.step must be a StepAdvantageConfig, got {type(self.step).__name__}")
        if not isinstance(self.advantage, GroupAdvantageConfig):
            raise ValueError(f"GRPOConfig.advantage must be a GroupAdvantageConfig, got {type(self.advantage).__name__}")
        if not isinstance(self.loss, PolicyLossConfig):
            raise ValueError(f"GRPOConfig.loss must be a PolicyLossConfig, got {type(self.loss).__name__}")


@dataclass
class PPOConfig:
    """Multi-turn PPO with a per-turn value estimate and turn-level GAE."""

    gamma: float = 1.0
    """Discount per turn (agent step)."""
    lam: float = 0.95
    """GAE lambda across turns."""
    whiten_advantages: bool = True
    """Normalise advantages to mean 0 / std 1 over the rollout's turn samples."""
    value_coef: float = 0.5
    """Weight of the value loss."""
    value_clip_eps: Optional[float] = 0.2
    """Clip range of the value update around the old value; None disables clipping."""
    loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    """Surrogate, clipping, KL, entropy and aggregation."""

    def __post_init__(self) -> None:
        for name in ("gamma", "lam"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"PPOConfig.{name} must be in [0, 1], got {getattr(self, name)}")
        if not self.value_coef >= 0.0:
            raise ValueError(f"PPOConfig.value_coef must be >= 0, got {self.value_coef}")
        if self.value_clip_eps is not None and not self.value_clip_eps > 0.0:
            raise ValueError(f"PPOConfig.value_clip_eps must be None or > 0, got {self.value_clip_eps}")
        if not isinstance(self.loss, PolicyLossConfig):
            raise ValueError(f"PPOConfig.loss must be a PolicyLossConfig, got {type(self.loss).__name__}")


# -- advantage stages (run once per rollout, before batching) --------------------------------

def kl_reward_penalty(logprobs: Tensor, ref_logprobs: Tensor, loss_mask: Tensor, *, estimator: str = "k1") -> Tensor:
    """Per-sample KL summed over trained tokens, (B,), detached: the penalty of kl_mode="reward".
    Sum it per trajectory (`aggregation.index_sum`) for trajectory-level rewards."""
    mask = loss_mask.bool()
    kl = KL_ESTIMATORS[estimator](_zero(logprobs, mask), _zero(ref_logprobs, mask)).detach()
    return torch.where(mask, kl, torch.zeros_like(kl)).sum(dim=-1)


def group_advantages(rewards: Tensor, group_index: Tensor, config: GRPOConfig, *,
                     kl_penalty: Optional[Tensor] = None) -> AdvantageResult:
    """Trajectory advantages for GRPO. rewards, group_index, kl_penalty: (N,) per trajectory.

    With config.loss.kl_mode == "reward", rewards - kl_coef * kl_penalty enter the estimator;
    the zero-variance filter and the success rate always read the raw outcome rewards.
    """
    adv_cfg, loss_cfg = config.advantage, config.loss
    shaped = rewards.to(torch.float32) if not rewards.is_floating_point() else rewards
    if kl_penalty is not None and loss_cfg.kl_mode == "reward" and loss_cfg.kl_coef > 0:
        shaped = shaped - loss_cfg.kl_coef * kl_penalty.to(shaped.dtype)
    if adv_cfg.filter_zero_variance:
        keep, filtered = zero_variance_filter(rewards, group_index)
    else:
        keep, filtered = torch.ones(rewards.shape, dtype=torch.bool, device=rewards.device), 0
    adv = ADVANTAGE_ESTIMATORS[adv_cfg.estimator](shaped, group_index, eps=adv_cfg.eps)
    success = group_success_rate(rewards, group_index, threshold=adv_cfg.success_threshold)
    if adv_cfg.negative_scale != "none":
        adv = scale_negative_advantages(adv, success, scale=adv_cfg.negative_scale, floor=adv_cfg.negative_scale_floor)
    adv = torch.where(keep, adv, torch.zeros_like(adv))
    num_groups = int(torch.unique(group_index).numel())
    kept = adv[keep]
    metrics = {
        "reward_mean": float(rewards.float().mean()) if rewards.numel() else 0.0,
        "success_rate": float((rewards >= adv_cfg.success_threshold).float().mean()) if rewards.numel() else 0.0,
        "num_groups": float(num_groups),
        "filtered_groups": float(filtered),
        "kept_trajectories": float(keep.sum()),
        **_stats("advantage", kept),
    }
    return AdvantageResult(adv, keep, metrics)


def ppo_advantages(turn_rewards: Tensor, values: Tensor, trajectory_index: Tensor, config: PPOConfig, *,
                   kl_penalty: Optional[Tensor] = None) -> tuple[Tensor, Tensor, dict[str, float]]:
    """Turn-level GAE. turn_rewards, values, trajectory_index, kl_penalty: (B,) per turn sample
    (turns of a trajectory in time order; `advantages.outcome_turn_rewards` puts an outcome
    reward on the last turn). Returns (advantages (B,), returns (B,), metrics); returns are
    computed before whitening."""
    rewards = turn_rewards
    if kl_penalty is not None and config.loss.kl_mode == "reward" and config.loss.kl_coef > 0:
        rewards = rewards - config.loss.kl_coef * kl_penalty.to(rewards.dtype)
    adv, returns = turn_gae(rewards, values, trajectory_index, gamma=config.gamma, lam=config.lam)
    metrics = {**_stats("advantage_raw", adv), **_stats("return", returns)}
    if config.whiten_advantages:
        adv = whiten(adv)
    return adv, returns, metrics


# -- objectives ------------------------------------------------------------------------------

def full_batch_scale(batch: Batch, config: Any, extras: Optional[BatchExtras] = None) -> LossScale:
    """The aggregation weights and normalisers of `config`'s objective over the whole `batch`."""
    if isinstance(config, SFTConfig):
        total = _sft_weights(batch, config, extras).sum()  # sum(m * w)
        base = loss_scale(batch.loss_mask, "token-mean")
        return LossScale(torch.ones_like(base.sample_weight), torch.where(total > 0, total, torch.ones_like(total)),
                         base.num_samples)
    loss_cfg: PolicyLossConfig = config.loss
    return loss_scale(batch.loss_mask, loss_cfg.aggregation, trajectory_index=batch.trajectory_index,
                      constant=loss_cfg.aggregation_constant)


def kl_shaped_advantages(advantages: Tensor, logprobs: Tensor, ref_logprobs: Tensor, loss_mask: Tensor, *,
                         kl_coef: float, estimator: str = "k1") -> Tensor:
    """(B, T) advantages - kl_coef * KL_t, detached, 0 off the mask: GRPO's kl_mode="reward".

    logprobs: (B, T) log-probs of the policy that the update starts from (the sampling policy);
    ref_logprobs: (B, T) the frozen reference's. KL_t is the per-token estimate
    KL_ESTIMATORS[estimator](logprobs, ref_logprobs): a fixed penalty, like a reward."""
    mask = loss_mask.bool()
    kl = KL_ESTIMATORS[estimator](_zero(logprobs, mask), _zero(ref_logprobs, mask)).detach()  # (B, T)
    return torch.where(mask, advantages - kl_coef * kl, torch.zeros_like(advantages))


def grpo(outputs: LearnerOutputs, batch: Batch, config: GRPOConfig, *, extras: Optional[BatchExtras] = None,
         scale: Optional[LossScale] = None) -> tuple[Tensor, dict[str, float]]:
    """GRPO loss on turn samples whose advantages are already in batch.advantages.

    kl_mode="reward" (kl_coef > 0): the per-token KL of the start-of-update policy (proximal
    log-probs when given, else the rollout's) to the reference is subtracted from the broadcast,
    group-normalised advantage (`kl_shaped_advantages`), as verl subtracts it from its token-level
    rewards. Why after the group normalisation and not as a sequence KL taken from the trajectory
    reward before it: the group baseline would cancel whatever drift the G samples share (a group
    that all moved away from the reference pays nothing) and divide the rest by the outcome
    rewards' std; per token and after, the penalty keeps its absolute size and lands on the tokens
    that drifted. `group_advantages(kl_penalty=...)` keeps the sequence form for callers that want it.
    """
    extras = extras or BatchExtras()
    scale = full_batch_scale(batch, config) if scale is None else scale
    loss_cfg = config.loss
    if loss_cfg.kl_mode == "reward" and loss_cfg.kl_coef > 0:
        if batch.ref_logprobs is None:
            raise ValueError("kl_coef > 0 with kl_mode='reward' needs batch.ref_logprobs (B, T)")
        start = batch.old_logprobs if extras.proximal_logprobs is None else extras.proximal_logprobs
        shaped = kl_shaped_advantages(batch.advantages, start, batch.ref_logprobs, batch.loss_mask,
                                      kl_coef=loss_cfg.kl_coef, estimator=loss_cfg.kl_estimator)
        batch = dataclasses.replace(batch, advantages=shaped)
    return _policy_terms(outputs, batch, loss_cfg, extras, scale)


def ppo(outputs: LearnerOutputs, batch: Batch, config: PPOConfig, *, extras: Optional[BatchExtras] = None,
        scale: Optional[LossScale] = None) -> tuple[Tensor, dict[str, float]]:
    """PPO: the policy terms plus value_coef * clipped value loss on per-turn values."""
    extras = extras or BatchExtras()
    if outputs.values is None or extras.old_values is None or extras.returns is None:
        raise ValueError("ppo needs outputs.values, extras.old_values and extras.returns (B,)")
    scale = full_batch_scale(batch, config) if scale is None else scale
    loss, metrics = _policy_terms(outputs, batch, config.loss, extras, scale)
    per_sample, clipped = clipped_value_loss(outputs.values, extras.old_values, extras.returns,
                                             clip_eps=config.value_clip_eps)
    value_loss = aggregate_samples(per_sample, batch.loss_mask, scale)
    has_tokens = batch.loss_mask.bool().any(dim=-1)
    metrics.update(value_loss=float(value_loss.detach()),
                   value_clip_fraction=float(masked_mean(clipped.float(), has_tokens)),
                   value_mean=float(masked_mean(outputs.values.detach(), has_tokens)))
    loss = loss + config.value_coef * value_loss
    metrics["loss"] = float(loss.detach())
    return loss, metrics


def sft(outputs: LearnerOutputs, batch: Batch, config: SFTConfig, *, extras: Optional[BatchExtras] = None,
        scale: Optional[LossScale] = None) -> tuple[Tensor, dict[str, float]]:
    """Action-aware masked cross-entropy: sum(m * w * CE) / sum(m * w), CE = -logprobs."""
    extras = extras or BatchExtras()
    scale = full_batch_scale(batch, config, extras) if scale is None else scale
    mask = batch.loss_mask.bool()
    weights = _sft_weights(batch, config, extras)  # (B, T), 0 off the mask
    nll = -_zero(outputs.logprobs, mask)
    loss = aggregate(weights * nll, mask, scale)
    metrics = {"loss": float(loss.detach()), "nll": float(masked_mean(nll.detach(), mask)),
               "num_tokens": float(mask.sum())}
    for name, part in (("action", extras.action_mask), ("coordinate", extras.coordinate_mask)):
        if part is not None:
            metrics[f"{name}_nll"] = float(masked_mean(nll.detach(), mask & part.bool()))
    return loss, metrics


OBJECTIVES: dict[str, Callable[..., tuple[Tensor, dict[str, float]]]] = {"grpo": grpo, "ppo": ppo, "sft": sft}


# -- shared pieces ---------------------------------------------------------------------------

def _zero(x: Tensor, mask: Tensor) -> Tensor:
    """x where mask, 0 elsewhere: garbage (even NaN) off the mask cannot reach values or grads."""
    return torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))


def _sft_weights(batch: Batch, config: SFTConfig, extras: Optional[BatchExtras]) -> Tensor:
    extras = extras or BatchExtras()
    return action_token_weights(batch.loss_mask, extras.action_mask, extras.coordinate_mask,
                                action_weight=config.action_weight, coordinate_factor=config.coordinate_factor)


def _policy_terms(outputs: LearnerOutputs, batch: Batch, cfg: PolicyLossConfig, extras: BatchExtras,
                  scale: LossScale) -> tuple[Tensor, dict[str, float]]:
    """Surrogate (with TIS), KL-as-loss and entropy bonus, aggregated with `scale`."""
    mask = batch.loss_mask.bool()
    logp = _zero(outputs.logprobs, mask)
    rollout = _zero(batch.old_logprobs, mask)
    adv = _zero(batch.advantages, mask)
    old = rollout if extras.proximal_logprobs is None else _zero(extras.proximal_logprobs, mask)
    pl = POLICY_LOSSES[cfg.policy_loss](logp, old, adv, clip_eps_low=cfg.clip_eps_low,
                                        clip_eps_high=cfg.clip_eps_high, dual_clip_c=cfg.dual_clip_c)
    per_token = pl.loss
    metrics: dict[str, float] = {}
    if cfg.tis_cap is not None and extras.proximal_logprobs is not None:
        tis = truncated_is_weights(old, rollout, cap=cfg.tis_cap)
        per_token = per_token * tis
        metrics["tis_weight_mean"] = float(masked_mean(tis, mask))
    pg_loss = aggregate(per_token, mask, scale)
    loss = pg_loss
    metrics.update(pg_loss=float(pg_loss.detach()), clip_fraction=float(masked_mean(pl.clipped.float(), mask)),
                   dual_clip_fraction=float(masked_mean(pl.dual_clipped.float(), mask)),
                   approx_kl=float(masked_mean(kl_k3(logp.detach(), old), mask)),
                   ratio_max=float(torch.where(mask, pl.ratio, torch.zeros_like(pl.ratio)).max()) if mask.any() else 0.0)
    if batch.ref_logprobs is not None:
        kl = KL_ESTIMATORS[cfg.kl_estimator](logp, _zero(batch.ref_logprobs, mask))
        kl_value = aggregate(kl, mask, scale)
        metrics["kl"] = float(kl_value.detach())
        if cfg.kl_mode == "loss" and cfg.kl_coef > 0:
            loss = loss + cfg.kl_coef * kl_value
    elif cfg.kl_mode == "loss" and cfg.kl_coef > 0:
        raise ValueError("kl_coef > 0 with kl_mode='loss' needs batch.ref_logprobs (B, T)")
    if outputs.entropy is not None:
        entropy = aggregate(_zero(outputs.entropy, mask), mask, scale)
        metrics["entropy"] = float(entropy.detach())
        loss = loss - cfg.entropy_coef * entropy
    elif cfg.entropy_coef > 0:
        raise ValueError("entropy_coef > 0 needs outputs.entropy (B, T)")
    has_tokens = mask.any(dim=-1)
    sample_adv = adv.sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)  # (B,) the sample's advantage
    metrics.update(_stats("advantage", sample_adv[has_tokens].detach()))
    metrics.update(loss=float(loss.detach()), num_tokens=float(mask.sum()), num_samples=float(has_tokens.sum()))
    return loss, metrics


def _stats(prefix: str, x: Tensor) -> dict[str, float]:
    """mean / std / min / max of a 1-D tensor; zeros when empty (never NaN)."""
    if x.numel() == 0:
        return {f"{prefix}_{k}": 0.0 for k in ("mean", "std", "min", "max")}
    x = x.detach().double()
    std = float(x.std()) if x.numel() > 1 else 0.0
    return {f"{prefix}_mean": float(x.mean()), f"{prefix}_std": std, f"{prefix}_min": float(x.min()),
            f"{prefix}_max": float(x.max())}

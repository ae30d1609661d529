"""webrl.algos: advantage estimators, policy losses and GRPO / PPO / SFT objectives (pure functions).

No Ray, no model, no I/O: tensors in, tensors out. Families are plain dicts of functions with one
signature each: ADVANTAGE_ESTIMATORS, NEGATIVE_SCALES, POLICY_LOSSES, KL_ESTIMATORS,
LOSS_AGGREGATIONS, OBJECTIVES. Modules:

- advantages:  GRPO / Dr. GRPO / RLOO, zero-variance filter, success-adaptive negative scaling,
               broadcast to turns and tokens, turn-level GAE.
- losses:      PPO clip (clip-higher, dual-clip), truncated IS weights, k1/k2/k3 KL, value loss.
- aggregation: token-mean, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm,
               traj-mean-token-mean (1/|tau|), with full-batch scales for micro-batching.
- sft:         action-aware token weights, action/coordinate spans, reasoning mix sampler.
- step_advantages: GiGPO's step groups of repeated page states, discounted step returns,
               step-relative advantages combined with the episode-level ones.
- objectives:  `grpo`, `ppo`, `sft` with GRPOConfig / PPOConfig / SFTConfig, returning
               (loss, metrics), and the advantage stages `group_advantages` / `ppo_advantages`.
"""
from .advantages import (ADVANTAGE_ESTIMATORS, NEGATIVE_SCALES, GroupAdvantageConfig, broadcast_to_tokens,
                         broadcast_to_turns, drgrpo_advantages, group_success_rate, grpo_advantages,
                         outcome_turn_rewards, rloo_advantages, scale_negative_advantages, turn_gae, whiten,
                         zero_variance_filter)
from .aggregation import LOSS_AGGREGATIONS, LossScale, aggregate, aggregate_samples, index_sum, loss_scale, masked_mean
from .losses import (KL_ESTIMATORS, POLICY_LOSSES, PolicyLoss, PolicyLossConfig, clipped_value_loss, kl_k1, kl_k2,
                     kl_k3, ppo_clip_loss, truncated_is_weights, vanilla_policy_loss)
from .objectives import (OBJECTIVES, AdvantageResult, BatchExtras, GRPOConfig, LearnerOutputs, PPOConfig,
                         full_batch_scale, group_advantages, grpo, kl_reward_penalty, kl_shaped_advantages, ppo,
                         ppo_advantages, sft)
from .sft import SFTConfig, ReasoningMixSampler, action_char_spans, action_token_weights, spans_to_token_mask, strip_reasoning
from .step_advantages import (StepAdvantageConfig, combine_advantages, discounted_step_returns, normalize_url,
                              state_key, state_similarity, step_advantages, step_group_metrics, step_groups,
                              step_relative_advantages)

__all__ = [
    "ADVANTAGE_ESTIMATORS", "NEGATIVE_SCALES", "GroupAdvantageConfig", "broadcast_to_tokens", "broadcast_to_turns",
    "drgrpo_advantages", "group_success_rate", "grpo_advantages", "outcome_turn_rewards", "rloo_advantages",
    "scale_negative_advantages", "turn_gae", "whiten", "zero_variance_filter",
    "LOSS_AGGREGATIONS", "LossScale", "aggregate", "aggregate_samples", "index_sum", "loss_scale", "masked_mean",
    "KL_ESTIMATORS", "POLICY_LOSSES", "PolicyLoss", "PolicyLossConfig", "clipped_value_loss", "kl_k1", "kl_k2",
    "kl_k3", "ppo_clip_loss", "truncated_is_weights", "vanilla_policy_loss",
    "OBJECTIVES", "AdvantageResult", "BatchExtras", "GRPOConfig", "LearnerOutputs", "PPOConfig",
    "full_batch_scale", "group_advantages", "grpo", "kl_reward_penalty", "kl_shaped_advantages", "ppo",
    "ppo_advantages", "sft",
    "SFTConfig", "ReasoningMixSampler", "action_char_spans", "action_token_weights", "spans_to_token_mask",
    "strip_reasoning",
    "StepAdvantageConfig", "combine_advantages", "discounted_step_returns", "normalize_url", "state_key",
    "state_similarity", "step_advantages", "step_group_metrics", "step_groups", "step_relative_advantages",
]

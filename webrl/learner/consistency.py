"""Rollout-vs-learner consistency: do the learner's log-probs of the sampled tokens match the rollout's?

    metrics = logprob_mismatch(samples, learner_logprobs, turn_threshold=0.1)
    alarm = mismatch_alarm(metrics, config)          # None, or the message the run prints

Both sides score the same tokens (`LearnerSample` keeps the rollout's prompt and response ids,
never re-tokenised) with the same weights version and temperature, so their log-probs differ
only by numerics (dtype, kernels, batch shapes) unless something is wrong: images encoded at
another size, a chat template that renders differently, packing that leaks across samples, a
stale weight sync. Peers' users report this class of bug more than any other; the metrics make
it visible every iteration and the alarm names it.

Off-policy semantics (what the ratio is taken against), see `LearnerGroup._prepare`: with one
optimizer step per update and no truncated importance sampling, the PPO ratio's old log-probs
are the rollout's; with several steps (ppo_epochs x mini_batches > 1) or `tis_cap` set, they are
the learner's own log-probs at the start of the update (proximal), and the rollout's enter only
the truncated importance weights (`tis_cap`). The start-of-update forward pass those need is
what this check reads, so it is free then; `ConsistencyConfig.every` adds it to other updates.

Notation: S samples, R_s response tokens of sample s. Mismatch of a token: |learner - rollout|
log-prob (nats). A turn is "over" when the mean over its tokens exceeds `turn_threshold`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
from webrl.config import fixed

TURN_BUCKETS = 4
"""Turn indices 0..3 get a mean each; later turns share one ("turn4plus")."""


@dataclass
class ConsistencyConfig:
    """When the learner checks its log-probs against the rollout's, and when that is an alarm."""

    every: int = 0
    """Also score the rollout's tokens before every N-th update whose optimizer does not need
    start-of-update log-probs (one extra forward pass); 0: only the updates that compute them
    anyway (ppo_epochs x mini_batches > 1, or tis_cap set)."""
    turn_threshold: float = fixed(0.1, "a turn whose mean |learner - rollout| log-prob per token exceeds 0.1 nats is mismatched")
    """A turn whose mean |learner - rollout| log-prob per token exceeds this (nats) is mismatched."""
    alarm_fraction: float = fixed(0.1, "the share of mismatched turns that raises the alarm")
    """Alarm when more than this fraction of the checked turns are mismatched."""

    def __post_init__(self) -> None:
        if not isinstance(self.every, int) or self.every < 0:
            raise ValueError(f"ConsistencyConfig.every must be an integer >= 0, got {self.every!r}")
        if not self.turn_threshold > 0:
            raise ValueError(f"ConsistencyConfig.turn_threshold must be > 0, got {self.turn_threshold!r}")
        if not 0 <= self.alarm_fraction < 1:
            raise ValueError(f"ConsistencyConfig.alarm_fraction must be in [0, 1), got {self.alarm_fraction!r}")


def logprob_mismatch(samples: Sequence[Any], learner_logprobs: Sequence[Any],
                     turn_threshold: float) -> dict[str, float]:
    """Mismatch metrics of the samples that carry rollout log-probs (others are skipped).

    samples: S `LearnerSample`s; learner_logprobs: S sequences of R_s floats (the learner's
    log-probs of each sample's response tokens, in order). Returns {} when no sample has rollout
    log-probs, else mismatch_abs_mean (over tokens), mismatch_abs_max, mismatch_turns (checked),
    mismatch_turns_over (fraction), mismatch_abs_mean_images / _text (turns with / without
    images, when present) and mismatch_abs_mean_turn{0..3} / _turn4plus (by turn index).
    """
    if len(samples) != len(learner_logprobs):
        raise ValueError(f"logprob_mismatch got {len(samples)} samples and {len(learner_logprobs)} log-prob rows")
    per_turn, groups = [], {}
    tokens_sum, tokens, worst = 0.0, 0, 0.0
    for sample, learner in zip(samples, learner_logprobs):
        if not sample.rollout_logprobs:
            continue
        if len(learner) != len(sample.response_ids):  # before subtracting: a length-1 row would broadcast
            raise ValueError(f"learner log-probs have {len(learner)} entries for {len(sample.response_ids)} "
                             "response tokens")
        diff = (torch.as_tensor(learner, dtype=torch.float64)
                - torch.as_tensor(sample.rollout_logprobs, dtype=torch.float64)).abs()  # (R_s,)
        turn_mean = float(diff.mean())
        per_turn.append(turn_mean)
        tokens_sum, tokens, worst = tokens_sum + float(diff.sum()), tokens + diff.numel(), max(worst, float(diff.max()))
        bucket = f"turn{sample.turn_index}" if sample.turn_index < TURN_BUCKETS else f"turn{TURN_BUCKETS}plus"
        for key in (bucket, "images" if sample.images else "text"):
            groups.setdefault(key, []).append(turn_mean)
    if not per_turn:
        return {}
    metrics = {"mismatch_abs_mean": tokens_sum / tokens, "mismatch_abs_max": worst,
               "mismatch_turns": float(len(per_turn)),
               "mismatch_turns_over": sum(m > turn_threshold for m in per_turn) / len(per_turn)}
    metrics.update({f"mismatch_abs_mean_{key}": sum(v) / len(v) for key, v in sorted(groups.items())})
    return metrics


def mismatch_alarm(metrics: dict[str, float], config: ConsistencyConfig) -> Optional[str]:
    """The alarm message when too many turns are mismatched, else None."""
    if not metrics or metrics["mismatch_turns_over"] <= config.alarm_fraction:
        return None
    where = ", ".join(f"{key[len('mismatch_abs_mean_'):]} {value:.3g}" for key, value in metrics.items()
                      if key.startswith("mismatch_abs_mean_"))
    return (f"rollout and learner log-probs disagree on {100 * metrics['mismatch_turns_over']:.0f}% of "
            f"{int(metrics['mismatch_turns'])} turns (mean |delta| per turn > {config.turn_threshold:g} nats; "
            f"token mean {metrics['mismatch_abs_mean']:.3g}, max {metrics['mismatch_abs_max']:.3g}; by kind: {where}). "
            "The learner is not scoring what the rollout sampled: check the image pixel bounds "
            "(generator.prompt.min_pixels / max_pixels), the chat template, the weight sync and the dtypes")

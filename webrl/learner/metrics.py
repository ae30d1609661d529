"""Merging per-micro-batch (and per-rank) metric dicts into one.

The objectives return floats computed on one micro-batch with the full step's loss scale, so
loss-like terms are additive contributions (their sum over micro-batches is the step's value),
counts add up, maxima take the max, and everything else (fractions, means) is averaged with the
micro-batch's trained-token count as weight.
"""
from __future__ import annotations

from typing import Sequence

ADDITIVE = ("loss", "pg_loss", "kl", "entropy", "value_loss", "num_tokens", "num_samples")
MAXIMA = ("ratio_max", "advantage_max", "grad_norm")
MINIMA = ("advantage_min",)


def merge_metrics(parts: Sequence[tuple[dict[str, float], float]]) -> dict[str, float]:
    """parts: (metrics, weight) pairs, weight = trained tokens of that micro-batch."""
    out: dict[str, float] = {}
    total = sum(w for _, w in parts)
    for key in sorted({k for m, _ in parts for k in m}):
        values = [(m[key], w) for m, w in parts if key in m]
        if key in ADDITIVE:
            out[key] = sum(v for v, _ in values)
        elif key in MAXIMA:
            out[key] = max(v for v, _ in values)
        elif key in MINIMA:
            out[key] = min(v for v, _ in values)
        else:
            weight = sum(w for _, w in values)
            out[key] = sum(v * w for v, w in values) / weight if weight > 0 else sum(v for v, _ in values) / len(values)
    if not parts:
        return {}
    out.setdefault("num_tokens", total)
    return out

"""Merging per-micro-batch (and per-rank) metric dicts into one; this process's memory figures.

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


def process_memory_mib() -> dict[str, float]:
    """{"rss_mib", "peak_rss_mib"} of this process from /proc/self/status (VmRSS, VmHWM).

    Not getrusage's ru_maxrss: Linux carries that across fork + exec, so a spawned rank would
    report its parent's size when the parent was larger (every 2-rank row of the step benchmark
    showed the driver's 760 MiB). VmHWM belongs to the address space, which exec replaces."""
    stats: dict[str, float] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    stats["rss_mib" if key == "VmRSS" else "peak_rss_mib"] = int(value.split()[0]) / 1024.0
    except OSError:
        import resource

        stats["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return stats

"""`RunLog`: a run's metrics, to `metrics.jsonl`, TensorBoard (`tb/`) and a readable stdout line.

One record per event: an RL iteration (`iteration` key: printed as the metrics table every
`log_every` iterations) or a stage event (`stage` key: sft epochs, demos, evaluations; printed
as `webrl key=value ...`). TensorBoard tags are `<stage or rl>/<key>`, stepped by the iteration.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

TABLE_KEYS = ("iteration", "reward/mean", "reward/success_rate", "success_rate", "filtered_groups", "samples",
              "loss", "kl", "entropy", "clip_fraction", "env_steps_per_s", "dropped", "staleness",
              "time_collect_s", "time_update_s")


class RunLog:
    """Appends to `<run_dir>/metrics.jsonl` (kept open), writes TensorBoard when installed."""

    def __init__(self, run_dir: Path, log_every: int = 1):
        self.log_every = log_every
        self.history: list[dict[str, Any]] = []
        self._file = open(Path(run_dir) / "metrics.jsonl", "a")
        self._tb = _tensorboard(Path(run_dir) / "tb")

    def __call__(self, metrics: dict[str, Any]) -> None:
        record = {"time": time.time(), **metrics}
        self.history.append(record)
        self._file.write(json.dumps(record, default=str) + "\n")
        self._file.flush()
        step = int(metrics.get("iteration", len(self.history)))
        if self._tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)):
                    self._tb.add_scalar(f"{metrics.get('stage', 'rl')}/{k}", v, step)
        if "iteration" in metrics and "stage" not in metrics and metrics["iteration"] % self.log_every == 0:
            print(metrics_table(metrics))
        elif "stage" in metrics:
            print("webrl " + " ".join(f"{k}={fmt(v)}" for k, v in metrics.items() if k != "time"))

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if not self._file.closed:
            self._file.close()


def _tensorboard(folder: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional at run time
        return None
    return SummaryWriter(str(folder))


def fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def metrics_table(metrics: dict[str, Any]) -> str:
    """One line: the TABLE_KEYS present, then up to four other loss/kl/entropy/clip keys."""
    keys = [k for k in TABLE_KEYS if k in metrics] + sorted(
        k for k in metrics if k.startswith(("loss", "kl", "entropy", "clip")) and k not in TABLE_KEYS)[:4]
    return " | ".join(f"{k} {fmt(metrics[k])}" for k in dict.fromkeys(keys))

"""`RunLog`: a run's metrics, to `metrics.jsonl`, TensorBoard (`tb/`), the trackers of
`run.trackers` (W&B, MLflow: `webrl.run.trackers`, offline) and a readable stdout line.

One record per event: an RL iteration (`iteration` key: printed as the metrics table every
`log_every` iterations) or a stage event (`stage` key: sft epochs, demos, evaluations; printed
as `webrl key=value ...`). TensorBoard tags are `<stage or rl>/<key>`, stepped by the iteration;
the trackers get the same numeric tags and steps, the run's config at start, and the
before/after table (`before_after`) at the end.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Optional

from webrl.evaluation.summary import before_after_table
from webrl.run.trackers import before_after_rows, config_dict, open_trackers

TABLE_KEYS = ("iteration", "reward/mean", "reward/success_rate", "success_rate", "trained_groups", "filtered_groups",
              "dynamic_sampling/rounds", "samples",
              "loss", "kl", "entropy", "clip_fraction", "env_steps_per_s", "dropped", "staleness",
              "time_collect_s", "time_update_s")


class RunLog:
    """Appends to `<run_dir>/metrics.jsonl` (kept open), writes TensorBoard when installed.

    `config` (a `WebRLConfig`, optional): its `run.trackers` are opened in `run_dir` and get the
    config at once; without it only JSONL and TensorBoard are written.
    """

    def __init__(self, run_dir: Path, log_every: int = 1, config: Optional[Any] = None):
        self.log_every = log_every
        self.history: list[dict[str, Any]] = []
        self._file = open(Path(run_dir) / "metrics.jsonl", "a")
        self._tb = _tensorboard(Path(run_dir) / "tb")
        self.trackers: list[Any] = []
        if config is not None and config.run.trackers:
            self.trackers = open_trackers(config.run.tracker_projects(), Path(run_dir), run_name=Path(run_dir).name)
            from webrl.config import to_yaml

            for tracker in self.trackers:
                tracker.log_config(config_dict(config), to_yaml(config))

    def __call__(self, metrics: dict[str, Any]) -> None:
        record = {"time": time.time(), **metrics}
        self.history.append(record)
        self._file.write(json.dumps(record, default=str) + "\n")
        self._file.flush()
        step = int(metrics.get("iteration", len(self.history)))
        scalars = {f"{metrics.get('stage', 'rl')}/{k}": v for k, v in metrics.items() if isinstance(v, (int, float))}
        if self._tb is not None:
            for tag, v in scalars.items():
                self._tb.add_scalar(tag, v, step)
        self._to_trackers("log_metrics", scalars, step)
        if "iteration" in metrics and "stage" not in metrics and metrics["iteration"] % self.log_every == 0:
            print(metrics_table(metrics))
        elif "stage" in metrics:
            print("webrl " + " ".join(f"{k}={fmt(v)}" for k, v in metrics.items() if k != "time"))

    def before_after(self, before: Optional[dict], after: Optional[dict],
                     paired: Optional[dict] = None) -> str:
        """The held-out before/after table (`before_after_table`), also sent to the trackers
        (rows [key, before, after] and the text); returns the text to print."""
        text = before_after_table(before, after, paired)
        self._to_trackers("log_table", "before_after", text, before_after_rows(before, after), ("key", "before", "after"))
        return text

    def _to_trackers(self, method: str, *args: Any) -> None:
        """Call `method` on every tracker; one that fails mid-run is reported and dropped, so a
        tracker's error never stops training (metrics.jsonl and TensorBoard keep everything)."""
        for tracker in list(self.trackers):
            try:
                getattr(tracker, method)(*args)
            except Exception as e:  # a tracker library's own error, of any type
                print(f"webrl: tracker {type(tracker).__name__} failed in {method} ({type(e).__name__}: {e}); "
                      f"it is dropped for the rest of the run", file=sys.stderr)
                self.trackers.remove(tracker)

    def close(self) -> None:
        self._to_trackers("close")
        self.trackers = []
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

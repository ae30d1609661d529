"""`RunLog`: a run's metrics, to `metrics.jsonl`, TensorBoard (`tb/`), the trackers of
`run.trackers` (W&B, MLflow: `webrl.run.trackers`, offline) and a readable stdout line.

One record per event: an RL iteration (`iteration` key: printed as the metrics table every
`log_every` iterations) or a stage event (`stage` key: sft epochs, demos, evaluations; printed
as `webrl key=value ...`). TensorBoard tags are `<stage or rl>/<key>`, stepped by the iteration;
the trackers get the same numeric tags and steps, the run's config at start, and the
before/after table (`before_after`) at the end.

`log_sizes` / `cut_logs`: the run folder's append-only logs (`APPEND_ONLY_LOGS`) as of a
checkpoint, and a resume's cut back to them, so that an iteration an aborted attempt logged
and the resumed run redoes is logged once.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

from webrl.evaluation.summary import before_after_table
from webrl.rollout.viewer import TRAJECTORY_LOG
from webrl.run.trackers import before_after_rows, config_dict, open_trackers

TABLE_KEYS = ("iteration", "reward/mean", "reward/success_rate", "success_rate", "trained_groups", "filtered_groups",
              "dynamic_sampling/rounds", "samples",
              "loss", "kl", "entropy", "clip_fraction", "env_steps_per_s", "dropped", "staleness",
              "time_collect_s", "time_update_s")

# What a run appends to as it goes, by path in the run folder -> what one line of it is called:
# RunLog (metrics.jsonl), TrajectoryLog (scored rollouts) and the Evaluator (per-task outcomes).
APPEND_ONLY_LOGS = {"metrics.jsonl": "metrics", TRAJECTORY_LOG: "trajectory", "eval_outcomes.jsonl": "eval outcome"}


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
            print("webrl " + " ".join(f"{k}={fmt(v)}" for k, v in metrics.items() if k != "time"
                                      and not isinstance(v, dict)))

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


def logged_evaluation(run_dir: Path, label: str) -> tuple[Optional[dict], Optional[dict]]:
    """An evaluation a run folder's logs hold, as `Evaluator.evaluate` returned it: (its metrics
    from metrics.jsonl's last `stage=eval` line of `label`: success, dropped, tasks,
    per_site_level, success_sampled where sampled; its per-task record from eval_outcomes.jsonl's
    last line of `label`). None for what is not there (a folder logged before per_site_level was,
    or an evaluation of no tasks). A resumed run reads its "before" evaluation back this way."""
    def last(name: str, keep) -> Optional[dict]:
        path, found = Path(run_dir) / name, None
        if path.exists():
            for line in path.read_text().splitlines():
                row = json.loads(line) if line.strip() else {}
                if row.get("label") == label and keep(row):
                    found = row
        return found

    event = last("metrics.jsonl", lambda row: row.get("stage") == "eval" and "per_site_level" in row)
    metrics = None if event is None else {k: v for k, v in event.items() if k in (
        "success", "dropped", "tasks", "per_site_level", "success_sampled")}
    return metrics, last("eval_outcomes.jsonl", lambda row: "outcomes" in row)


def log_sizes(run_dir: Path) -> dict[str, int]:
    """Bytes in each of `APPEND_ONLY_LOGS` now (0 for one not written yet), what a checkpoint keeps."""
    return {name: (Path(run_dir) / name).stat().st_size if (Path(run_dir) / name).exists() else 0
            for name in APPEND_ONLY_LOGS}


def cut_logs(run_dir: Path, sizes: dict[str, int], checkpoint: str) -> str:
    """Truncate each log named in `sizes` back to its size there: what it holds beyond was written
    after `checkpoint` by an attempt that died before the next one, and the resumed run writes it
    again. Every log is checked before any is cut: one shorter than its size, or whose size falls
    inside a line, was lost or edited (ValueError naming it). Writers append (O_APPEND), so an
    open handle (RunLog's) writes at the cut. Returns the line saying what was cut ("" for nothing)."""
    sizes = {name: int(sizes[name]) for name in APPEND_ONLY_LOGS if name in sizes}
    paths = {name: Path(run_dir) / name for name in sizes}
    for name, size in sizes.items():
        have = paths[name].stat().st_size if paths[name].exists() else 0
        if have < size:
            raise ValueError(f"{paths[name]} holds {have} bytes, fewer than the {size} it held at {checkpoint}: "
                             f"the log was lost or edited, so resuming cannot make it exact")
        if size:
            with open(paths[name], "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    raise ValueError(f"{paths[name]}: byte {size} (its size at {checkpoint}) is not the end of a "
                                     f"line: the log was edited, so resuming cannot make it exact")
    cut = []
    for name, size in sizes.items():
        if paths[name].exists() and paths[name].stat().st_size > size:
            with open(paths[name], "rb") as f:
                f.seek(size)
                tail = f.read()
            os.truncate(paths[name], size)
            lines = tail.count(b"\n") + (not tail.endswith(b"\n"))  # a line cut short by the crash counts
            cut.append(f"{lines} {APPEND_ONLY_LOGS[name]} line{'s' if lines != 1 else ''}")
    if not cut:
        return ""
    listed = cut[0] if len(cut) == 1 else ", ".join(cut[:-1]) + " and " + cut[-1]
    return f"webrl: resume cut {listed} written after {checkpoint}"


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

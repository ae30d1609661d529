"""Trajectory log (streams finished trajectories to the run folder) and a one-line progress bar."""
from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import TextIO

from webrl.rollout.viewer import TRAJECTORY_LOG
from webrl.types import Trajectory, save_trajectories


class TrajectoryLog:
    """Appends each finished trajectory to `<run_dir>/trajectories/trajectories.jsonl` (+ images/)."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / TRAJECTORY_LOG
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def __call__(self, trajectory: Trajectory) -> None:
        with self._lock:
            save_trajectories(self.path, [trajectory])


class ProgressBar:
    """`[#####-----] 12/32 trajectories | 3.4 steps/s | success 25% | dropped 1`, redrawn in place."""

    def __init__(self, stream: TextIO = sys.stderr, width: int = 20, enabled: bool = True):
        self.stream, self.width, self.enabled = stream, width, enabled

    def __call__(self, stats, total: int) -> None:
        if not self.enabled:
            return
        done = stats.trajectories
        filled = int(self.width * done / max(total, 1))
        scored = max(done - stats.dropped, 1)
        line = (f"[{'#' * filled}{'-' * (self.width - filled)}] {done}/{total} trajectories | "
                f"{stats.steps_per_s:.1f} steps/s | success {100 * stats.successes / scored:.0f}% | "
                f"dropped {stats.dropped}")
        end = "\n" if done >= total else ""
        self.stream.write("\r" + line + end)
        self.stream.flush()

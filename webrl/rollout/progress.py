"""Trajectory log (streams finished trajectories to the run folder) and a one-line progress bar.

The log is bounded three ways (`rollout.log_trajectories`, `rollout.log_images`):
- sampling: "all", "none" or a fraction f in (0, 1): a group (the G trajectories of one task in
  one iteration, group id "<iteration>:<index>:<task id>") is kept when a hash of (run seed,
  group id) falls below f, so the choice is the same on every rerun and resume, and a kept group
  is logged whole (its trajectories are what GRPO compared);
- images: "auto" (default) re-encodes each of the env's fast PNGs as JPEG (`jpeg_quality`) and
  keeps the JPEG only when it is smaller: photo-heavy live pages shrink several-fold, while flat
  pages, where PNG is smaller (measured on the sandbox fixtures at 1280x1000: the JPEG was 0.95-1.8x
  the PNG's size), stay lossless; "jpeg" always re-encodes; "png" keeps the env's bytes (lossless,
  e.g. to train on the log); "none" writes no image files (turns list no images). Files stay
  deduplicated by content digest. Encoding runs in the caller's thread (the coordinator calls the
  log off its event loop);
- bytes: each call returns the bytes it wrote (JSON line + new image files), which the coordinator
  adds up as `RolloutStats.log_bytes` per collection.
The trajectory the trainer holds is never modified: images are swapped on a copy.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Optional, TextIO, Union

from webrl.rollout.viewer import TRAJECTORY_LOG
from webrl.types import Image, Trajectory

LOG_IMAGES = ("auto", "jpeg", "png", "none")


def log_fraction(value: Union[str, float]) -> float:
    """`rollout.log_trajectories` as the share of groups logged: all = 1, none = 0, or a number in (0, 1]."""
    text = str(value).strip().lower()
    if text in ("all", "none"):
        return 1.0 if text == "all" else 0.0
    try:
        fraction = float(text)
    except ValueError:
        fraction = -1.0
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"rollout.log_trajectories must be all | none | a fraction in (0, 1] (e.g. 0.1), "
                         f"got {value!r}")
    return fraction


def keep_group(seed: int, group_id: str, fraction: float) -> bool:
    """Whether group `group_id` of a run seeded `seed` is logged (deterministic, P = fraction)."""
    if fraction >= 1.0:
        return True
    if fraction <= 0.0:
        return False
    digest = hashlib.sha256(f"{seed}/{group_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64 < fraction


class TrajectoryLog:
    """Appends each finished trajectory to `<run_dir>/trajectories/trajectories.jsonl` (+ images/).

    `log(trajectory) -> int` writes it (or skips it, per `sample`) and returns the bytes written.
    Thread-safe: encoding runs in the caller's thread, writing under a lock.
    """

    def __init__(self, run_dir: str | Path, sample: Union[str, float] = "all", seed: int = 0,
                 images: str = "auto", jpeg_quality: int = 85):
        if images not in LOG_IMAGES:
            raise ValueError(f"rollout.log_images must be one of {LOG_IMAGES}, got {images!r}")
        if not 1 <= jpeg_quality <= 95:
            raise ValueError(f"TrajectoryLog jpeg_quality must be in 1..95, got {jpeg_quality!r}")
        self.path = Path(run_dir) / TRAJECTORY_LOG
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fraction, self.seed, self.images, self.jpeg_quality = log_fraction(sample), seed, images, jpeg_quality
        self.bytes_written = 0
        self._lock = threading.Lock()
        self._encoded: OrderedDict[str, Image] = OrderedDict()  # PNG digest -> JPEG; history repeats images

    def __call__(self, trajectory: Trajectory) -> int:
        if not keep_group(self.seed, trajectory.group_id, self.fraction):
            return 0
        copy = self._with_log_images(trajectory)
        image_dir = self.path.parent / "images"
        with self._lock:
            new = {img.digest: len(img.data) for t in copy.turns for img in t.images
                   if not (image_dir / f"{img.digest}.{img.format}").exists()}
            line = (json.dumps(copy.to_json(image_dir), ensure_ascii=False) + "\n").encode()
            with open(self.path, "ab") as f:
                f.write(line)
            written = len(line) + sum(new.values())
            self.bytes_written += written
        return written

    def _with_log_images(self, trajectory: Trajectory) -> Trajectory:
        if self.images == "png":
            return trajectory
        turns = [dataclasses.replace(t, images=[] if self.images == "none" else [self._compressed(i) for i in t.images])
                 for t in trajectory.turns]
        return dataclasses.replace(trajectory, turns=turns)

    def _compressed(self, image: Image) -> Image:
        """The image as logged: JPEG (images=jpeg), or the smaller of JPEG and the original (auto)."""
        if image.format == "jpeg":
            return image
        key = image.digest
        with self._lock:
            cached = self._encoded.get(key)
        if cached is None:
            buf = io.BytesIO()
            image.to_pil().save(buf, format="JPEG", quality=self.jpeg_quality)
            cached = Image(buf.getvalue(), "jpeg")
            if self.images == "auto" and len(cached.data) >= len(image.data):
                cached = image
            with self._lock:
                self._encoded[key] = cached
                while len(self._encoded) > 64:
                    self._encoded.popitem(last=False)
        return cached


class ProgressBar:
    """`[#####-----] 12/32 trajectories | 3.4 steps/s | success 25% | dropped 1`, redrawn in place
    on a terminal. Elsewhere (a log file, a pipe) `\r` would pile every redraw onto one line, so
    it writes the line plainly: the first, then at most one every `plain_every_s`, and the last."""

    def __init__(self, stream: Optional[TextIO] = None, width: int = 20, enabled: bool = True,
                 plain_every_s: float = 30.0):
        stream = sys.stderr if stream is None else stream  # at construction, not import: stderr may be swapped
        self.stream, self.width, self.enabled, self.plain_every_s = stream, width, enabled, plain_every_s
        isatty = getattr(stream, "isatty", None)
        self.terminal = bool(isatty and isatty())
        self._last_plain: float | None = None

    def __call__(self, stats, total: int) -> None:
        if not self.enabled:
            return
        done = stats.trajectories
        if not self.terminal:
            now = time.monotonic()
            due = self._last_plain is None or now - self._last_plain >= self.plain_every_s
            if not (due or done >= total):
                return
            self._last_plain = None if done >= total else now  # the next collection starts afresh
        filled = int(self.width * done / max(total, 1))
        scored = max(done - stats.dropped, 1)
        line = (f"[{'#' * filled}{'-' * (self.width - filled)}] {done}/{total} trajectories | "
                f"{stats.steps_per_s:.1f} steps/s | success {100 * stats.successes / scored:.0f}% | "
                f"dropped {stats.dropped}")
        if not self.terminal:
            self.stream.write(line + "\n")
        else:
            self.stream.write("\r" + line + ("\n" if done >= total else ""))
        self.stream.flush()

"""The faults of `benchmarks/chaos.py` (its docstring lists them) and how their targets are found:
the run's own descendants by their Ray process titles (`ray::EnvWorker`, `ray::InferenceActor`,
`ray::LearnerWorker`) and Chromium's browser and renderer processes under an env worker. The judge
faults live beside their server in `chaos_judge.py`."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
from pathlib import Path
from typing import Optional

import psutil

from chaos_checks import NOT_INJECTED
from chaos_judge import JudgeFault, JudgeProcess


# -- the run and its processes --------------------------------------------------------------------
def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def titled(processes: list[psutil.Process], title: str) -> list[psutil.Process]:
    """The processes whose title (Ray's `ray::ClassName...`) starts with `title`, oldest first."""
    found = []
    for p in processes:
        try:
            if " ".join(p.cmdline()).startswith(title):
                found.append((p.create_time(), p.pid, p))
        except psutil.Error:
            continue
    return [p for _, _, p in sorted(found)]


def chromium(processes: list[psutil.Process], renderer: bool) -> list[psutil.Process]:
    """Chromium's browser processes (renderer=False) or its renderers among `processes`."""
    out = []
    for p in processes:
        try:
            name, cmd = p.name().lower(), " ".join(p.cmdline())
        except psutil.Error:
            continue
        if ("chrom" in name or "headless" in name) and ("--type=renderer" in cmd) == renderer \
                and (renderer or "--type=" not in cmd):
            out.append(p)
    return out


class Injector:
    """One fault kind: `inject(run_pid, rng) -> target` (raises LookupError with no target yet);
    `release()` undoes a lasting fault. What the run does next is observed, not assumed."""

    def release(self) -> None:
        return None


class KillActor(Injector):
    """SIGKILL one actor process titled `ray::<title>`; `busy`: one whose title shows a call in
    progress (`ray::InferenceActor.act_one`: the rollout's worker, not the idle evaluation one),
    the oldest when none does."""

    def __init__(self, title: str, busy: bool = False):
        self.title, self.busy = title, busy

    def inject(self, run_pid: int, rng: random.Random) -> str:
        found = titled(descendants(run_pid), f"ray::{self.title}")
        if not found:
            raise LookupError(f"no ray::{self.title} process")
        working = titled(found, f"ray::{self.title}.") if self.busy else []
        victim = (working or found)[0] if self.busy else rng.choice(found)
        victim.send_signal(signal.SIGKILL)
        return f"ray::{self.title} pid {victim.pid}" + (" (serving a call)" if working else "")


class KillChromium(Injector):
    def inject(self, run_pid: int, rng: random.Random) -> str:
        workers = titled(descendants(run_pid), "ray::EnvWorker")
        browsers = [b for w in workers for b in chromium(w.children(recursive=True), renderer=False)]
        if not browsers:
            raise LookupError("no Chromium browser process under an EnvWorker")
        victim = rng.choice(browsers)
        victim.send_signal(signal.SIGKILL)
        return f"chromium pid {victim.pid}"


class HangSite(Injector):
    def __init__(self, hold_s: float):
        self.hold_s, self.stopped, self.timer = hold_s, [], None

    def inject(self, run_pid: int, rng: random.Random) -> str:
        workers = titled(descendants(run_pid), "ray::EnvWorker")
        renderers = chromium(rng.choice(workers).children(recursive=True), renderer=True) if workers else []
        if not renderers:
            raise LookupError("no Chromium renderer under an EnvWorker")
        for p in renderers:
            p.send_signal(signal.SIGSTOP)
        self.stopped = renderers
        self.timer = threading.Timer(self.hold_s, self.release)
        self.timer.start()
        return f"{len(renderers)} renderers stopped for {self.hold_s:g}s"

    def release(self) -> None:
        for p in self.stopped:
            try:
                p.send_signal(signal.SIGCONT)
            except psutil.Error:
                pass  # the watchdog closed it meanwhile
        self.stopped = []


SERVER_MODULE = "webrl.serve"
"""What a launched `webrl serve` runs as (`python -m webrl.serve ...`: webrl.engines.launcher)."""


def servers(processes: list[psutil.Process]) -> list[psutil.Process]:
    """The launched `webrl serve` processes among `processes`, oldest first."""
    found = []
    for p in processes:
        try:
            cmd = p.cmdline()
            if any(a == "-m" and b == SERVER_MODULE for a, b in zip(cmd, cmd[1:])):
                found.append((p.create_time(), p.pid, p))
        except psutil.Error:
            continue
    return [p for _, _, p in sorted(found)]


def mapped_under(process: psutil.Process, folder: Path) -> str:
    """A file under `folder` that `process` has open or memory-mapped ("" for none): safetensors
    are mmapped while `from_pretrained` reads them."""
    prefix = str(folder) + os.sep
    try:
        paths = [m.path for m in process.memory_maps(grouped=True)] + [f.path for f in process.open_files()]
    except psutil.Error:
        return ""
    return next((path for path in paths if path.startswith(prefix)), "")


class KillServer(Injector):
    """SIGKILL a launched `webrl serve` (rollout.engine=server rollout.server.launch=webrl).

    during_update=False: at once, while the iteration collects (requests in flight).
    during_update=True: armed at the planned time; a watcher then polls every `poll_s` for a
    server reading a weight folder newer than those already under `<run>/server_weights` (the
    run's disk weight sync: export, then POST /update_weights_from_disk, which the server serves
    by loading that folder) and kills it while it holds the folder's files. `inject` raises
    LookupError until then, for up to `patience_s` (the iteration's collection comes first)."""

    patience_s = 900.0

    def __init__(self, run_dir: Path, during_update: bool, poll_s: float = 0.02):
        self.weights, self.during_update, self.poll_s = Path(run_dir) / "server_weights", during_update, poll_s
        self.watcher: Optional[threading.Thread] = None
        self.stop, self.hit = threading.Event(), ""

    def inject(self, run_pid: int, rng: random.Random) -> str:
        if not self.during_update:
            found = servers(descendants(run_pid))
            if not found:
                raise LookupError("no webrl serve process (rollout.engine=server rollout.server.launch=webrl?)")
            victim = rng.choice(found)
            victim.send_signal(signal.SIGKILL)
            return f"webrl serve pid {victim.pid} (generating)"
        if self.hit:
            hit, self.hit, self.watcher = self.hit, "", None
            return hit
        if self.watcher is None:
            known = {f.name for f in self.weights.glob("v*")} if self.weights.exists() else set()
            self.stop.clear()
            self.watcher = threading.Thread(target=self._watch, args=(run_pid, known), daemon=True)
            self.watcher.start()
        raise LookupError("armed: no weight load under way yet")

    def _watch(self, run_pid: int, known: set[str]) -> None:
        while not self.stop.wait(self.poll_s):
            fresh = [f for f in self.weights.glob("v*") if f.name not in known] if self.weights.exists() else []
            for server in servers(descendants(run_pid)) if fresh else []:
                path = next((hit for folder in fresh for hit in [mapped_under(server, folder)] if hit), "")
                if path:
                    server.send_signal(signal.SIGKILL)
                    self.hit = f"webrl serve pid {server.pid} (loading {Path(path).parent.name}/{Path(path).name})"
                    return

    def release(self) -> None:
        self.stop.set()


class FillDisk(Injector):
    """checkpoints/ on a tmpfs of `size_mb` (mounted at construction, root needed)."""

    def __init__(self, folder: Path, size_mb: int):
        self.folder, self.filler = folder, folder / ".chaos-filler"
        folder.mkdir(parents=True, exist_ok=True)
        if not os.path.ismount(folder):
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(folder)],
                                  capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"disk_full needs a tmpfs on {folder} (mount, as root): {done.stderr.strip()}; "
                                 f"leave disk_full out of --faults here")

    def inject(self, run_pid: int, rng: random.Random) -> str:
        free = os.statvfs(self.folder).f_bavail * os.statvfs(self.folder).f_frsize
        fd = os.open(self.filler, os.O_CREAT | os.O_WRONLY)
        try:
            os.posix_fallocate(fd, 0, max(free - (1 << 20), 1))
        finally:
            os.close(fd)
        return f"checkpoints tmpfs filled to 1 MiB free ({free >> 20} MiB taken)"

    def release(self) -> None:
        self.filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        subprocess.run(["umount", str(self.folder)], capture_output=True)


def make_injectors(kinds: list[str], run_dir: Path, hang_s: float, disk_mb: int, judge: Optional[JudgeProcess] = None,
                   judge_hold_s: float = 0.0, judge_slow_s: float = 15.0, judge_slow_requests: int = 8
                   ) -> dict[str, Injector]:
    made = {"chromium": lambda: KillChromium(), "env_worker": lambda: KillActor("EnvWorker"),
            "site_hang": lambda: HangSite(hang_s),
            "inference_worker": lambda: KillActor("InferenceActor", busy=True),
            "learner_rank": lambda: KillActor("LearnerWorker"),
            "disk_full": lambda: FillDisk(run_dir / "checkpoints", disk_mb),
            "server_generation": lambda: KillServer(run_dir, during_update=False),
            "server_weight_update": lambda: KillServer(run_dir, during_update=True),
            "judge_down": lambda: JudgeFault(judge, judge_hold_s),
            "judge_slow": lambda: JudgeFault(judge, judge_hold_s, slow_s=judge_slow_s,
                                             slow_requests=judge_slow_requests)}
    unknown = [k for k in kinds if k not in made]
    if unknown:
        raise SystemExit(f"unknown fault kinds {unknown}; known: {sorted(made)} (not injectable: {NOT_INJECTED})")
    return {kind: made[kind]() for kind in kinds}

"""Helpers shared by tests of several packages."""
import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sandbox_task(site: str, level: int, task_id: str = "t"):
    """A `BaseTask` that only carries provenance (site, level) for summaries and tables."""
    from webrl.envs import BaseTask, TaskSpec

    return BaseTask(TaskSpec(id=task_id, goal="g", start_url="http://127.0.0.1:1/", site=site, level=level))


def pids_naming(text: str) -> list[int]:
    """Pids of the processes whose command lines contain `text` (e.g. a Ray node's temp dir)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline:
                pids.append(int(entry.name))
    return pids


def stop_started(proc: subprocess.Popen, temp_dir: str = "") -> None:
    """Stop a process a test started in its own session (its process group: TERM, then KILL),
    then whatever is left whose command line names `temp_dir` (a Ray node's daemons)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=30)
            break
        except subprocess.TimeoutExpired:
            continue
    if temp_dir:
        time.sleep(1)
        for pid in pids_naming(temp_dir):
            if pid != os.getpid():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

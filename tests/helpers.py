"""Helpers shared by tests of several packages."""
import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sandbox_task(site: str, level: int, task_id: str = "t"):
    """A `BaseTask` that only carries provenance (site, level) for summaries and tables."""
    from webrl.envs import BaseTask, TaskSpec

    return BaseTask(TaskSpec(id=task_id, goal="g", start_url="http://127.0.0.1:1/", site=site, level=level))

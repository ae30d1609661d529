"""EnvWorker with threads > 1: slots of different browser groups step at the same time, each group on
its own thread and Chromium; a dead browser ends only its own group's episodes."""
from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from webrl.envs import EnvWorker, EnvWorkerConfig, TaskSpec
from webrl.envs.worker import actor_concurrency

SMALL = {"viewport": "small"}


class BarrierSite:
    """/start.html answers at once; /meet.html waits until `parties` requests for it are in flight
    (or `wait_s` passes) and titles the page "met" or "alone". Two slots stepping concurrently
    both see "met"; stepping one after another, each request waits alone."""

    def __init__(self, parties: int, wait_s: float):
        self.barrier = threading.Barrier(parties)
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                title = "start"
                if self.path.startswith("/meet"):
                    try:
                        site.barrier.wait(wait_s)
                        title = "met"
                    except threading.BrokenBarrierError:
                        title = "alone"
                body = f"<!doctype html><title>{title}</title><p>{title}</p>".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def spec(self) -> TaskSpec:
        return TaskSpec(id="test/barrier", goal="meet", start_url=f"{self.base}/start.html")

    def close(self) -> None:
        self.server.shutdown()


def test_threads_config_names_the_key_and_range():
    with pytest.raises(ValueError, match=r"env.threads\) must be an integer in 0..num_slots = 0..2 \(0: one "
                                         r"browser per slot, at most 4\), got 3"):
        EnvWorkerConfig(num_slots=2, threads=3)
    with pytest.raises(ValueError, match=r"0..num_slots = 0..4 .*got -1"):
        EnvWorkerConfig(num_slots=4, threads=-1)
    # 0 (the default): one browser per slot, at most AUTO_THREADS; a number is taken as given
    assert [EnvWorkerConfig(num_slots=n).browser_groups for n in (1, 2, 4, 9)] == [1, 2, 4, 4]
    assert EnvWorkerConfig(num_slots=9, threads=3).browser_groups == 3
    assert actor_concurrency(EnvWorkerConfig(num_slots=1)) == 1  # auto with one slot: inline
    assert actor_concurrency(EnvWorkerConfig(num_slots=3)) == 4
    # the Ray shell: one thread for the inline worker, a call per slot + 1 otherwise
    assert actor_concurrency(EnvWorkerConfig(num_slots=4, threads=1)) == 1
    assert actor_concurrency(EnvWorkerConfig(num_slots=4, threads=2)) == 5


@pytest.mark.browser
@pytest.mark.slow
def test_slots_of_two_groups_step_at_the_same_time_and_fail_apart():
    site = BarrierSite(parties=2, wait_s=8.0)  # below load_timeout_s (10 s): "alone" still loads
    worker = EnvWorker(EnvWorkerConfig(num_slots=2, threads=2, **SMALL))
    try:
        assert len(worker.sessions) == 2 and worker.sessions[0] is not worker.sessions[1]
        assert [env.session for env in worker.envs] == worker.sessions  # slot i in group i % 2
        with ThreadPoolExecutor(2) as callers:  # as a Ray actor with max_concurrency > 1 calls it
            resets = list(callers.map(lambda s: worker.reset(s, options={"task": site.spec()}), range(2)))
            assert [r.observation["title"] for r in resets] == ["start", "start"]
            steps = list(callers.map(lambda s: worker.step(s, f'goto("{site.base}/meet.html?{s}")'), range(2)))
        assert [s.observation["title"] for s in steps] == ["met", "met"], [s.info for s in steps]
        # group 1's Chromium dies: slot 1's episode ends with infra_error, slot 0's goes on
        pid = worker.groups[1].run(worker.sessions[1].browser_pid)
        assert pid is not None and pid != worker.groups[0].run(worker.sessions[0].browser_pid)
        os.kill(pid, signal.SIGKILL)
        dead = worker.step(1, f'goto("{site.base}/start.html?dead")')
        assert dead.truncated and dead.info["infra_error"], dead.info
        alive = worker.step(0, f'goto("{site.base}/start.html?alive")')
        assert alive.observation["title"] == "start" and not alive.info.get("infra_error")
        again = worker.reset(1, options={"task": site.spec()})  # relaunched, on group 1's thread
        assert again.observation["title"] == "start" and not again.info.get("infra_error")
        assert worker.ping()
    finally:
        worker.close()
        site.close()
    assert not any(s.is_alive() for s in worker.sessions)


@pytest.mark.browser
@pytest.mark.slow
def test_one_thread_steps_slots_one_after_another():
    """The control: the barrier site does tell serial stepping apart (threads=1, one caller thread)."""
    site = BarrierSite(parties=2, wait_s=1.5)
    worker = EnvWorker(EnvWorkerConfig(num_slots=2, threads=1, **SMALL))
    try:
        for s in range(2):
            worker.reset(s, options={"task": site.spec()})
        titles = [worker.step(s, f'goto("{site.base}/meet.html?{s}")').observation["title"] for s in range(2)]
        assert titles == ["alone", "alone"]
    finally:
        worker.close()
        site.close()

"""Real-Chromium points of the rollout loop (issue #53 item 3): `collection_throughput.py
--chromium-slots 4 8 16 24` runs its instant-policy loop at each slot count for a fixed window.

Layout per point, the main job's default one scaled in slots: one EnvWorker Ray actor of N slots
with env.threads=0 (one browser per slot up to AUTO_THREADS = 4, so N > 4 slots share 4
Chromiums, each slot its own BrowserContext), one InferenceActor with the instant engine,
RolloutCoordinator groups of 2 started as others finish so every slot stays busy.

Per point (result.json "chromium_points", each written as it is measured):
    steps_per_s       step calls sent to the env in the window / window length (stop() included,
                      as the job's env_steps_per_s counts it); resets in the window too, so
                      steps_per_reset = steps / resets of the window
    env_mb_per_slot   summed PSS of the EnvWorker process and all its descendants (the Chromium
                      browser, GPU, utility and renderer processes) at the window's end, / slots;
                      PSS splits shared pages among their sharers, so the sum counts each once
                      (`memory_kind` says "rss" where PSS could not be read: then shared pages
                      count once per process and the sum is an overestimate)
    driver_rss_mb     the driver's RSS at the window's end
    available_*_mb    psutil.virtual_memory().available before the point starts (no Ray, no
                      browsers) and at the window's end (all of them up)

Stop rule: a point whose projected memory, env_mb_per_slot of the previous point x its slots +
2 GiB, exceeds the available memory measured just before it is not run; the sweep stops there
and says why ("chromium_stopped"). A small point's MiB per slot carries the worker's fixed cost
(its Python process, the 4 browsers) over few slots, so the projection errs high.
"""
from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

MARGIN_MB = 2048.0
"""Memory left free above a point's projection (the driver, Ray's GCS and raylet, the page cache)."""
MB = 2**20


# -- the pure parts --------------------------------------------------------------------------------
def projected_mb(previous: Optional[dict], slots: int, margin_mb: float = MARGIN_MB) -> float:
    """A point's projected memory: the previous point's env MiB per slot x slots + the margin
    (the margin alone before the first point)."""
    return (previous["env_mb_per_slot"] if previous else 0.0) * slots + margin_mb


def stop_reason(previous: Optional[dict], slots: int, available_mb: float, margin_mb: float = MARGIN_MB) -> str:
    """Why the sweep stops before a point of `slots` ("" when it goes on)."""
    need = projected_mb(previous, slots, margin_mb)
    if need <= available_mb:
        return ""
    basis = f"{previous['env_mb_per_slot']:.0f} MiB/slot x {slots} + " if previous else ""
    return f"{slots} slots: projected {need:.0f} MiB ({basis}{margin_mb:.0f} margin) > {available_mb:.0f} MiB available"


def summed_memory(processes: Iterable[Any]) -> tuple[int, str]:
    """(bytes, "pss" or "rss") of `processes` (psutil.Process-like): PSS summed; if any one's PSS
    cannot be read, RSS summed over all of them (never a mix). Processes gone meanwhile count 0."""
    import psutil

    processes = list(processes)
    for kind in ("pss", "rss"):
        total = 0
        try:
            for process in processes:
                try:
                    info = process.memory_full_info() if kind == "pss" else process.memory_info()
                    total += getattr(info, kind)
                except psutil.NoSuchProcess:
                    pass
            return total, kind
        except (psutil.AccessDenied, AttributeError):  # smaps unreadable, or no PSS on this platform
            continue
    raise RuntimeError("no memory figure readable")  # RSS needs no privilege: not reached


def point_row(slots: int, steps: int, resets: int, window_s: float, env_bytes: int, memory_kind: str,
              driver_rss: int, available_before: int, available_at_end: int) -> dict:
    """One point's figures from its counts (bytes in, MiB out)."""
    return {"slots": slots, "steps": steps, "resets": resets, "window_s": window_s,
            "steps_per_s": steps / window_s, "steps_per_reset": steps / max(1, resets),
            "env_mb": env_bytes / MB, "env_mb_per_slot": env_bytes / MB / slots, "memory_kind": memory_kind,
            "driver_rss_mb": driver_rss / MB, "available_before_mb": available_before / MB,
            "available_at_end_mb": available_at_end / MB}


def calls_in_window(stamps: Sequence[tuple[str, float]], start: float, end: float) -> tuple[int, int]:
    """(steps, resets) among (kind, sent at) stamps sent in [start, end)."""
    inside = [kind for kind, at in stamps if start <= at < end]
    return inside.count("step"), inside.count("reset")


COLUMNS = (("slots", "slots", "{:d}"), ("browsers", "browsers", "{:d}"), ("steps_per_s", "env steps/s", "{:.2f}"),
           ("steps_per_reset", "steps/reset", "{:.2f}"), ("env_mb_per_slot", "env MiB/slot", "{:.0f}"),
           ("env_mb", "env MiB", "{:.0f}"), ("memory_kind", "memory", "{}"),
           ("driver_rss_mb", "driver RSS MiB", "{:.0f}"),
           ("available_before_mb", "available before MiB", "{:.0f}"),
           ("available_at_end_mb", "available at end MiB", "{:.0f}"))


def markdown_table(points: Sequence[dict]) -> str:
    head = "| " + " | ".join(title for _, title, _ in COLUMNS) + " |"
    rule = "|" + "---|" * len(COLUMNS)
    body = ["| " + " | ".join(fmt.format(p[key]) for key, _, fmt in COLUMNS) + " |" for p in points]
    return "\n".join([head, rule, *body])


# -- one point on Chromium ---------------------------------------------------------------------------
class StampedWorker:
    """An EnvWorker handle that stamps each reset / step call as it is sent (the coordinator
    reaches the worker only through `getattr(worker, method).remote(...)`)."""

    def __init__(self, handle: Any, stamps: list):
        self.handle, self.stamps = handle, stamps

    def __getattr__(self, method: str) -> Any:
        remote_method, stamps = getattr(self.handle, method), self.stamps

        class Stamped:
            @staticmethod
            def remote(*args: Any) -> Any:
                stamps.append((method, time.monotonic()))
                return remote_method.remote(*args)
        return Stamped


def tree_of(pid: int) -> list:
    import psutil

    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


async def _collect_window(coordinator: Any, tasks: Callable[[int], Any], slots: int, max_turns: int,
                          warmup_s: float, seconds: float, at_end: Callable[[], Any]) -> tuple[float, float, Any, Any]:
    """Keep every slot busy (groups started as others finish) for warmup + seconds; `at_end()` at
    the window's end, with every browser still up; then drain. Returns (start, end, at_end's
    result, the RolloutStats of every group)."""
    from webrl.rollout import RolloutStats

    queue, stats, t0 = coordinator.slot_queue(), RolloutStats(), time.monotonic()
    start, end = t0 + warmup_s, t0 + warmup_s + seconds
    size = coordinator.config.group_size
    running, started, measured = set(), 0, None
    while running or time.monotonic() < end:
        while time.monotonic() < end and len(running) < -(-slots // size) + 1:  # one group more than slots hold
            task = tasks(started)
            running.add(asyncio.create_task(coordinator.run_group(task, f"0:{started}:{task.spec.id}", max_turns,
                                                                  queue, stats, size=size)))
            started += 1
        timeout = end - time.monotonic() if time.monotonic() < end else None
        done, running = await asyncio.wait(running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        for group in done:
            group.result()  # env errors come back as dropped trajectories: one raised here is a bug
        if measured is None and time.monotonic() >= end:
            measured = at_end()
    return start, end, measured if measured is not None else at_end(), stats


def run_point(slots: int, engine_factory: Callable[[], Any], make_tasks: Callable[[int, int], list],
              max_turns: int, seed: int, seconds: float, warmup_s: float, run_dir: Path) -> dict:
    """One sweep point: local Ray, the worker and the instant engine, a group per two slots to load
    every slot's first page (a context's first load is slow), then `seconds` measured after
    `warmup_s`; everything shut down after (the worker's own close, then Ray's)."""
    import psutil
    import ray

    from webrl.envs.config import EnvWorkerConfig
    from webrl.envs.worker import make_env_worker_actor
    from webrl.rollout import RolloutConfig, RolloutCoordinator
    from webrl.rollout.inference import InferenceActor
    from webrl.run.ray_local import start_local_ray

    available_before = psutil.virtual_memory().available
    config = EnvWorkerConfig(num_slots=slots, threads=0, viewport="640x480")
    start_local_ray(4, tempfile.mkdtemp(prefix="cs", dir=run_dir))
    try:
        env = make_env_worker_actor(config, num_cpus=1)
        ray.get(env.ping.remote(), timeout=300)
        env_pid = ray.get(env.__ray_call__.remote(lambda worker: os.getpid()), timeout=60)
        inference = ray.remote(num_cpus=0)(InferenceActor).remote(engine_factory)
        stamps: list = []
        worker = StampedWorker(env, stamps)
        coordinator = RolloutCoordinator([(worker, i) for i in range(slots)], [inference],
                                         RolloutConfig(group_size=2, max_turns=max_turns, screenshot="som",
                                                       log_trajectories="none"), seed=seed)

        coordinator.collect([make_tasks(1, seed + 10_000 + i)[0] for i in range(-(-slots // 2))])  # first loads

        def at_end():
            env_bytes, kind = summed_memory(tree_of(env_pid))
            return env_bytes, kind, psutil.Process().memory_info().rss, psutil.virtual_memory().available

        tasks = lambda i: make_tasks(1, seed + i)[0]  # noqa: E731
        start, end, (env_bytes, kind, driver_rss, available_at_end), stats = asyncio.run(
            _collect_window(coordinator, tasks, slots, max_turns, warmup_s, seconds, at_end))
        ray.get(env.close.remote(), timeout=120)
    finally:
        ray.shutdown()
    steps, resets = calls_in_window(stamps, start, end)
    return {**point_row(slots, steps, resets, end - start, env_bytes, kind, driver_rss, available_before,
                        available_at_end), "browsers": config.browser_groups, "threads": 0,
            "trajectories": stats.trajectories, "dropped": stats.dropped, "retries": stats.retries,
            "calls_sent": len(stamps)}


def sweep(slot_counts: Sequence[int], points: list, measure: Callable[[int], dict],
          available_mb: Callable[[], float], save: Callable[[list, str], None]) -> str:
    """Measure each slot count not in `points` yet (a rerun keeps those), in order, saving after
    each; stop before one the memory cannot hold. Returns why it stopped ("" when it did not)."""
    done = {p["slots"] for p in points}
    for slots in slot_counts:
        if slots in done:
            continue
        previous = max((p for p in points if p["slots"] < slots), key=lambda p: p["slots"], default=None)
        reason = stop_reason(previous, slots, available_mb())
        if reason:
            save(points, reason)
            return reason
        points.append(measure(slots))
        points.sort(key=lambda p: p["slots"])
        save(points, "")
    return ""

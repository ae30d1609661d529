"""The rollout control plane at a thousand slots (issue #39 item 5): env steps/s it sustains, and
what it adds to every step, with stand-ins for everything that costs compute.

Real: `RolloutCoordinator` (its slot queue, `run_group`, the episode runner, the retry and
timeout wrappers), the `InferenceActor` with its `DynamicBatcher` (default `InferenceConfig`:
20 ms window, batches of 16), started by `start_inference_workers` as the run starts it, the
`EnvWorker` class in a Ray actor with its threaded shell (`actor_concurrency`, one group thread
per slot, `pack_result` PNG-encoding each observation), and every Ray call between them, on a
local Ray (`start_local_ray`, its temp dir in `--out`, no dashboard, no usage stats).

Stand-ins, for what costs compute:
    env      `SleepEnv` in every slot in place of a `WebEnv` on Chromium: reset and step sleep a
             lognormal time (`--step-median-s 0.1 --step-p99-s 0.3` by default, sigma 0.47,
             mean 0.112 s: the measured webrl step was a 131 ms median on a loaded machine, the
             raw Playwright click + screenshot 90 ms, benchmarks/results/env_step_2026-12-01) and
             return an 8x8 screenshot with one listed element. `EnvWorker` cannot take another env
             class (it builds a `BrowserSession` and `WebEnv`s itself), so `SleepEnvWorker`
             overrides only `_start_group` (no browser, `SleepEnv`s) and adds `drain_calls`. Its
             slots sleep with `time.sleep` on their group threads, as a real slot waits on
             Chromium with the GIL free. Resets sleep the same distribution (a real reset is
             slower, ~0.4 s; it only lowers the ideal rate, not the overhead measured).
    engine   `InstantEngine`: `--turns - 1` clicks on the first listed element, then stop().

Every point starts its own actors for `--seconds` of steady collection after `--warmup-s`
(groups of `--group-size` are started as they finish, so every slot stays busy, as in async
mode). The stand-in env stamps each call (CLOCK_MONOTONIC is one clock for every process), so:

    added latency of a step = its call's start - the end of the slot's previous call
        (the result's trip to the driver, the episode, the decision through the batcher and
        back, the step's trip to the worker and onto its group thread)
    ideal steps/s           = slots x turns / ((turns + 1) x mean sleep)   (resets hold slots too)

Per point: env steps/s in the window and its ratio to ideal, p50 / p99 added latency, driver
CPU seconds per 1000 steps, driver RSS, CPU of the whole process tree (driver, Ray's GCS and
raylet, every actor) as cores used and its PSS, mean inference batch, the driver's event-loop
lag (p99, max) and its longest garbage-collector pause; result.json also has the mean decision
wait and the mean Ray round trip of an env call. Target: >= 1,000 env steps/s sustained on 2
cores (at 1000 slots ideal is ~7,450/s, so the control plane sets the rate there).

    .venv/bin/python benchmarks/control_plane.py --slots 8 32 128 512 1000 --slots-per-worker 125

A full garbage collection in the driver stops every slot at once: importing webrl.rollout brings
torch, transformers and Playwright into the driver (~430k tracked objects, ~170-230 ms per
gen-2 pass on 2 cores), so a window holding one shows a p99 added latency near that pause
(the "GC pause max" column says whether it did).

About 35-45 s per point (actors start, 5 s warm-up, 20 s measured, drain), ~4 min for the five
points; result.json (written after every point; a rerun with the same settings and --out runs
only the points it lacks) and result.md land in --out (default runs/control_plane).
"""
from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import math
import os
import random
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from webrl.envs.worker import EnvWorker  # noqa: E402

Z99 = 2.3263478740408408
"""The standard normal's 99th percentile: a lognormal's p99 is median * exp(Z99 * sigma)."""
TARGET_STEPS_PER_S = 1000.0


# -- statistics (pure) ---------------------------------------------------------------------------
@dataclass(frozen=True)
class EnvCall:
    """One reset or step as the stand-in env saw it: its sleep from `start` to `end` (monotonic s)."""

    worker: int
    slot: int
    kind: str
    start: float
    end: float


def lognormal_sigma(median_s: float, p99_s: float) -> float:
    """sigma of the lognormal with this median and 99th percentile (0: every sleep is the median)."""
    if not 0 < median_s <= p99_s:
        raise ValueError(f"need 0 < median <= p99, got median {median_s}, p99 {p99_s}")
    return math.log(p99_s / median_s) / Z99


def lognormal_mean(median_s: float, sigma: float) -> float:
    return median_s * math.exp(sigma * sigma / 2)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks (numpy's default); nan when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def added_latencies(calls: Iterable[EnvCall], window: Optional[tuple[float, float]] = None) -> list[float]:
    """Per step: its start minus the end of the same slot's previous call (the reset or the step
    before), for steps that start inside `window` (all when None). A slot runs one call at a time."""
    by_slot: dict[tuple[int, int], list[EnvCall]] = {}
    for call in calls:
        by_slot.setdefault((call.worker, call.slot), []).append(call)
    out = []
    for seq in by_slot.values():
        seq.sort(key=lambda c: c.start)
        for previous, call in zip(seq, seq[1:]):
            if call.kind == "step" and (window is None or window[0] <= call.start < window[1]):
                out.append(call.start - previous.end)
    return out


def steps_in_window(calls: Iterable[EnvCall], start: float, end: float) -> int:
    """Steps that ended inside [start, end)."""
    return sum(1 for c in calls if c.kind == "step" and start <= c.end < end)


def ideal_steps_per_s(slots: int, mean_sleep_s: float, turns: int) -> float:
    """Steps/s with a free control plane: each slot sleeps through one reset and `turns` steps per episode."""
    return slots * turns / ((turns + 1) * mean_sleep_s)


# -- stand-ins -------------------------------------------------------------------------------------
class SleepEnv:
    """A slot that sleeps instead of driving Chromium; episodes end when the agent stops."""

    viewport = (8, 8)

    def __init__(self, worker: int, slot: int, median_s: float, sigma: float, seed: int, calls: list):
        self.worker, self.slot, self.calls = worker, slot, calls
        self.mu, self.sigma = math.log(median_s), sigma
        self.rng = random.Random(f"{seed}:{worker}:{slot}")
        self.steps, self.last_timings = 0, {}

    def _sleep(self, kind: str) -> None:
        start = time.monotonic()
        time.sleep(self.rng.lognormvariate(self.mu, self.sigma))
        self.calls.append((self.worker, self.slot, kind, start, time.monotonic()))  # EnvCall fields

    def _observation(self) -> tuple[dict, dict]:
        obs = {"screenshot": np.zeros((8, 8, 3), np.uint8), "url": "http://127.0.0.1/", "title": "stand-in",
               "goal": "click, then stop", "elements_text": "[0] button 'Go'", "feedback": "",
               "last_action_error": "", "tabs": "", "skills": "", "tools": "", "step": self.steps}
        return obs, {"elements": [{"id": 0, "bbox": [1, 1, 6, 6], "role": "button", "name": "Go"}]}

    def reset(self, seed=None, options=None):
        self._sleep("reset")
        self.steps = 0
        return self._observation()

    def step(self, action):
        self._sleep("step")
        self.steps += 1
        done = getattr(action, "kind", "") == "stop"
        obs, info = self._observation()
        return obs, float(done), done, False, info

    def close(self) -> None:
        pass


class SleepEnvWorker(EnvWorker):
    """The real `EnvWorker` (shell, group threads, `pack_result`) over `SleepEnv` slots, no browser."""

    def __init__(self, config: Any, worker: int, median_s: float, sigma: float, seed: int):
        self.stand_in = (worker, median_s, sigma, seed)
        self.calls: list[tuple] = []
        super().__init__(config)

    def _start_group(self, group, tasks) -> None:
        worker, median_s, sigma, seed = self.stand_in
        for slot in range(group.index, self.config.num_slots, len(self.groups)):
            self.envs[slot] = SleepEnv(worker, slot, median_s, sigma, seed, self.calls)

    def drain_calls(self) -> list[tuple]:
        """The calls so far as plain tuples of `EnvCall`'s fields (no class of this module crosses Ray)."""
        n = len(self.calls)  # the envs append to this very list: cut, never rebind
        calls = self.calls[:n]
        del self.calls[:n]
        return calls


@dataclass
class InstantEngine:
    """`turns - 1` clicks on the first listed element, then stop(); answers at once."""

    turns: int = 5

    def act(self, requests):
        from webrl.actions import Action
        from webrl.policy.types import Decision

        out = []
        for r in requests:
            ids = re.findall(r"^\[(\d+)\]", r.observation.elements_text, re.M)
            action = Action.click(int(ids[0])) if ids and len(r.history) < self.turns - 1 else Action.stop()
            out.append(Decision(parsed=action, response_text=action.to_compact(), prompt_ids=[1], response_ids=[2],
                                logprobs=[-0.5]))
        return out

    def load_weights(self, weights, version=None):
        pass


# -- one point -------------------------------------------------------------------------------------
@dataclass
class PointConfig:
    """One sweep point (the command line's options)."""

    slots: int
    slots_per_worker: int = 125
    """Slots of each EnvWorker actor (the last one takes the rest; EnvWorkerConfig allows 1..256)."""
    turns: int = 5
    """Steps per episode: turns - 1 clicks, then stop()."""
    group_size: int = 4
    seconds: float = 20.0
    """The measured window."""
    warmup_s: float = 5.0
    """Collection before the window (the first resets of every slot land together)."""
    step_median_s: float = 0.1
    step_p99_s: float = 0.3
    """The stand-in env's lognormal sleep per reset or step."""
    inference_workers: int = 1
    seed: int = 0


@dataclass
class Collected:
    """What the driver loop saw: each finished trajectory's turn count (the trajectories themselves
    are let go, as a steady stream would be, so the heap stays flat), stats, CPU snapshots,
    event-loop lags and the driver's garbage-collector pauses ((start, seconds))."""

    turns: list = field(default_factory=list)
    stats: Any = None
    window: tuple[float, float] = (0.0, 0.0)
    cpu: dict = field(default_factory=dict)
    loop_lags: list = field(default_factory=list)
    gc_pauses: list = field(default_factory=list)


def tree_cpu_s(memory: bool = False) -> tuple[float, float, int]:
    """(driver CPU s, CPU s of the whole process tree, the tree's PSS bytes when `memory` else 0):
    the driver, Ray's GCS and raylet, every worker and actor. PSS, not RSS: the workers share
    most of their pages (Python, Ray, numpy), which a sum of RSS would count once per process."""
    import psutil

    me = psutil.Process()
    driver = sum(me.cpu_times()[:2])
    total, pss = 0.0, 0
    for process in [me, *me.children(recursive=True)]:
        try:
            total += sum(process.cpu_times()[:2])
            pss += process.memory_full_info().pss if memory else 0
        except psutil.Error:  # exited meanwhile
            pass
    return driver, total, pss


async def _watch(out: Collected, t0: float, p: PointConfig) -> None:
    """CPU snapshots at the window's edges and the event loop's lag (a 10 ms sleep's overshoot)."""
    start, end = t0 + p.warmup_s, t0 + p.warmup_s + p.seconds
    out.window = (start, end)
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    out.cpu["start"] = tree_cpu_s()
    while time.monotonic() < end:
        before = time.monotonic()
        await asyncio.sleep(0.01)
        out.loop_lags.append(time.monotonic() - before - 0.01)
    import psutil

    out.cpu["end"], out.cpu["driver_rss"] = tree_cpu_s(), psutil.Process().memory_info().rss
    out.cpu["tree_pss"] = tree_cpu_s(memory=True)[2]  # after the window: reading smaps costs CPU


async def collect_for(coordinator: Any, p: PointConfig) -> Collected:
    """Keep every slot busy (groups started as others finish) for warmup + seconds, then drain."""
    from webrl.envs.task import BaseTask, TaskSpec
    from webrl.rollout import RolloutStats

    out, stats = Collected(), RolloutStats()
    slots, t0 = coordinator.slot_queue(), time.monotonic()
    gc.callbacks.append(timer := _gc_timer(out.gc_pauses))
    watcher = asyncio.create_task(_watch(out, t0, p))
    deadline, started, running = t0 + p.warmup_s + p.seconds, 0, set()
    target = -(-p.slots // p.group_size) + 1  # one group more than the slots hold: none sits idle
    while True:
        while time.monotonic() < deadline and len(running) < target:
            task = BaseTask(TaskSpec(id=f"stand-in/{started}", goal="click, then stop", start_url="http://127.0.0.1/"))
            running.add(asyncio.create_task(coordinator.run_group(task, f"0:{started}:{task.spec.id}", p.turns, slots,
                                                                  stats, size=p.group_size)))
            started += 1
        if not running:
            break
        done, running = await asyncio.wait(running, timeout=max(0.0, deadline - time.monotonic()) or None,
                                           return_when=asyncio.FIRST_COMPLETED)
        for group in done:
            out.turns += [len(traj.turns) for traj in group.result()]
    await watcher
    gc.callbacks.remove(timer)
    stats.wall_s = time.monotonic() - t0
    out.stats = stats
    return out


def _gc_timer(pauses: list):
    """A `gc.callbacks` entry appending each collection's pause (a full one stops the driver's loop)."""
    started = [0.0]

    def timer(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.monotonic()
        else:
            pauses.append((started[0], time.monotonic() - started[0]))
    return timer


def worker_sizes(p: PointConfig) -> list[int]:
    """Slots of each env worker: `slots_per_worker` each, the last one the rest."""
    return [min(p.slots_per_worker, p.slots - i) for i in range(0, p.slots, p.slots_per_worker)]


def start_actors(p: PointConfig) -> tuple[list, list]:
    import ray

    from webrl.envs.worker import actor_concurrency
    from webrl.envs.config import EnvWorkerConfig
    from webrl.rollout import InferenceConfig
    from webrl.rollout.placement import start_inference_workers

    if __name__ != "__main__":  # loaded as a module (the tests): actors cannot import it, so ship it by value
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    sigma = lognormal_sigma(p.step_median_s, p.step_p99_s)
    workers = []
    for w, n in enumerate(worker_sizes(p)):
        config = EnvWorkerConfig(num_slots=n, threads=n)  # one group thread per slot: slots sleep at once
        shell = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=actor_concurrency(config))(SleepEnvWorker)
        workers.append(shell.remote(config, w, p.step_median_s, sigma, p.seed))
    inference = start_inference_workers(functools.partial(InstantEngine, p.turns), InferenceConfig(),
                                        p.inference_workers, cpus_per_worker=0)
    ray.get([w.ping.remote() for w in workers] + [i.version.remote() for i in inference], timeout=300)
    return workers, inference


def run_point(p: PointConfig) -> dict:
    """One sweep point on the running local Ray: its actors, collection, statistics; actors killed after."""
    import ray

    from webrl.rollout import RolloutConfig, RolloutCoordinator

    workers, inference = start_actors(p)
    try:
        slots = [(w, i) for w, n in zip(workers, worker_sizes(p)) for i in range(n)]
        config = RolloutConfig(group_size=p.group_size, max_turns=p.turns, screenshot="som", log_trajectories="none")
        coordinator = RolloutCoordinator(slots, inference, config, seed=p.seed)
        out = asyncio.run(collect_for(coordinator, p))
        calls = [EnvCall(*c) for batch in ray.get([w.drain_calls.remote() for w in workers]) for c in batch]
        batches = [b for sizes in ray.get([i.batch_sizes.remote() for i in inference]) for b in sizes]
    finally:
        for actor in workers + inference:
            ray.kill(actor)
    return summarize(p, out, calls, batches)


def summarize(p: PointConfig, out: Collected, calls: Sequence[EnvCall], batches: Sequence[int]) -> dict:
    start, end = out.window
    steps = steps_in_window(calls, start, end)
    added = added_latencies(calls, out.window)
    gc_pauses = [pause for at, pause in out.gc_pauses if start <= at < end]
    (d0, t0, _), (d1, t1, _) = out.cpu["start"], out.cpu["end"]
    mean_sleep = lognormal_mean(p.step_median_s, lognormal_sigma(p.step_median_s, p.step_p99_s))
    ideal = ideal_steps_per_s(p.slots, mean_sleep, p.turns)
    stats, window_s = out.stats, end - start
    env_side = sum(c.end - c.start for c in calls)
    return {
        "slots": p.slots, "env_workers": -(-p.slots // p.slots_per_worker), "steps_in_window": steps,
        "steps_per_s": steps / window_s, "ideal_steps_per_s": ideal, "vs_ideal": steps / window_s / ideal,
        "added_p50_ms": 1000 * percentile(added, 50), "added_p99_ms": 1000 * percentile(added, 99),
        "driver_cpu_s_per_1000_steps": 1000 * (d1 - d0) / max(steps, 1),
        "driver_rss_mb": out.cpu["driver_rss"] / 2**20,
        "tree_cpu_cores": (t1 - t0) / window_s, "tree_pss_mb": out.cpu["tree_pss"] / 2**20,
        "mean_batch": float(np.mean(batches)) if batches else 0.0,
        "loop_lag_p99_ms": 1000 * percentile(out.loop_lags, 99),
        "loop_lag_max_ms": 1000 * max(out.loop_lags, default=0),
        "gc_pause_max_ms": 1000 * max(gc_pauses, default=0), "gc_collections": len(gc_pauses),
        "decide_ms_mean": 1000 * stats.inference_time_s / max(stats.env_steps, 1),
        "env_call_ray_ms_mean": 1000 * (stats.env_time_s - env_side) / max(len(calls), 1),
        "total_steps": stats.env_steps, "trajectories": stats.trajectories, "dropped": stats.dropped,
        "retries": stats.retries, "turns_counted": sum(out.turns),
        "episodes_of_other_length": sum(n != p.turns for n in out.turns),
        "steps_recorded": sum(c.kind == "step" for c in calls),
        "resets_recorded": sum(c.kind == "reset" for c in calls),
        "window_s": window_s, "wall_s": stats.wall_s,
    }


# -- report ----------------------------------------------------------------------------------------
COLUMNS = (("slots", "slots", "{:d}"), ("env_workers", "workers", "{:d}"), ("steps_per_s", "steps/s", "{:.0f}"),
           ("ideal_steps_per_s", "ideal", "{:.0f}"), ("vs_ideal", "vs ideal", "{:.2f}"),
           ("added_p50_ms", "added p50 ms", "{:.1f}"), ("added_p99_ms", "added p99 ms", "{:.1f}"),
           ("driver_cpu_s_per_1000_steps", "driver CPU s/1k steps", "{:.2f}"),
           ("driver_rss_mb", "driver RSS MB", "{:.0f}"), ("tree_cpu_cores", "tree CPU cores", "{:.2f}"),
           ("tree_pss_mb", "tree PSS MB", "{:.0f}"), ("mean_batch", "mean batch", "{:.1f}"),
           ("loop_lag_p99_ms", "loop lag p99 ms", "{:.1f}"), ("loop_lag_max_ms", "loop lag max ms", "{:.0f}"),
           ("gc_pause_max_ms", "GC pause max ms", "{:.0f}"))


def markdown_table(rows: Sequence[dict]) -> str:
    head = "| " + " | ".join(title for _, title, _ in COLUMNS) + " |"
    rule = "| " + " | ".join("---" for _ in COLUMNS) + " |"
    body = ["| " + " | ".join(fmt.format(row[key]) for key, _, fmt in COLUMNS) + " |" for row in rows]
    return "\n".join([head, rule, *body])


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slots", type=int, nargs="+", default=[8, 32, 128, 512, 1000])
    parser.add_argument("--slots-per-worker", type=int, default=125, help="slots per EnvWorker actor (1..256)")
    parser.add_argument("--turns", type=int, default=5, help="steps per episode (turns - 1 clicks, then stop)")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window per point")
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--step-median-s", type=float, default=0.1)
    parser.add_argument("--step-p99-s", type=float, default=0.3)
    parser.add_argument("--inference-workers", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/control_plane")
    args = parser.parse_args(argv)
    from webrl.run.ray_local import start_local_ray

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(args).items() if k != "slots"}
    saved = json.loads((out / "result.json").read_text()) if (out / "result.json").is_file() else {}
    # resume: points of the same settings already in result.json are kept, not run again
    rows = [row for row in saved.get("rows", []) if saved.get("settings") == settings and row["slots"] in args.slots]
    todo = [slots for slots in args.slots if slots not in {row["slots"] for row in rows}]
    if todo:
        start_local_ray(os.cpu_count() or 2, str(out / "ray"), {"RAY_USAGE_STATS_ENABLED": "0"})
    try:
        for slots in todo:
            point = PointConfig(slots, args.slots_per_worker, args.turns, args.group_size, args.seconds, args.warmup_s,
                                args.step_median_s, args.step_p99_s, args.inference_workers, args.seed)
            rows.append(run_point(point))
            print(markdown_table(rows[-1:]).splitlines()[-1], flush=True)
            (out / "result.json").write_text(json.dumps({"settings": settings, "cpus": os.cpu_count(), "rows": rows,
                                                         "partial": True}, indent=1))
    finally:
        if todo:
            import ray

            ray.shutdown()
    rows.sort(key=lambda row: args.slots.index(row["slots"]))
    best = max(rows, key=lambda row: row["steps_per_s"])
    verdict = "met" if best["steps_per_s"] >= TARGET_STEPS_PER_S else "not met"
    report = (f"{markdown_table(rows)}\n\nTarget: >= {TARGET_STEPS_PER_S:.0f} env steps/s sustained on "
              f"{os.cpu_count()} cores: {verdict} (best {best['steps_per_s']:.0f} steps/s at {best['slots']} slots); "
              f"settings: {settings}\n")
    print("\n" + report)
    (out / "result.json").write_text(json.dumps({"settings": settings, "cpus": os.cpu_count(), "rows": rows}, indent=1))
    (out / "result.md").write_text(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

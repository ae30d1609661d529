"""Rollout throughput: webrl's per-trajectory loop vs a lock-step loop, over the same Ray actors.

For each grid point (W EnvWorkers x C contexts each, sandbox "widgets" pages served by each
worker on 127.0.0.1, one InferenceActor running the tiny random Qwen2.5-VL with sampling) it
collects the same tasks twice:

    webrl     RolloutCoordinator: each trajectory advances as soon as its own action is ready;
              requests from all trajectories meet in the InferenceActor's dynamic batcher
    lockstep  the OpenWebRL / BrowserGym driver: reset all slots, then per turn one batched
              inference call for every live env, step them all, wait for all, repeat

and prints env steps/s, trajectories/min, and two shares of time:

    browser waits  fraction of env-slot time spent waiting for an action (sum over
                   trajectories of the time from "observation ready" to "action back",
                   divided by slots x wall)
    infer. waits   fraction of wall time the inference engine is idle (1 - busy/wall, busy
                   measured inside the engine), i.e. waiting on browsers or on batching

plus the ratio webrl/lockstep of steps/s. The random tiny model mostly produces invalid or
irrelevant actions, so episodes run to the horizon: the figures measure the machinery, not the
agent. Load average is printed with the table (the machine is shared).

    .venv/bin/python benchmarks/rollout_throughput.py            # default grid (~5-8 min on 2 cores)
    .venv/bin/python benchmarks/rollout_throughput.py --full     # 1/2/4 workers x 1/2/4 contexts

Measured (2 shared cores, load average 11-38 from other jobs, so +-30% noise; default settings:
G=2, 4 turns, 2 trajectories per slot, 16 new tokens, window 20 ms unless noted; the batch
column was added after the first run):

    W C  webrl steps/s  lockstep steps/s  ratio  batch webrl/lockstep  load (1 min)
    1 1      0.86            0.99         0.87x        1.0 / 1.0          11   (one slot: batches of 1)
    1 2      1.19            1.14         1.04x          -                  12
    1 4      1.25            1.17         1.07x          -                  17
    2 2      1.08            1.33         0.81x          -                  23
    1 4      0.64            0.62         1.03x        1.5 / 4.0          26   (rerun)
    2 2      0.84            0.67         1.26x        1.5 / 4.0          38   (rerun)
    1 4      0.89            0.56         1.58x        1.7 / 4.0          38   (window 150 ms)
    2 2      1.16            1.11         1.05x        1.9 / 4.0          25   (window 150 ms)

On this CPU-only machine the engine and the browsers share two cores, so the lock-step peer's
full batches (one forward pass for every env) are as useful as not waiting for the slowest page:
neither design wins clearly. With 2+ slots the per-trajectory loop keeps the engine busier (idle 14-48%
of the time vs 52-67% for lock-step, which waits on the slowest page every turn), but its
batches are small (1.5-1.9 of 4), which costs CPU per decision; its advantage is meant for a GPU
engine, where a batch of 1 costs nearly what a batch of 4 does, and for page times that vary
more (live sites).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

DEFAULT_GRID = [(1, 1), (1, 2), (1, 4), (2, 2)]
FULL_GRID = [(w, c) for w in (1, 2, 4) for c in (1, 2, 4)]


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def make_tasks(n: int, seed: int = 0):
    from webrl.envs.sites.source import make_task

    return [make_task("widgets", 0, "train", seed + i, start_server=False) for i in range(n)]


def run_webrl(slots, inference, tasks, group_size: int, max_turns: int) -> dict:
    from webrl.rollout import RolloutConfig, RolloutCoordinator

    import ray

    coord = RolloutCoordinator(slots, [inference], RolloutConfig(group_size=group_size, max_turns=max_turns,
                                                                 screenshot="som", retry_backoff_s=0.5))
    before = ray.get(inference.counters.remote())
    trajs, stats = coord.collect(tasks)
    return {"steps": stats.env_steps, "trajectories": len(trajs), "dropped": stats.dropped, "wall": stats.wall_s,
            "wait_inference_s": stats.inference_time_s, **_engine_delta(inference, before)}


async def _lockstep(slots, inference, tasks, group_size: int, max_turns: int) -> dict:
    """Waves of len(slots) trajectories; inside a wave every turn is a barrier across envs."""
    import dataclasses

    from webrl.policy.types import Observation, PolicyRequest
    from webrl.types import Image

    def observation(result):
        obs = {k: v for k, v in result.observation.items() if k != "screenshot"}
        o = Observation.from_env(obs, {}, screenshot="none")
        return dataclasses.replace(o, screenshot=Image(bytes(result.observation["screenshot"]), "png"))

    async def call(ref):
        return await asyncio.wrap_future(ref.future())

    jobs = [task for task in tasks for _ in range(group_size)]
    steps, wait_inference, trajectories = 0, 0.0, 0
    for w in range(0, len(jobs), len(slots)):
        wave = list(zip(slots, jobs[w:w + len(slots)]))
        results = await asyncio.gather(*(call(env.reset.remote(i, None, {"task": t})) for (env, i), t in wave))
        live = list(range(len(wave)))
        history: list[list] = [[] for _ in wave]  # same prompts as the coordinator's: past turns, last image only
        for turn in range(max_turns):
            if not live:
                break
            observations = {k: observation(results[k]) for k in live}
            requests = [PolicyRequest(observations[k], _text_only_but_last(history[k]), request_id=f"{w}/{k}/{turn}")
                        for k in live]
            t0 = time.monotonic()
            decisions = await call(inference.act_batch.remote(requests))
            wait_inference += (time.monotonic() - t0) * len(live)
            for k, (d, version) in zip(live, decisions):
                history[k].append(d.to_turn(observations[k], policy_version=version))
            actions = [d.action if d.action is not None else d.parse_error for d, _ in decisions]
            stepped = await asyncio.gather(*(call(wave[k][0][0].step.remote(wave[k][0][1], a))
                                             for k, a in zip(live, actions)))
            steps += len(live)
            for k, r in zip(live, stepped):
                results[k] = r
            live = [k for k in live if not (results[k].terminated or results[k].truncated)]
        trajectories += len(wave)
    return {"steps": steps, "trajectories": trajectories, "dropped": 0, "wait_inference_s": wait_inference}


def _text_only_but_last(history: list) -> list:
    """Past turns with the image kept on the last one only (RolloutConfig.keep_history_images=1)."""
    from webrl.types import Turn

    return [t if i == len(history) - 1 or not t.images else Turn(**{**t.__dict__, "images": []})
            for i, t in enumerate(history)]


def run_lockstep(slots, inference, tasks, group_size: int, max_turns: int) -> dict:
    import ray

    before = ray.get(inference.counters.remote())
    start = time.monotonic()
    out = asyncio.run(_lockstep(slots, inference, tasks, group_size, max_turns))
    out["wall"] = time.monotonic() - start
    return {**out, **_engine_delta(inference, before)}


def _engine_delta(inference, before: dict) -> dict:
    """Engine time and mean batch size since the `before` counters."""
    import ray

    after = ray.get(inference.counters.remote())
    batches = max(after["batches"] - before["batches"], 1.0)
    return {"busy_s": after["busy_s"] - before["busy_s"],
            "mean_batch": (after["decisions"] - before["decisions"]) / batches}


def summarize(r: dict, num_slots: int) -> dict:
    wall = max(r["wall"], 1e-9)
    return {"steps_per_s": r["steps"] / wall, "traj_per_min": 60 * r["trajectories"] / wall,
            "browser_waits": r["wait_inference_s"] / (num_slots * wall),
            "inference_waits": max(0.0, 1 - r["busy_s"] / wall), "dropped": r["dropped"],
            "mean_batch": r["mean_batch"]}


def bench_point(workers: int, contexts: int, inference, args) -> dict:
    import ray

    from webrl.rollout.placement import start_env_workers

    env_config = {"num_slots": contexts, "viewport": args.viewport}
    envs = start_env_workers(env_config, workers, cpus_per_worker=0.5)
    try:
        ray.get([e.ping.remote() for e in envs])
        slots = [(e, i) for e in envs for i in range(contexts)]
        n_tasks = max(1, (args.waves * len(slots)) // args.group_size)
        warm = make_tasks(max(1, len(slots) // args.group_size) or 1, seed=10_000)
        run_webrl(slots, inference, warm, args.group_size, 1)  # first page loads and JIT, untimed
        out = {}
        for name, fn in (("webrl", run_webrl), ("lockstep", run_lockstep)):
            out[name] = summarize(fn(slots, inference, make_tasks(n_tasks), args.group_size, args.max_turns),
                                  len(slots))
        return out
    finally:
        for e in envs:
            try:
                ray.get(e.close.remote(), timeout=30)
            except Exception:
                pass
            ray.kill(e)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true", help="1/2/4 env workers x 1/2/4 contexts")
    parser.add_argument("--grid", default="", help="e.g. 1x1,2x2 (workers x contexts)")
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--waves", type=int, default=2, help="trajectories per env slot in each measured run")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--viewport", default="640x480")
    parser.add_argument("--batch-window", type=float, default=0.02, help="InferenceConfig.batch_window_s (webrl mode)")
    args = parser.parse_args()
    grid = FULL_GRID if args.full else DEFAULT_GRID
    if args.grid:
        grid = [tuple(int(x) for x in p.split("x")) for p in args.grid.split(",")]

    import ray

    from webrl.models import tiny_model
    from webrl.policy import GeneratorConfig, SamplingConfig
    from webrl.policy.prompt import PromptConfig
    from webrl.run.ray_local import start_local_ray
    from webrl.rollout import InferenceConfig
    from webrl.engines.engine import GeneratorEngineFactory
    from webrl.rollout.placement import start_inference_workers

    temp = tempfile.mkdtemp(prefix="rb")
    model = tiny_model("qwen2.5-vl", out_dir=os.path.join(temp, "model"))
    start_local_ray(max(4, 1 + max(w for w, _ in grid)), os.path.join(temp, "ray"))
    generator = GeneratorConfig(prompt=PromptConfig(action_format="compact"),
                                sampling=SamplingConfig(temperature=1.0, max_new_tokens=args.max_new_tokens))
    [inference] = start_inference_workers(GeneratorEngineFactory(model, generator),
                                          InferenceConfig(batch_window_s=args.batch_window, max_batch_size=16), 1,
                                          cpus_per_worker=0.5)
    print(f"load average at start: {loadavg()}  (cores: {os.cpu_count()})")
    header = (f"{'W':>2} {'C':>2} {'mode':>8} | {'steps/s':>7} {'traj/min':>8} | {'browser waits':>13} "
              f"{'infer. waits':>12} {'batch':>5} | {'x steps/s':>9}")
    print(header + "\n" + "-" * len(header), flush=True)
    started = time.monotonic()
    try:
        for workers, contexts in grid:
            row = bench_point(workers, contexts, inference, args)
            for name in ("webrl", "lockstep"):
                r = row[name]
                ratio = r["steps_per_s"] / max(row["lockstep"]["steps_per_s"], 1e-9)
                print(f"{workers:>2} {contexts:>2} {name:>8} | {r['steps_per_s']:7.2f} {r['traj_per_min']:8.1f} | "
                      f"{100 * r['browser_waits']:12.0f}% {100 * r['inference_waits']:11.0f}% {r['mean_batch']:5.1f} | {ratio:8.2f}x"
                      + (f"  dropped {r['dropped']}" if r["dropped"] else ""), flush=True)
            print(f"   load average: {loadavg()}", flush=True)
    finally:
        ray.shutdown()
    print(f"total {time.monotonic() - started:.0f} s; load average at end: {loadavg()}")


if __name__ == "__main__":
    main()

"""The main job's collection against its two floors, in one run (issue #39 item 2).

Rows, all on the sandbox "widgets" level-0 tasks at 640x480 with N env slots (default 4):

    raw Playwright   N loops (async Playwright, one page each) on one Chromium, and on N
                     Chromiums (one each: a screenshot waits on its browser's compositor, which
                     the pages of one browser share); each episode a navigation to the
                     task's entry page and a PNG screenshot, then L - 1 clicks on a random
                     visible link / button / input, each followed by a PNG screenshot, and a
                     last screenshot for the stop() step: the browser's own cost of what an
                     episode of the job does
    instant policy   webrl's own loop (RolloutCoordinator, one EnvWorker Ray actor of N slots,
                     an InferenceActor) with a policy that answers at once: clicks on
                     seeded-random listed elements, then stop(). Everything but the model
    main job         `examples/train_online_mind2web.py trainer.iterations=2 tasks.eval_tasks=0
                     tasks.train_levels=[0] learner.optim.lr=2e-4` (the embedded default of
                     2026-12-04 to 2026-12-07 without evaluation: level-0 tasks of every kind,
                     the floors' pages), env steps/s of each RL
                     iteration as its metrics log them

Fair floors (issue #53): the main job runs first, and both floors replay its own episodes'
lengths (steps per reset, read from its trajectory log; cycled), so a reset is spread over as
many steps in every row; each row also prints its steps per reset. `--lengths` gives them by
hand (with --skip-job the default is 3). Each row is written to `<out>/result.json` as it is
measured, and a rerun with the same settings and --out measures only the rows it lacks.

The webrl rows run once per `--threads` value (env.threads: browsers of the env worker; 0 is
the default, one browser per slot up to 4). Every row prints env steps/s and its ratio to the faster
raw row. Steps are counted as the job's `env_steps_per_s` counts them: every action sent to
the env, stop() included (it is scored and observed); the raw loops count each click and the
final screenshot.

    .venv/bin/python benchmarks/collection_throughput.py --out benchmarks/results/collection_2026-12-04

About 8 minutes on 2 cores (two main-job runs of about 100 s each). Measure on a quiet machine.

Real-Chromium points (issue #53 item 3; benchmarks/chromium_slots.py), run alone, nothing else:

    .venv/bin/python benchmarks/collection_throughput.py --chromium-slots 4 8 16 24 \
        --out benchmarks/results/chromium_slots_2026-12-07

the instant-policy loop at each slot count (one EnvWorker of N slots, env.threads=0: one browser
per slot up to 4, more slots share those 4) for a 30 s window after 10 s (--chromium-seconds,
--chromium-warmup-s): env steps/s, steps per reset, the env side's PSS (EnvWorker process and
every Chromium under it) per slot, the driver's RSS and the machine's available memory before the
point and at its window's end. A point whose projected memory (the previous point's MiB per slot
x slots + 2 GiB) exceeds the available memory is not run: the sweep stops there and says why.
Points land in result.json ("chromium_points", each as it is measured; a rerun with the same
settings runs only the missing ones) and as a markdown table in chromium_slots.md. About 1-2 min
a point (Ray's start, every slot's first load, 40 s of collection, the drain; 2.5 min for 2 slots
at load average 30 on 2 cores).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import chromium_slots  # noqa: E402
CLICKABLE = ", ".join(f"{s}:visible" for s in ("a[href]", "button", "input", "select", "[role=button]"))
"""What the raw loops click: visible links and controls (a hidden one would wait out the click's timeout)."""


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def make_tasks(n: int, seed: int):
    from webrl.envs.sites.source import make_task

    return [make_task("widgets", 0, "train", seed + i) for i in range(n)]


# -- raw Playwright floor ------------------------------------------------------------------------
async def _raw_loop(page, tasks, rng: random.Random, lengths: list[int]) -> int:
    """Each task an episode of lengths[k] steps (k: its place in `tasks`, cycled): L - 1 clicks,
    then the stop() step's screenshot."""
    steps = 0
    for k, task in enumerate(tasks):
        await page.goto(task.entry_url(), wait_until="load")
        await page.screenshot(type="png")
        for _ in range(lengths[k % len(lengths)] - 1):
            targets = page.locator(CLICKABLE)
            count = await targets.count()
            if not count:
                break
            try:
                await targets.nth(rng.randrange(count)).click(timeout=2000)
            except Exception:  # hidden or detached: the click still cost the browser its checks
                pass
            await page.screenshot(type="png")
            steps += 1
        await page.screenshot(type="png")  # the stop() step's observation
        steps += 1
    return steps


async def _raw(slots: int, browsers: int, episodes: int, lengths: list[int], seed: int) -> dict:
    from playwright.async_api import async_playwright

    from webrl.envs.browser import launch_flags, resolve_executable

    tasks = make_tasks(episodes, seed)
    async with async_playwright() as p:
        launched = [await p.chromium.launch(executable_path=resolve_executable(""), args=list(launch_flags()))
                    for _ in range(browsers)]
        contexts = [await launched[i % browsers].new_context(viewport={"width": 640, "height": 480})
                    for i in range(slots)]
        pages = [await c.new_page() for c in contexts]
        await _raw_loop(pages[0], make_tasks(1, seed + 10_000), random.Random(seed), [3])  # warm-up
        start = time.monotonic()
        shares = [tasks[i::slots] for i in range(slots)]
        steps = await asyncio.gather(*(_raw_loop(pages[i], shares[i], random.Random(seed + i), lengths[i::slots] or [1])
                                       for i in range(slots)))
        wall = time.monotonic() - start
        for browser in launched:
            await browser.close()
    return {"steps": sum(steps), "resets": len(tasks), "wall_s": wall}


def bench_raw(slots: int, browsers: int, episodes: int, lengths: list[int], seed: int) -> dict:
    """On a thread of its own: its event loop must not meet one already running here (a sync
    Playwright session keeps one in its thread)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _raw(slots, browsers, episodes, lengths, seed)).result()


# -- webrl's loop with a policy that answers at once ---------------------------------------------
@dataclass
class InstantEngine:
    """Episodes of a length drawn (seeded by the episode) from `lengths`: L - 1 clicks on
    seeded-random element ids of the observation's list, then stop()."""

    lengths: tuple = (3,)
    seed: int = 0

    def act(self, requests):
        from webrl.actions import Action
        from webrl.policy.types import Decision

        out = []
        for r in requests:
            ids = [int(m) for m in re.findall(r"^\[(\d+)\]", r.observation.elements_text, re.M)]
            episode = r.request_id.rsplit("/", 1)[0]  # "<group>/<member>/<turn>"
            length = random.Random(f"{self.seed}:{episode}").choice(self.lengths)
            rng = random.Random(f"{self.seed}:{r.request_id}")
            action = Action.click(rng.choice(ids)) if ids and len(r.history) < length - 1 else Action.stop()
            out.append(Decision(parsed=action, response_text=action.to_compact(), prompt_ids=[1],
                                response_ids=[2], logprobs=[-0.5]))
        return out

    def load_weights(self, weights, version=None):
        pass


def bench_instant(slots: int, threads: int, episodes: int, lengths: list[int], seed: int, run_dir: Path) -> dict:
    import ray

    from webrl.envs.worker import make_env_worker_actor
    from webrl.rollout import RolloutConfig, RolloutCoordinator
    from webrl.rollout.inference import InferenceActor
    from webrl.run.ray_local import start_local_ray

    start_local_ray(4, tempfile.mkdtemp(prefix="ct", dir=run_dir))
    try:
        env = make_env_worker_actor({"num_slots": slots, "threads": threads, "viewport": "640x480"}, num_cpus=1)
        ray.get(env.ping.remote(), timeout=300)
        inference = ray.remote(num_cpus=0)(InferenceActor).remote(lambda: InstantEngine(tuple(lengths), seed))
        config = RolloutConfig(group_size=2, max_turns=max(lengths), screenshot="som")
        coordinator = RolloutCoordinator([(env, i) for i in range(slots)], [inference], config, seed=seed)
        coordinator.collect(make_tasks(max(1, slots // 2), seed + 10_000))  # warm-up: first loads
        trajectories, stats = coordinator.collect(make_tasks(episodes // 2, seed))
        ray.get(env.close.remote(), timeout=120)
        return {"steps": stats.env_steps, "resets": len(trajectories), "wall_s": stats.wall_s,
                "dropped": stats.dropped}
    finally:
        ray.shutdown()


# -- the main job ----------------------------------------------------------------------------------
def bench_job(threads: int, run_dir: Path) -> dict:
    out = run_dir / f"job-threads{threads}"
    command = [sys.executable, str(ROOT / "examples" / "train_online_mind2web.py"), "trainer.iterations=2",
               "tasks.eval_tasks=0", "tasks.train_levels=[0]", "learner.optim.lr=2e-4", f"env.threads={threads}", f"run.run_dir={out}"]
    start = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if "iteration" in r and r.get("stage") is None]
    lengths = [len(json.loads(line)["turns"]) for f in sorted(out.rglob("trajectories.jsonl"))
               for line in f.read_text().splitlines() if line.strip()]
    return {"per_iteration": [r["env_steps_per_s"] for r in rl], "time_collect_s": [r["time_collect_s"] for r in rl],
            "episode_lengths": lengths, "wall_s": time.monotonic() - start, "run_dir": str(out)}


def job_row(r: dict) -> dict:
    """A main-job row's rate: its last RL iteration's env steps/s."""
    return {"steps_per_s": r["per_iteration"][-1], **r}


def rate_row(r: dict) -> dict:
    """A floor row's rate: its steps over its wall time."""
    return {"steps_per_s": r["steps"] / r["wall_s"], **r}


def chromium_sweep(args, out, run_dir: Path) -> int:
    """--chromium-slots: the instant-policy loop at each slot count, alone (benchmarks/chromium_slots.py);
    points of the same settings already in result.json are kept, the file's other rows untouched."""
    import psutil

    lengths = [int(x) for x in args.lengths.split(",") if x] or [3]
    settings = {"lengths": lengths, "seed": args.seed, "seconds": args.chromium_seconds,
                "warmup_s": args.chromium_warmup_s}
    saved = json.loads((out / "result.json").read_text()) if out and (out / "result.json").is_file() else {}
    points = list(saved.get("chromium_points", [])) if saved.get("chromium_settings") == settings else []

    def save(points: list, stopped: str) -> None:
        if out:
            out.mkdir(parents=True, exist_ok=True)
            sweep = {"chromium_settings": settings, "chromium_points": points, "chromium_stopped": stopped}
            (out / "result.json").write_text(json.dumps({**saved, **sweep}, indent=1))

    def measure(slots: int) -> dict:
        print(f"{slots} slots: measuring (load average {loadavg()})", flush=True)
        return chromium_slots.run_point(slots, lambda: InstantEngine(tuple(lengths), args.seed), make_tasks,
                                        max(lengths), args.seed, args.chromium_seconds, args.chromium_warmup_s, run_dir)

    stopped = chromium_slots.sweep(args.chromium_slots, points, measure,
                                   lambda: psutil.virtual_memory().available / chromium_slots.MB, save)
    report = (f"{chromium_slots.markdown_table(points)}\n\nwidgets level 0, 640x480, one EnvWorker (env.threads=0), "
              f"episode lengths {lengths}, {args.chromium_seconds:g} s measured after {args.chromium_warmup_s:g} s; "
              f"{'stopped: ' + stopped if stopped else 'every point run'}; load average after: {loadavg()}\n")
    print("\n" + report)
    if out:
        (out / "chromium_slots.md").write_text(report)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--threads", default="1,0", help="env.threads values of the webrl rows (0: the default)")
    parser.add_argument("--episodes", type=int, default=64, help="episodes per floor measurement")
    parser.add_argument("--lengths", default="", help="steps per episode of the floors, comma-separated (cycled); "
                        "default: the main job's own episodes (its first row), or 3 with --skip-job")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-job", action="store_true", help="floors only")
    parser.add_argument("--out", default="", help="folder for result.json")
    parser.add_argument("--chromium-slots", type=int, nargs="+", default=[],
                        help="run only the real-Chromium sweep of the instant-policy loop at these slot counts")
    parser.add_argument("--chromium-seconds", type=float, default=30.0, help="the sweep's measured window per point")
    parser.add_argument("--chromium-warmup-s", type=float, default=10.0,
                        help="the sweep's collection before the window")
    args = parser.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    run_dir = Path(tempfile.mkdtemp(prefix="webrl-collection-"))
    print(f"load average before: {loadavg()}", flush=True)
    if args.chromium_slots:
        return chromium_sweep(args, Path(args.out) if args.out else None, run_dir)
    settings = {"slots": args.slots, "episodes": args.episodes, "lengths": args.lengths, "seed": args.seed}
    out = Path(args.out) if args.out else None
    saved = json.loads((out / "result.json").read_text()) if out and (out / "result.json").is_file() else {}
    # resume: rows of the same settings already in result.json are kept, not measured again
    result = {**settings, "rows": dict(saved.get("rows", {})) if saved.get("settings") == settings else {},
              "settings": settings}
    rows = result["rows"]

    def measured(name: str, measure) -> dict:
        if name not in rows:
            rows[name] = measure()
            if out:
                out.mkdir(parents=True, exist_ok=True)
                (out / "result.json").write_text(json.dumps({**result, "partial": True}, indent=1))
        return rows[name]

    lengths = [int(x) for x in args.lengths.split(",") if x]
    if not args.skip_job:  # first: its episodes set the floors' steps per reset
        for t in threads:
            r = measured(f"main job, env.threads={t}", lambda t=t: job_row(bench_job(t, run_dir)))
            lengths = lengths or r["episode_lengths"]
    lengths = lengths or [3]
    result["floor_lengths"] = {"mean": sum(lengths) / len(lengths), "n": len(lengths)}
    for browsers in sorted({1, args.slots}):
        measured(f"raw Playwright, {browsers} browser(s)",
                 lambda b=browsers: rate_row(bench_raw(args.slots, b, args.episodes, lengths, args.seed)))
    for t in threads:
        measured(f"instant policy, env.threads={t}",
                 lambda t=t: rate_row(bench_instant(args.slots, t, args.episodes, lengths, args.seed, run_dir)))
    for row in rows.values():
        if "resets" in row:
            row["steps_per_reset"] = row["steps"] / max(1, row["resets"])
        elif "episode_lengths" in row:
            row["steps_per_reset"] = sum(row["episode_lengths"]) / max(1, len(row["episode_lengths"]))
    floor = max(row["steps_per_s"] for name, row in rows.items() if name.startswith("raw"))
    print(f"\n{args.slots} slots, widgets level 0, 640x480; floors replay {len(lengths)} episode lengths "
          f"(mean {result['floor_lengths']['mean']:.2f} steps); load average after: {loadavg()}")
    print(f"{'row':36s} {'env steps/s':>12s} {'steps/reset':>12s} {'vs the faster raw row':>22s}")
    for name, row in rows.items():
        extra = (" (iterations: " + ", ".join(f"{x:.2f}" for x in row["per_iteration"]) + ")"
                 if "per_iteration" in row else "")
        print(f"{name:36s} {row['steps_per_s']:12.2f} {row['steps_per_reset']:12.2f} "
              f"{row['steps_per_s'] / floor:21.2f}x{extra}")
    result["load_average_after"] = loadavg()
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "result.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

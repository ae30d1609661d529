"""Env slots stepping concurrently: steps/s of one EnvWorker with 1, 2 and 4 slots, threads=1 vs threads=slots.

The site is a tiny `http.server` on 127.0.0.1 that sleeps a fixed time (--delay-ms, default 200)
before answering each page, as a slow live site does; every step is `goto(<next page>)`, so each
step waits on the server once. With threads=1 the worker's slots share one Chromium on one thread
and step one after another (what `max_concurrency=1` gave); with threads=slots each slot has its
own browser thread and the server waits overlap, which shows even on 2 cores.

The worker runs behind a stand-in for its Ray shell: a thread pool of `actor_concurrency(config)`
threads (1 for threads=1, as a sync Ray actor runs everything on one thread), the worker built on
that pool, and one driver thread per slot sending step after step, as the coordinator's
trajectories do. `--ray` puts the worker in a real Ray actor instead (make_env_worker_actor).

    python benchmarks/env_concurrency.py --out benchmarks/results/env_concurrency_2026-12-01
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from webrl.envs import EnvWorker, EnvWorkerConfig, TaskSpec
from webrl.envs.worker import actor_concurrency

PAGE = ("<!doctype html><html><head><title>page {n}</title></head><body><h1>Page {n}</h1>"
        "<p>A slow page.</p><a id='next' href='/p{m}.html'>next</a><button id='b'>Press</button></body></html>")


def slow_server(delay_s: float) -> ThreadingHTTPServer:
    """Pages /p<N>.html answered after `delay_s` (every request its own thread, so waits overlap)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if not self.path.startswith("/p"):
                self.send_error(404)
                return
            time.sleep(delay_s)
            n = int(self.path[2:].split(".")[0] or 0)
            body = PAGE.format(n=n, m=n + 1).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def run_local(slots: int, threads: int, base: str, steps: int) -> dict:
    config = EnvWorkerConfig(num_slots=slots, threads=threads, viewport="small")
    shell = ThreadPoolExecutor(actor_concurrency(config))  # the Ray shell's threads
    worker = shell.submit(EnvWorker, config).result()
    try:
        spec = TaskSpec(id="bench/slow", goal="visit pages", start_url=f"{base}/p0.html")
        list(shell.map(lambda s: worker.reset(s, options={"task": spec}), range(slots)))

        def drive(slot: int) -> int:
            done = 0
            for k in range(steps):
                result = shell.submit(worker.step, slot, f'goto("{base}/p{100 * slot + k + 1}.html")').result()
                assert not result.info.get("infra_error"), result.info["infra_error"]
                done += 1
            return done

        t0 = time.perf_counter()
        with ThreadPoolExecutor(slots) as drivers:
            total = sum(drivers.map(drive, range(slots)))
        wall = time.perf_counter() - t0
    finally:
        shell.submit(worker.close).result()
        shell.shutdown()
    return {"slots": slots, "threads": threads, "steps": total, "wall_s": round(wall, 3),
            "steps_per_s": round(total / wall, 3)}


def tree_memory_mb() -> dict:
    """Memory of this process's descendants (Playwright drivers, Chromiums and their renderers), MB:
    summed RSS (counts shared pages once per process, so it overstates) and summed PSS (shared pages
    split between their processes: what the tree really holds)."""
    import psutil

    rss = pss = 0
    for child in psutil.Process().children(recursive=True):
        try:
            info = child.memory_full_info()
        except psutil.Error:  # gone meanwhile
            continue
        rss, pss = rss + info.rss, pss + info.pss
    return {"children_rss_mb": round(rss / 2 ** 20, 1), "children_pss_mb": round(pss / 2 ** 20, 1)}


def run_memory(slots: int, threads: int, base: str) -> dict:
    """Child-process memory with every slot's episode open: what each further browser group costs."""
    config = EnvWorkerConfig(num_slots=slots, threads=threads, viewport="small")
    shell = ThreadPoolExecutor(actor_concurrency(config))
    worker = shell.submit(EnvWorker, config).result()
    try:
        spec = TaskSpec(id="bench/slow", goal="visit pages", start_url=f"{base}/p0.html")
        list(shell.map(lambda s: worker.reset(s, options={"task": spec}), range(slots)))
        memory = tree_memory_mb()
    finally:
        shell.submit(worker.close).result()
        shell.shutdown()
    return {"slots": slots, "threads": threads, **memory}


def run_ray(slots: int, threads: int, base: str, steps: int) -> dict:
    import ray

    from webrl.envs import make_env_worker_actor

    actor = make_env_worker_actor({"num_slots": slots, "threads": threads, "viewport": "small"},
                                  num_cpus=0, max_restarts=0)
    spec = TaskSpec(id="bench/slow", goal="visit pages", start_url=f"{base}/p0.html")
    ray.get([actor.reset.remote(s, options={"task": spec}) for s in range(slots)], timeout=300)

    def drive(slot: int) -> int:
        for k in range(steps):
            ray.get(actor.step.remote(slot, f'goto("{base}/p{100 * slot + k + 1}.html")'), timeout=300)
        return steps

    t0 = time.perf_counter()
    with ThreadPoolExecutor(slots) as drivers:
        total = sum(drivers.map(drive, range(slots)))
    wall = time.perf_counter() - t0
    ray.get(actor.close.remote(), timeout=120)
    ray.kill(actor)
    return {"slots": slots, "threads": threads, "steps": total, "wall_s": round(wall, 3),
            "steps_per_s": round(total / wall, 3), "ray": True}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-ms", type=float, default=200.0, help="server-side wait per page")
    parser.add_argument("--steps", type=int, default=10, help="steps per slot")
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--ray", action="store_true", help="drive a real Ray actor instead of the stand-in shell")
    parser.add_argument("--ray-temp-dir", default="", help="Ray's session folder (default: Ray's /tmp/ray)")
    parser.add_argument("--memory", action="store_true",
                        help="instead of steps/s: child-process memory with all episodes open (memory.json)")
    parser.add_argument("--out", type=Path, default=None, help="folder for results.json")
    args = parser.parse_args()
    if args.memory and args.ray:
        parser.error("--memory measures a local worker's processes; it cannot be combined with --ray")
    server = slow_server(args.delay_ms / 1000)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    run = run_local
    if args.ray:
        import ray

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        for attempt in range(3):  # Ray gives its raylet a fixed 30 s to start: retry on a loaded machine
            try:
                ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=args.ray_temp_dir or None)
                break
            except Exception:
                ray.shutdown()
                if attempt == 2:
                    raise
        run = run_ray
    if args.memory:
        rows = [run_memory(slots, threads, base) for slots in args.slots for threads in sorted({1, slots})]
        for row in rows:
            print(row, flush=True)
        server.shutdown()
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "memory.json").write_text(json.dumps(
                {"command": " ".join([Path(sys.executable).name, *sys.argv]), "rows": rows}, indent=2) + "\n")
        return 0
    rows = []
    for slots in args.slots:
        for threads in sorted({1, slots}):
            row = run(slots, threads, base, args.steps)
            rows.append(row)
            print(f"slots={slots} threads={threads}: {row['steps']} steps in {row['wall_s']:.2f} s "
                  f"= {row['steps_per_s']:.2f} steps/s", flush=True)
    server.shutdown()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        result = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "delay_ms": args.delay_ms,
                  "steps_per_slot": args.steps, "cpus": os.cpu_count(), "python": platform.python_version(),
                  "note": "one run on a shared 2-core machine under load (other jobs running)", "rows": rows}
        name = "results_ray.json" if args.ray else "results.json"
        (args.out / name).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

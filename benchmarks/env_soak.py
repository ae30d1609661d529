"""Env soak: one `EnvWorker` runs N episodes back to back on a hostile local site.

Each episode is reset -> click the page's button -> stop(), on one of five pages drawn by a
seeded RNG (weights in PAGE_WEIGHTS):

    ok           the button writes "clicked"; the episode ends with stop() (done)
    hang_js      the click handler loops forever (`while (true) {}`): the step watchdog ends it
    hang_server  the click navigates to /stall, which the server answers only after STALL_S
    crash        the click allocates until the renderer dies (V8 heap capped with
                 --js-flags=--max-old-space-size, so the renderer dies at ~64 MB, not GBs)
    popups       timers and the click open windows by the dozen (Chromium's popup blocker and
                 webrl.envs.safety.MAX_TABS keep them in check)

What it reports (JSON, and a summary on stdout):
  - every episode's end, counted: done / truncated / infra_error, plus "exception" (the worker
    raised: an episode lost) and "stuck" (a call still running after --stuck-after-s);
  - RSS of the Chromium processes (sum over the process tree; shared pages are counted once per
    process, so this overstates, but its growth is what matters) and of the worker (this Python
    process + the Playwright driver) at episode 1, 100, 1000 and every --sample-every;
  - browser start-up time: the worker's own start, then a fresh 1-slot EnvWorker started
    every --probe-every episodes while the soak runs (start-up under that load);
  - episode-slot start-up time: every reset's wall time, by page (median / p95 / max);
  - orphans: Chromium processes still alive after `worker.close()` among our descendants and
    among every Chromium PID seen during the run (a reparented orphan loses the parent chain).

Slots: `--slots` env slots over `--threads` browser groups (EnvWorkerConfig.threads;
one driver thread per group, each interleaving its slots' calls).

    python benchmarks/env_soak.py --episodes 1000 --slots 4 --threads 4 \
        --out benchmarks/results/env_soak_2026-12-01/soak.json
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional

import psutil

from webrl.envs import EnvWorker, EnvWorkerConfig, TaskSpec, safety, watchdog

PAGE_WEIGHTS = {"ok": 0.6, "hang_js": 0.1, "hang_server": 0.1, "crash": 0.1, "popups": 0.1}
STALL_S = 30.0
HEAP_CAP_MB = 64
RSS_AT = (1, 100, 1000)

_BUTTON = '<button id="go" onclick="{handler}">Go</button><p id="out">idle</p>'
PAGES = {
    "ok": _BUTTON.format(handler="out.textContent = 'clicked'"),
    "hang_js": _BUTTON.format(handler="while (true) {}"),
    "hang_server": _BUTTON.format(handler="location.href = '/stall'"),
    # 8 MB arrays on the V8 heap (typed arrays would live outside it) until the capped heap is
    # full: V8 aborts and the renderer dies
    "crash": _BUTTON.format(handler="const a = []; for (;;) a.push(new Array(1 << 20).fill(Math.random()))"),
    "popups": _BUTTON.format(handler="for (let i = 0; i < 50; i++) window.open('/ok?' + i)")
    + "<script>setInterval(() => window.open('/ok?timer'), 50);"
      "for (let i = 0; i < 20; i++) window.open('/ok?load' + i);</script>",
}


class _Site(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        name = self.path.split("?")[0].strip("/") or "ok"
        if name == "stall":
            time.sleep(STALL_S)
        body = PAGES.get(name, PAGES["ok"])
        html = f'<!DOCTYPE html><html><head><title>{name}</title></head><body>{body}' \
               f'<script>const out = document.getElementById("out");</script></body></html>'.encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(html)))
            self.end_headers()
            self.wfile.write(html)
        except (BrokenPipeError, ConnectionResetError):  # the browser gave up on /stall
            pass

    def log_message(self, *args: Any) -> None:
        return None


def start_site() -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


# -- process accounting ----------------------------------------------------------------------
def descendants() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def is_chromium(proc: psutil.Process) -> bool:
    try:
        return "chrom" in proc.name().lower() or "chrom" in " ".join(proc.cmdline()[:1]).lower()
    except psutil.Error:
        return False


def rss_mb(procs: list[psutil.Process]) -> float:
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def chromium_pids() -> set[int]:
    """Chromium processes among our descendants now: the ones alive before the run (another
    browser of the calling process, such as a test suite's) and the processes they start later
    are left out of every count (`ours`)."""
    return {p.pid for p in descendants() if is_chromium(p)}


def ours(procs: list, before: frozenset) -> list:
    """`procs` that are neither in `before` nor started by a process in it."""
    def foreign(proc) -> bool:
        try:
            return proc.pid in before or any(parent.pid in before for parent in proc.parents())
        except psutil.Error:
            return False
    return [p for p in procs if not foreign(p)]


def memory_sample(episode: int, seen: dict[int, float], before: frozenset = frozenset()) -> dict[str, float]:
    """RSS (MiB) of Chromium processes and of the worker (this process + Playwright driver);
    `before`: Chromium pids that were not the run's (`chromium_pids()` at its start)."""
    procs = ours(descendants(), before)
    chromium = [p for p in procs if is_chromium(p)]
    for proc in chromium:
        try:
            seen.setdefault(proc.pid, proc.create_time())
        except psutil.Error:
            pass
    driver = [p for p in procs if not is_chromium(p)]
    return {"episode": episode, "chromium_rss_mb": round(rss_mb(chromium), 1),
            "chromium_processes": len(chromium),
            "worker_rss_mb": round(rss_mb([psutil.Process()]) + rss_mb(driver), 1)}


def orphans(seen: dict[int, float], before: frozenset = frozenset()) -> dict[str, int]:
    """Chromium processes alive after close: among our descendants, and among all PIDs seen
    (those in `before` were alive before the run and are not its)."""
    time.sleep(1.0)  # Chromium's children exit a moment after the browser process
    left = [p for p in ours(descendants(), before) if is_chromium(p) and p.status() != psutil.STATUS_ZOMBIE]
    alive = 0
    for pid, created in seen.items():
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                alive += 1
        except psutil.Error:
            pass
    return {"chromium_descendants_after_close": len(left), "seen_chromium_pids_alive_after_close": alive,
            "chromium_pids_seen": len(seen)}


# -- episodes --------------------------------------------------------------------------------
@dataclass
class Tally:
    """Shared counters of the driver threads (under `lock`)."""

    outcomes: dict[str, int] = field(default_factory=dict)
    by_page: dict[str, dict[str, int]] = field(default_factory=dict)
    reset_s: dict[str, list[float]] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)  # "page: infra_error kind" -> count
    errors: list[str] = field(default_factory=list)
    started: int = 0
    finished: int = 0
    in_flight: dict[int, float] = field(default_factory=dict)  # slot -> call start (monotonic)
    stuck: set = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


def outcome(result: Any) -> Optional[str]:
    """done / infra_error / truncated for an ended episode, None while it runs."""
    if result.terminated:
        return "done"
    if result.truncated:
        return "infra_error" if result.info.get("infra_error") else "truncated"
    return None


def element(info: dict, dom_id: str) -> Optional[int]:
    return next((e["id"] for e in info.get("elements", []) if e.get("dom_id") == dom_id), None)


class Soak:
    """Drives the worker: group g's thread runs slots g, g+T, ... interleaved, one call at a time."""

    def __init__(self, worker: EnvWorker, base_url: str, args: argparse.Namespace, tally: Tally):
        self.worker, self.base_url, self.args, self.tally = worker, base_url, args, tally
        self.rng = random.Random(args.seed)
        self.deadline = time.monotonic() + 60 * args.max_minutes if args.max_minutes else float("inf")

    def next_episode(self) -> Optional[tuple[int, str]]:
        with self.tally.lock:
            if self.tally.started >= self.args.episodes or time.monotonic() > self.deadline:
                return None
            self.tally.started += 1
            weights = {k: w for k, w in PAGE_WEIGHTS.items() if not self.args.pages or k in self.args.pages}
            page = self.rng.choices(list(weights), weights=list(weights.values()))[0]
            return self.tally.started, page

    def call(self, slot: int, fn, *args: Any) -> Any:
        with self.tally.lock:
            self.tally.in_flight[slot] = time.monotonic()
        try:
            return fn(slot, *args)
        finally:
            with self.tally.lock:
                self.tally.in_flight.pop(slot, None)

    def run_group(self, slots: list[int], on_episode_end) -> None:
        state: dict[int, dict] = {}
        exhausted = False
        while True:
            for slot in slots:
                if slot not in state and not exhausted:
                    drawn = self.next_episode()
                    exhausted = drawn is None
                    if drawn is not None:
                        state[slot] = {"n": drawn[0], "page": drawn[1], "phase": "reset"}
                if slot in state and self.advance(slot, state[slot]):
                    on_episode_end(state.pop(slot))
            if exhausted and not state:
                return

    def advance(self, slot: int, ep: dict) -> bool:
        """One call for the slot's episode; True when it ended."""
        task = TaskSpec(id=f"soak/{ep['page']}/{ep['n']}", goal="press Go", start_url=f"{self.base_url}/{ep['page']}",
                        max_steps=3)
        try:
            if ep["phase"] == "reset":
                started = time.monotonic()
                result = self.call(slot, self.worker.reset, ep["n"], {"task": task})
                ep["reset_s"] = time.monotonic() - started
                target = element(result.info, "go")
                ep["phase"] = "click" if target is not None else "stop"
                ep["action"] = f"click({target})"
            elif ep["phase"] == "click":
                result = self.call(slot, self.worker.step, ep["action"])
                ep["phase"] = "stop"
            else:
                result = self.call(slot, self.worker.step, "stop()")
                ep["phase"] = "ended"
        except Exception as error:  # the worker raised: the episode is lost
            ep["outcome"], ep["error"] = "exception", f"{type(error).__name__}: {error}"[:300]
            return True
        ep["outcome"] = outcome(result)
        if result.info.get("infra_error"):
            ep["reason"] = str(result.info["infra_error"]).split(":")[0]
        if ep["outcome"] is None and ep["phase"] == "ended":
            ep["outcome"] = "still_running"  # stop() should always end it
        return ep["outcome"] is not None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def summary_s(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {"n": len(values), "median": round(statistics.median(values), 3),
            "p95": round(percentile(values, 0.95), 3), "max": round(max(values), 3)}


def start_worker(args: argparse.Namespace, slots: int, threads: int) -> EnvWorker:
    """An EnvWorker for the soak: the JS heap capped (a Chromium flag, so through `env_config`),
    a 2 s watchdog grace and 3 tabs (module constants, set for the whole soak in `main`)."""
    config = EnvWorkerConfig(num_slots=slots, threads=threads, viewport="small", load_timeout_s=args.load_timeout_s,
                             step_timeout_s=args.step_timeout_s)
    env_config = config.web_env_config()
    env_config.browser.extra_args = (f"--js-flags=--max-old-space-size={HEAP_CAP_MB}",)
    return EnvWorker(config, env_config=env_config)


def probe_browser_start(args: argparse.Namespace) -> float:
    """Seconds to start a fresh 1-slot worker (driver + Chromium) now."""
    started = time.monotonic()
    probe = start_worker(args, 1, 1)
    elapsed = time.monotonic() - started
    probe.close()
    return elapsed


def monitor(tally: Tally, stop: threading.Event, stuck_after_s: float) -> None:
    while not stop.wait(1.0):
        now = time.monotonic()
        with tally.lock:
            for slot, since in tally.in_flight.items():
                if now - since > stuck_after_s:
                    tally.stuck.add(slot)


def run(args: argparse.Namespace) -> dict[str, Any]:
    server, base_url = start_site()
    threads = min(args.threads, args.slots)
    tally, seen, memory, probes = Tally(), {}, [], []
    before = frozenset(chromium_pids())
    t0 = time.monotonic()
    worker = start_worker(args, args.slots, threads)
    worker_start_s = time.monotonic() - t0
    memory.append({**memory_sample(0, seen, before), "when": "after worker start"})
    soak = Soak(worker, base_url, args, tally)
    probe_lock = threading.Lock()

    def on_episode_end(ep: dict) -> None:
        with tally.lock:
            tally.finished += 1
            n = tally.finished
            tally.outcomes[ep["outcome"]] = tally.outcomes.get(ep["outcome"], 0) + 1
            page = tally.by_page.setdefault(ep["page"], {})
            page[ep["outcome"]] = page.get(ep["outcome"], 0) + 1
            if "reason" in ep:
                key = f"{ep['page']}: {ep['reason']}"
                tally.reasons[key] = tally.reasons.get(key, 0) + 1
            if "reset_s" in ep:
                tally.reset_s.setdefault(ep["page"], []).append(ep["reset_s"])
            if "error" in ep and len(tally.errors) < 20:
                tally.errors.append(ep["error"])
        if n in RSS_AT or n % args.sample_every == 0:
            memory.append(memory_sample(n, seen, before))
            if not args.quiet:
                print(f"soak: {n} episodes, {tally.outcomes}, {memory[-1]}", flush=True)
        if args.probe_every and n % args.probe_every == 0 and probe_lock.acquire(blocking=False):
            try:
                probes.append({"episode": n, "start_s": round(probe_browser_start(args), 3)})
            finally:
                probe_lock.release()

    stop = threading.Event()
    threading.Thread(target=monitor, args=(tally, stop, args.stuck_after_s), daemon=True).start()
    groups = [list(range(g, args.slots, threads)) for g in range(threads)]
    t_soak = time.monotonic()
    if threads == 1:  # inline worker: every call on this thread (sync Playwright)
        soak.run_group(groups[0], on_episode_end)
    else:
        drivers = [threading.Thread(target=soak.run_group, args=(slots, on_episode_end)) for slots in groups]
        for d in drivers:
            d.start()
        for d in drivers:
            d.join()
    soak_s = time.monotonic() - t_soak
    stop.set()
    final = memory_sample(tally.finished, seen, before)
    if memory[-1]["episode"] != tally.finished:
        memory.append(final)
    relaunches = sum(max(0, s.generation - 1) for s in worker.sessions)
    worker.close()
    left = orphans(seen, before)
    server.shutdown()
    reset_all = [v for values in tally.reset_s.values() for v in values]
    return {
        "episodes_requested": args.episodes, "episodes_started": tally.started, "episodes_finished": tally.finished,
        "slots": args.slots, "threads": threads, "seed": args.seed, "page_weights": PAGE_WEIGHTS,
        "outcomes": tally.outcomes, "outcomes_by_page": tally.by_page,
        "infra_error_reasons": dict(sorted(tally.reasons.items())),
        "lost": tally.started - tally.finished + tally.outcomes.get("exception", 0)
        + tally.outcomes.get("still_running", 0),
        "stuck_slots": sorted(tally.stuck), "errors": tally.errors,
        "soak_s": round(soak_s, 1), "episodes_per_min": round(60 * tally.finished / max(soak_s, 1e-9), 1),
        "browser_relaunches": relaunches,
        "browser_start_s": {"worker": round(worker_start_s, 3), "probes_under_load": probes,
                            "probe_summary": summary_s([p["start_s"] for p in probes])},
        "slot_start_s": {"all": summary_s(reset_all), **{k: summary_s(v) for k, v in sorted(tally.reset_s.items())}},
        "memory": memory, "orphans": left,
        "settings": {"pages": args.pages or list(PAGE_WEIGHTS), "step_timeout_s": args.step_timeout_s,
                     "load_timeout_s": args.load_timeout_s,
                     "stall_s": STALL_S, "heap_cap_mb": HEAP_CAP_MB, "max_minutes": args.max_minutes},
    }


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=4, help="env slots of the worker")
    parser.add_argument("--threads", type=int, default=4, help="browser groups (EnvWorkerConfig.threads)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-timeout-s", type=float, default=5.0)
    parser.add_argument("--load-timeout-s", type=float, default=4.0)
    parser.add_argument("--stuck-after-s", type=float, default=120.0,
                        help="a call running longer than this counts its slot as stuck")
    parser.add_argument("--sample-every", type=int, default=100, help="memory sample every N episodes")
    parser.add_argument("--probe-every", type=int, default=250, help="time a fresh browser start every N episodes")
    parser.add_argument("--max-minutes", type=float, default=0.0, help="start no episode after this; 0 = no limit")
    parser.add_argument("--pages", default="", help=f"comma-separated subset of {list(PAGE_WEIGHTS)}; '' = all")
    parser.add_argument("--out", default="", help="JSON output path")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.episodes < 1 or args.slots < 1 or args.threads < 1:
        parser.error("--episodes, --slots and --threads must be >= 1")
    args.pages = [p for p in args.pages.split(",") if p]
    unknown = [p for p in args.pages if p not in PAGE_WEIGHTS]
    if unknown:
        parser.error(f"--pages: unknown {unknown}; allowed: {list(PAGE_WEIGHTS)}")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    safety.MAX_TABS, watchdog.WATCHDOG_GRACE_S = 3, 2.0  # the soak's caps (module constants of the env)
    result = run(args)
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    if not args.quiet:
        print(text)
    orphaned = result["orphans"]["seen_chromium_pids_alive_after_close"]
    ok = result["lost"] == 0 and not result["stuck_slots"] and not orphaned
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    sys.exit(main())

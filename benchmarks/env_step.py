"""Env latency on MiniWoB++: webrl's `WebEnv` vs BrowserGym vs the raw Playwright floor.

On the same tasks, seeds, viewport and clicked elements, in one run:

    webrl       WebEnv.reset(task) / WebEnv.step(click(id)): readiness wait, Set-of-Mark
                collection (discovery="full", the default), screenshot with boxes drawn,
                feedback, reward check; once with the slot's context reused across episodes
                (`WebEnv.reuse_context`, the default; `webrl.envs.context_pool`) and once
                with a new context per episode
    raw floor   reset: new context + goto + seeded start + screenshot;
                step: one Playwright click + one screenshot (nothing else)
    browsergym  browsergym-miniwob 0.14.3 in its own venv (it pins playwright 1.44), with its
                default settings and with pre_observation_delay=0, slow_mo=0

Prints median reset / step times and the ratios against the targets of issues #28 and #53: a webrl
step within 1.2x the raw floor's; a webrl reset faster than the raw floor's (new-context) reset
and >= 10x faster than BrowserGym's default reset (issue #53). `--rounds N` repeats webrl and the floor
N times, alternating, and prints each round's ratios (on a loaded machine compare within a
round). Everything is served from and sent to 127.0.0.1.

When the BrowserGym venv cannot be made (no package index reachable) its rows are reported as
not run, with the reason, and the rest of the table still prints.

The BrowserGym venv is created on first use under --cache (default ~/.cache/webrl-bench):
`python -m venv`, `pip install browsergym-miniwob==0.14.3`, and a symlink
$PLAYWRIGHT_BROWSERS_PATH/chromium-1117/chrome-linux/chrome -> the system Chromium, so its
Playwright runs Debian's Chromium instead of downloading one.

    python benchmarks/env_step.py                      # all three
    python benchmarks/env_step.py --skip-browsergym    # webrl and the floor only
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from webrl.actions import Action
from webrl.envs.miniwob import MiniWoBTask, miniwob_html_dir

BROWSERGYM_PIN = "browsergym-miniwob==0.14.3"
CHROMIUM_REVISION = "chromium-1117"  # the Chromium build playwright 1.44 looks for
SYSTEM_CHROMIUM = "/usr/lib/chromium/chromium"
RUNNER = Path(__file__).with_name("_browsergym_runner.py")
# Same elements as the BrowserGym runner: (task, CSS selector, matching predicate on elements).
TARGETS = {
    "click-checkboxes": ("input[type=checkbox]", lambda e: e["type"] == "checkbox"),
    "click-option": ("input[type=radio]", lambda e: e["type"] == "radio"),
    "enter-text": ("input[type=text]", lambda e: e["tag"] == "input" and e["type"] == "text"),
    "login-user": ("input", lambda e: e["tag"] == "input"),
}


def median_ms(values: list[float]) -> float:
    return 1000.0 * statistics.median(values) if values else float("nan")


def bench_webrl(tasks, episodes, steps, viewport, reuse_context: bool = True, early: bool = True) -> dict:
    """early=False: without the screenshot taken inside the readiness wait's quiet window
    (`webrl.envs.episode._early_screenshot`; its miss limit at 0 turns it off)."""
    from webrl.envs import WebEnv
    from webrl.envs import episode as episode_module

    limit = episode_module.EARLY_MISS_LIMIT
    episode_module.EARLY_MISS_LIMIT = limit if early else 0
    try:
        return _bench_webrl(WebEnv, tasks, episodes, steps, viewport, reuse_context)
    finally:
        episode_module.EARLY_MISS_LIMIT = limit


def _bench_webrl(WebEnv, tasks, episodes, steps, viewport, reuse_context: bool) -> dict:
    env = WebEnv(config={"browser": {"viewport": viewport}})
    env.reuse_context = reuse_context
    env.reset(options={"task": MiniWoBTask(tasks[0], seed=999)})  # launch + warm-up, not timed
    resets, step_times, early = [], [], []
    try:
        for task_name in tasks:
            _, matches = TARGETS[task_name]
            for episode in range(episodes):
                started = time.perf_counter()
                _, info = env.reset(options={"task": MiniWoBTask(task_name, seed=episode)})
                resets.append(time.perf_counter() - started)
                for k in range(steps):
                    targets = [e for e in info["elements"] if matches(e)]
                    action = Action.click(targets[k % len(targets)]["id"])
                    started = time.perf_counter()
                    obs, _, terminated, truncated, info = env.step(action)
                    step_times.append(time.perf_counter() - started)
                    early.append(env.screenshot_early)
                    if obs["last_action_error"]:
                        raise RuntimeError(f"{task_name}: {obs['last_action_error']}")
                    if terminated or truncated:
                        break
    finally:
        env.close()
    return {"reset_s": resets, "step_s": step_times, "early_share": sum(early) / max(1, len(early))}


def bench_raw(tasks, episodes, steps, viewport) -> dict:
    from playwright.sync_api import sync_playwright

    from webrl.envs.browser import launch_flags, resolve_executable

    width, height = (int(v) for v in viewport.split("x"))
    resets, step_times = [], []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=resolve_executable("", playwright),
                                             args=list(launch_flags()))
        for task_name in tasks:
            selector, _ = TARGETS[task_name]
            for episode in range(episodes):
                started = time.perf_counter()
                context = browser.new_context(viewport={"width": width, "height": height})
                page = context.new_page()
                task = MiniWoBTask(task_name, seed=episode)
                page.goto(task.spec.start_url)
                task.setup(page)
                page.screenshot(type="png")
                resets.append(time.perf_counter() - started)
                for k in range(steps):
                    locator = page.locator(selector)
                    target = locator.nth(k % locator.count())
                    started = time.perf_counter()
                    target.click()
                    page.screenshot(type="png")
                    step_times.append(time.perf_counter() - started)
                context.close()
        browser.close()
    return {"reset_s": resets, "step_s": step_times}


def ensure_browsergym_venv(cache: Path) -> tuple[Path, dict]:
    """(venv python, env vars for the runner); creates the venv and Chromium link if missing."""
    venv = cache / "browsergym-venv"
    python = venv / "bin" / "python"
    if not (venv / ".installed").exists():
        print(f"creating {venv} with {BROWSERGYM_PIN} (a few minutes, once) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", BROWSERGYM_PIN], check=True)
        (venv / ".installed").write_text(BROWSERGYM_PIN + "\n")
    browsers = cache / "ms-playwright"
    chrome = browsers / CHROMIUM_REVISION / "chrome-linux" / "chrome"
    if not chrome.exists():
        system = os.environ.get("WEBRL_CHROMIUM_BINARY", SYSTEM_CHROMIUM)
        chrome.parent.mkdir(parents=True, exist_ok=True)
        chrome.symlink_to(system)
    env = {**os.environ, "PLAYWRIGHT_BROWSERS_PATH": str(browsers)}
    return python, env


def bench_browsergym(tasks, episodes, steps, viewport, cache: Path) -> dict:
    python, env = ensure_browsergym_venv(cache)
    command = [str(python), str(RUNNER), "--html-dir", str(miniwob_html_dir()),
               "--tasks", ",".join(tasks), "--episodes", str(episodes), "--steps", str(steps),
               "--viewport", viewport, "--variants", "default,no_delay"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"BrowserGym runner failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def merged(rounds: list[dict], name: str) -> dict:
    out = {key: [t for r in rounds for t in r[name][key]] for key in ("reset_s", "step_s")}
    shares = [(r[name]["early_share"], len(r[name]["step_s"])) for r in rounds if "early_share" in r[name]]
    if shares:
        out["early_share"] = sum(s * n for s, n in shares) / max(1, sum(n for _, n in shares))
    return out


def print_ratios(result: dict, label: str) -> None:
    webrl, fresh, raw = result["webrl"], result["webrl_new_context"], result["raw"]
    floor_step, floor_reset = median_ms(raw["step_s"]), median_ms(raw["reset_s"])
    print(f"{label}: step  webrl / raw floor = {median_ms(webrl['step_s']) / floor_step:5.2f}x (target <= 1.2x); "
          f"reset webrl / raw floor = {median_ms(webrl['reset_s']) / floor_reset:5.2f}x (target < 1); "
          f"reset new-context webrl / raw floor = {median_ms(fresh['reset_s']) / floor_reset:5.2f}x")
    if "webrl_no_early" in result:
        off = result["webrl_no_early"]
        print(f"{label}: step  webrl without the early screenshot / raw floor = "
              f"{median_ms(off['step_s']) / floor_step:5.2f}x; early screenshots kept: "
              f"{100 * webrl.get('early_share', 0):.0f}% of webrl's steps")


def report(rounds: list[dict], browsergym: dict) -> None:
    names = (("webrl WebEnv", "webrl"), ("webrl new context/ep", "webrl_new_context"),
             ("webrl, no early shot", "webrl_no_early"), ("raw Playwright floor", "raw"))
    rows = [(label, merged(rounds, key)) for label, key in names]
    if "default" in browsergym:
        rows += [("BrowserGym default", browsergym["default"]), ("BrowserGym no_delay", browsergym["no_delay"])]
    print(f"\n{'env':<24}{'reset median ms':>16}{'step median ms':>16}{'n resets':>10}{'n steps':>9}")
    for name, r in rows:
        print(f"{name:<24}{median_ms(r['reset_s']):>16.1f}{median_ms(r['step_s']):>16.1f}"
              f"{len(r['reset_s']):>10}{len(r['step_s']):>9}")
    if "error" in browsergym:
        print(f"{'BrowserGym':<24}  not run: {browsergym['error']}")
    print()
    for index, result in enumerate(rounds):
        print_ratios(result, f"round {index + 1}")
    pooled = {key: merged(rounds, key) for _, key in names}
    print_ratios(pooled, "all rounds")
    if "default" in browsergym:
        webrl_step, webrl_reset = median_ms(pooled["webrl"]["step_s"]), median_ms(pooled["webrl"]["reset_s"])
        for variant in ("default", "no_delay"):
            bg = browsergym[variant]
            print(f"step  BrowserGym {variant:<8} / webrl = {median_ms(bg['step_s']) / webrl_step:6.2f}x")
            target = " (target >= 10x, issue #53)" if variant == "default" else ""
            print(f"reset BrowserGym {variant:<8} / webrl = {median_ms(bg['reset_s']) / webrl_reset:6.2f}x{target}")
        print(f"BrowserGym versions: {browsergym.get('versions')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="click-checkboxes,click-option,enter-text")
    parser.add_argument("--episodes", type=int, default=3, help="episodes per task")
    parser.add_argument("--steps", type=int, default=4, help="clicks per episode")
    parser.add_argument("--viewport", default="332x214",
                        help="same for all; 332x214 is BrowserGym's MiniWoB default")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "webrl-bench")
    parser.add_argument("--skip-browsergym", action="store_true")
    parser.add_argument("--rounds", type=int, default=1, help="repeat webrl and the floor, alternating")
    parser.add_argument("--json", type=Path, help="also write raw timings here")
    args = parser.parse_args()
    tasks = args.tasks.split(",")
    unknown = sorted(set(tasks) - set(TARGETS))
    if unknown:
        raise SystemExit(f"--tasks: no click target known for {unknown}; known: {sorted(TARGETS)}")
    if args.rounds < 1:
        raise SystemExit(f"--rounds must be >= 1, got {args.rounds}")
    rounds = []
    for _ in range(args.rounds):
        rounds.append({"webrl": bench_webrl(tasks, args.episodes, args.steps, args.viewport, True),
                       "raw": bench_raw(tasks, args.episodes, args.steps, args.viewport),
                       "webrl_new_context": bench_webrl(tasks, args.episodes, args.steps, args.viewport, False),
                       "webrl_no_early": bench_webrl(tasks, args.episodes, args.steps, args.viewport, True,
                                                     early=False)})
    browsergym: dict = {}
    if not args.skip_browsergym:
        try:
            browsergym = bench_browsergym(tasks, args.episodes, args.steps, args.viewport, args.cache)
        except (subprocess.CalledProcessError, RuntimeError, OSError) as error:
            browsergym = {"error": " ".join(str(error).split())[:300]}
    report(rounds, browsergym)
    if args.json:
        args.json.write_text(json.dumps({"rounds": rounds, "browsergym": browsergym}, indent=1))


if __name__ == "__main__":
    main()

"""BrowserGym side of benchmarks/env_step.py; runs inside the BrowserGym venv (playwright 1.44).

Serves the MiniWoB++ HTML it is given on 127.0.0.1 (a free port), points BrowserGym's
`MINIWOB_URL` at it, and times `env.reset()` and `env.step('click("<bid>")')` on the same
tasks, seeds and elements as the webrl side. Prints one JSON line:
{"<variant>": {"reset_s": [...], "step_s": [...]}, "versions": {...}}.

Usage (env_step.py builds this command):
    python _browsergym_runner.py --html-dir DIR --tasks a,b --episodes N --steps K
        --viewport 332x214 --variants default,no_delay
Variants: "default" (BrowserGym's own settings) and "no_delay" (pre_observation_delay=0,
slow_mo=0 passed to gymnasium.make, its fastest documented setting).
"""
import argparse
import functools
import json
import os
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

# The element each step clicks, per task (CSS selector; the i-th match, cycling).
TARGETS = {"click-checkboxes": "input[type=checkbox]", "click-option": "input[type=radio]",
           "enter-text": "input[type=text]", "login-user": "input"}
VARIANT_KWARGS = {"default": {}, "no_delay": {"pre_observation_delay": 0.0, "slow_mo": 0}}


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        return None


def serve(html_dir):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=html_dir))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def bid_of(env, selector, index):
    """BrowserGym's id ("bid" attribute) of the index-th element matching selector."""
    page = env.unwrapped.page
    return page.evaluate(
        "([sel, i]) => { const all = document.querySelectorAll(sel);"
        " const el = all[i % all.length]; return el ? el.getAttribute('bid') : null; }",
        [selector, index])


def run_variant(variant, tasks, episodes, steps, viewport):
    import gymnasium
    import browsergym.miniwob  # noqa: F401  (registers browsergym/miniwob.*)

    width, height = (int(v) for v in viewport.split("x"))
    resets, step_times = [], []
    for task in tasks:
        env = gymnasium.make(f"browsergym/miniwob.{task}", headless=True,
                             viewport={"width": width, "height": height},
                             **VARIANT_KWARGS[variant])
        try:
            for episode in range(episodes):
                started = time.perf_counter()
                env.reset(seed=episode)
                resets.append(time.perf_counter() - started)
                for k in range(steps):
                    bid = bid_of(env, TARGETS[task], k)
                    if bid is None:
                        raise RuntimeError(f"{task}: no element for {TARGETS[task]}")
                    started = time.perf_counter()
                    _, _, terminated, truncated, info = env.step(f'click("{bid}")')
                    step_times.append(time.perf_counter() - started)
                    if info.get("action_error") or info.get("last_action_error"):
                        raise RuntimeError(f"{task}: {info}")
                    if terminated or truncated:
                        break
        finally:
            env.close()
    return {"reset_s": resets, "step_s": step_times}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--html-dir", required=True)
    parser.add_argument("--tasks", required=True)
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--viewport", default="332x214")
    parser.add_argument("--variants", default="default,no_delay")
    args = parser.parse_args()
    httpd = serve(args.html_dir)
    os.environ["MINIWOB_URL"] = f"http://127.0.0.1:{httpd.server_address[1]}/miniwob/"
    result = {}
    for variant in args.variants.split(","):
        result[variant] = run_variant(variant, args.tasks.split(","), args.episodes, args.steps,
                                      args.viewport)
    from importlib.metadata import version

    result["versions"] = {p: version(p) for p in ("browsergym-core", "browsergym-miniwob", "playwright")}
    httpd.shutdown()
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()

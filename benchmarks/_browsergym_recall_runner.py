"""BrowserGym side of benchmarks/element_recall.py; runs inside the BrowserGym venv (playwright 1.44).

Reads a job file written by element_recall.py: {"pages": [{"name", "url", "paths"}], "viewport":
[w, h], "repeats": n, "resolve_js": "<function expression>"}. For each page it resets a
`BrowserEnv` on BrowserGym's open-ended task (start_url = the page), then builds the
observation `repeats` times with the env's own `_get_obs()` (marking every frame, DOM
snapshot, merged AXTree, screenshot: what each step pays) and reads `extra_element_properties`:

    set_of_marks   bids whose set_of_marks flag is set and that have a bbox (what BrowserGym's
                   Set-of-Mark overlay draws: browsergym.utils.obs.overlay_som)
    clickable      bids whose clickable flag (Chromium's DOMSnapshot isClickable) is set and
                   that have a bbox (rendered); no visibility filter

The truth boxes are resolved in the same page with the job's `resolve_js`. Prints one JSON
line: {"pages": {name: {"set_of_marks": [[x, y, w, h], ...], "clickable": [...], "truth":
[...], "observe_s": [...]}}, "versions": {...}}.

    python _browsergym_recall_runner.py JOB.json
"""
import json
import sys
import time


def listed_boxes(properties, flag):
    return [p["bbox"] for p in properties.values() if p.get(flag) and p.get("bbox")]


def observe_page(page_job, viewport, repeats, resolve_js):
    from browsergym.core.env import BrowserEnv
    from browsergym.core.task import OpenEndedTask

    env = BrowserEnv(task_entrypoint=OpenEndedTask,
                     task_kwargs={"start_url": page_job["url"], "goal": "observe the page"},
                     headless=True, viewport={"width": viewport[0], "height": viewport[1]},
                     pre_observation_delay=0.0)
    try:
        env.reset(seed=0)
        times, obs = [], None
        for _ in range(repeats):
            started = time.perf_counter()
            obs = env._get_obs()
            times.append(time.perf_counter() - started)
        properties = obs["extra_element_properties"]
        truth = [env.page.evaluate(resolve_js, path) for path in page_job["paths"]]
        return {"set_of_marks": listed_boxes(properties, "set_of_marks"),
                "clickable": listed_boxes(properties, "clickable"),
                "truth": truth, "observe_s": times}
    finally:
        env.close()


def main():
    job = json.loads(open(sys.argv[1]).read())
    pages = {p["name"]: observe_page(p, job["viewport"], job["repeats"], job["resolve_js"])
             for p in job["pages"]}
    from importlib.metadata import version

    versions = {p: version(p) for p in ("browsergym-core", "playwright")}
    sys.stdout.write(json.dumps({"pages": pages, "versions": versions}) + "\n")


if __name__ == "__main__":
    main()

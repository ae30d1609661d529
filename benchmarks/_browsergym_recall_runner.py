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
[...], "observe_s": [...]}}, "miniwob": [...], "versions": {...}}.

MiniWoB++ (job key "miniwob": webrl's oracle episodes, element_recall.OracleEpisode as dicts):
each episode opens the same page on webrl's server, starts it with webrl's own seeded start
script (`start_js`: Math.seedrandom(seed), core.startEpisodeReal, the HUD hidden), then for
each state records BrowserGym's marks, the utterance and the box of webrl's target found again
by its CSS child path, and replays webrl's action by coordinates at the centre of webrl's box:
click -> mouse click; type -> focus the element under the point, select-all + Backspace when
it holds text, keyboard typing; select -> select_option(label) on the element under the
point; scroll -> webrl's scrollBy rule at the point; wait -> sleep. After each action it waits
`settle_s` (BrowserGym's pre_observation_delay) and for DOMContentLoaded as BrowserEnv.step
does. Per episode: {"states": [{"goal", "box", "box_error", "set_of_marks", "clickable",
"action_error"}], "raw_reward"}.

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


# the utterance and the box of the target found by its path, in one round trip
TARGET_JS = """({resolve, path}) => {
  const found = path === null ? {error: 'no target (wait)'} : eval(resolve)([path]);
  return {goal: core.getUtterance(), ...found};
}"""
# the element under a point: focus it and tell whether it holds text (webrl's type clears first)
FOCUS_AT_JS = """([x, y]) => {
  const el = document.elementFromPoint(x, y);
  if (!el) return null;
  el.focus();
  return (el.value !== undefined ? String(el.value) : el.textContent || '').length > 0;
}"""


def act(page, state, job, box):
    action = state["action"]
    if action["kind"] == "wait":
        time.sleep(action.get("amount", job["wait_s"]))
        return
    x, y, w, h = box
    cx, cy = x + w / 2, y + h / 2
    if action["kind"] == "click":
        page.mouse.click(cx, cy, button=action.get("button", "left"), click_count=action.get("clicks", 1))
    elif action["kind"] == "type":
        if page.evaluate(FOCUS_AT_JS, [cx, cy]) and action.get("clear", True):
            page.keyboard.press("Control+a")
            page.keyboard.press("Backspace")
        page.keyboard.type(action["text"])
    elif action["kind"] == "select":
        page.evaluate_handle("([x, y]) => document.elementFromPoint(x, y)", [cx, cy]).as_element() \
            .select_option(label=action["text"], timeout=5000)
    elif action["kind"] == "scroll":
        dx, dy = state["scroll_by"]
        page.evaluate(job["scroll_js"], {"id": None, "x": cx, "y": cy, "dx": dx, "dy": dy})
    else:
        raise ValueError(f"cannot replay a {action['kind']!r} action (click, type, select, scroll, wait)")


def replay_miniwob(job):
    """One BrowserEnv for all episodes: its reset launches a browser and a chat window (13 s a
    reset measured under load), so each episode is a fresh navigation in its page instead."""
    from browsergym.core.env import BrowserEnv
    from browsergym.core.task import OpenEndedTask

    if not job.get("miniwob"):
        return []
    viewport = {"width": job["viewport"][0], "height": job["viewport"][1]}
    env = BrowserEnv(task_entrypoint=OpenEndedTask, headless=True, viewport=viewport, pre_observation_delay=0.0,
                     task_kwargs={"start_url": job["miniwob"][0]["url"], "goal": "replay webrl's episodes"})
    try:
        env.reset(seed=0)
        return [replay_episode(env, episode, job) for episode in job["miniwob"]]
    finally:
        env.close()


def replay_episode(env, episode, job):
    env.page.goto(episode["url"], wait_until="load")
    started = env.page.evaluate(job["start_js"], {"seed": episode["seed"], "mode": "default",
                                                  "maxTime": job["max_time_ms"], "hideDisplay": True})
    if not started["ready"]:
        env.page.wait_for_function("() => WOB_TASK_READY === true", timeout=5000)
    states = []
    for state in episode["states"]:
        if state["action"] is None:
            break
        properties = env._get_obs()["extra_element_properties"]
        found = env.page.evaluate(TARGET_JS, {"resolve": job["resolve_js"], "path": state["path"]})
        record = {"goal": found["goal"], "box": found.get("bbox"), "box_error": found.get("error"),
                  "set_of_marks": listed_boxes(properties, "set_of_marks"),
                  "clickable": listed_boxes(properties, "clickable"), "action_error": ""}
        # at the target as this page lays it out (a scrollbar or an animation can move it), else
        # where webrl saw it
        box = record["box"] if record["box"] and record["box"][2] * record["box"][3] > 0 else state["box"]
        try:
            act(env.page, state, job, box)
        except Exception as error:  # recorded; the next state's fidelity check tells the effect
            record["action_error"] = f"{type(error).__name__}: {error}"[:300]
        time.sleep(job["settle_s"])
        env._wait_dom_loaded()
        states.append(record)
    return {"states": states, "raw_reward": env.page.evaluate(job["state_js"])["raw_reward"]}


def main():
    job = json.loads(open(sys.argv[1]).read())
    pages = {p["name"]: observe_page(p, job["viewport"], job["repeats"], job["resolve_js"])
             for p in job["pages"]}
    miniwob = replay_miniwob(job)
    from importlib.metadata import version

    versions = {p: version(p) for p in ("browsergym-core", "playwright")}
    sys.stdout.write(json.dumps({"pages": pages, "miniwob": miniwob, "versions": versions}) + "\n")


if __name__ == "__main__":
    main()

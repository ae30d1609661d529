"""Element recall and precision: webrl's Set-of-Mark list vs BrowserGym's element marking.

Fixture pages (benchmarks/fixtures/element_recall/NAME.html) reproduce what front-end
frameworks produce: handlers delegated to a root (React) or to the document, per-element
listeners (Vue), custom elements with shadow roots, iframes, a modal and a cookie banner over
content, a virtualised list, hover menus, drag handles, canvas widgets, elements that only look
clickable, ARIA widgets with a roving tabindex, wrappers. NAME.json lists by hand, from the
page's intent, the elements a user can act on now ("usable"), each by a `path` of CSS
selectors: each step is resolved inside the shadow root or iframe document of the previous
step's match, and must match exactly one element.

Matching rule: a listed element matches a truth element when the centre of its box lies in the
truth box and their IoU is >= 0.5; each listed element matches at most one truth element and
vice versa (a maximum matching). Recall = matched truth / truth; precision = matched listed /
listed, so a listed wrapper, a covered control or a decoy counts against precision. Overall
figures pool the counts of all pages.

Lists compared, on the same pages, viewport and run:
    webrl                info["elements"] of WebEnv.reset (observation discovery "full" by
                         default; --discovery selectors for the old list)
    browsergym_som       BrowserGym 0.14.3 elements whose set_of_marks flag is set (its overlay)
    browsergym_clickable BrowserGym elements flagged clickable (Chromium's DOMSnapshot)
Observe time: webrl, collect_elements + screenshot on the loaded page; BrowserGym, its
`_get_obs()` (marking, DOM snapshot, AXTree, screenshot). Median of --repeats; indicative only
on a shared machine.

MiniWoB++ (--miniwob): for the tasks with a scripted oracle (webrl.envs.miniwob_oracles), run
the oracle on webrl's list (viewport 640x480) and record every state: goal, action, the box of
the element it acts on and that element's CSS child path. A state counts for webrl when the
oracle found its element (a state where it returned None does not). BrowserGym replays the
same episode (_browsergym_recall_runner.py: same page, same seeded start script, webrl's
actions by coordinates at the target box's centre) and at each state, before acting, a state
counts for browsergym_som / browsergym_clickable when a mark with that flag matches the target
box by the fixtures' rule. A replayed state is kept only when it is faithful: same goal text,
the target found again by its path with a box that matches webrl's by the same rule (the largest
deviation is kept per state); the others are listed and left out. Wait actions are replayed,
not counted.

    python benchmarks/element_recall.py --miniwob --json benchmarks/results/element_recall_2026-12-01/results.json
    python benchmarks/element_recall.py --no-fixtures --miniwob --miniwob-seeds 11,12 --json miniwob.json
"""
from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Sequence

FIXTURES = Path(__file__).with_name("fixtures") / "element_recall"
RUNNER = Path(__file__).with_name("_browsergym_recall_runner.py")
VIEWPORT = (800, 600)  # webrl's "cpu" preset
TOOLS = ("webrl", "browsergym_som", "browsergym_clickable")
Box = Sequence[float]  # [x, y, w, h] in CSS pixels of the top viewport

# path -> {"bbox": [x, y, w, h]} or {"error": "..."}; frame offsets are the frame's content box
RESOLVE_TRUTH_JS = """(path) => {
  let root = document, dx = 0, dy = 0, el = null;
  for (let i = 0; i < path.length; i++) {
    const found = root.querySelectorAll(path[i]);
    if (found.length !== 1) return {error: path.slice(0, i + 1).join(' / ') + ' matches ' + found.length + ' elements'};
    el = found[0];
    if (i === path.length - 1) break;
    if (el.shadowRoot) { root = el.shadowRoot; continue; }
    if (!el.contentDocument) return {error: path[i] + ' is neither an open shadow host nor a same-origin iframe'};
    const frame = el.getBoundingClientRect();
    dx += frame.left + el.clientLeft; dy += frame.top + el.clientTop;
    root = el.contentDocument;
  }
  const r = el.getBoundingClientRect();
  return {bbox: [r.left + dx, r.top + dy, r.width, r.height]};
}"""


# -- fixtures ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class TruthElement:
    name: str
    path: tuple[str, ...]


@dataclass(frozen=True)
class Fixture:
    name: str       # file stem: NAME.html / NAME.json
    pattern: str
    usable: tuple[TruthElement, ...]


def load_fixture(truth_file: Path) -> Fixture:
    """NAME.json -> Fixture; a malformed file raises ValueError naming the file and key."""
    where = truth_file.name
    data = json.loads(truth_file.read_text())
    for key, kind in (("pattern", str), ("usable", list)):
        if not isinstance(data.get(key), kind):
            raise ValueError(f"{where}: key {key!r} must be a {kind.__name__}, got {data.get(key)!r}")
    usable = []
    for i, entry in enumerate(data["usable"]):
        path = entry.get("path") if isinstance(entry, dict) else None
        if not (isinstance(path, list) and path and all(isinstance(s, str) and s.strip() for s in path)):
            raise ValueError(f"{where}: usable[{i}].path must be a non-empty list of CSS selectors, got {path!r}")
        if not isinstance(entry.get("name"), str) or not entry["name"]:
            raise ValueError(f"{where}: usable[{i}].name must be a non-empty string")
        usable.append(TruthElement(entry["name"], tuple(path)))
    names = [u.name for u in usable]
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: usable names repeat: {sorted(n for n in set(names) if names.count(n) > 1)}")
    if not (truth_file.with_suffix(".html")).exists():
        raise ValueError(f"{where}: no page {truth_file.with_suffix('.html').name} beside it")
    return Fixture(truth_file.stem, data["pattern"], tuple(usable))


def load_fixtures(folder: Path = FIXTURES, names: Sequence[str] = ()) -> list[Fixture]:
    fixtures = [load_fixture(p) for p in sorted(folder.glob("*.json"))]
    if names:
        known = {f.name for f in fixtures}
        unknown = sorted(set(names) - known)
        if unknown:
            raise ValueError(f"--pages: unknown fixtures {unknown}; known: {sorted(known)}")
        fixtures = [f for f in fixtures if f.name in names]
    return fixtures


# -- scoring ----------------------------------------------------------------------------------

def box_iou(a: Box, b: Box) -> float:
    """Intersection over union of two [x, y, w, h] boxes (0 when either is empty)."""
    width = min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0])
    height = min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1])
    inter = max(0.0, width) * max(0.0, height)
    union = a[2] * a[3] + b[2] * b[3] - inter
    return inter / union if union > 0 else 0.0


def centre_inside(listed: Box, truth: Box) -> bool:
    cx, cy = listed[0] + listed[2] / 2, listed[1] + listed[3] / 2
    return truth[0] <= cx <= truth[0] + truth[2] and truth[1] <= cy <= truth[1] + truth[3]


def matches(listed: Box, truth: Box, min_iou: float = 0.5) -> bool:
    # For axis-aligned boxes IoU >= 0.5 already puts the listed centre inside the truth box (a
    # centre outside leaves at most half of the listed box inside); the centre test stays as
    # the issue states the rule.
    return centre_inside(listed, truth) and box_iou(listed, truth) >= min_iou


def maximum_matching(truth: Sequence[Box], listed: Sequence[Box]) -> dict[int, int]:
    """{truth index: listed index}, one-to-one, as many pairs as `matches` allows (Kuhn's
    augmenting paths; pages have tens of elements)."""
    edges = [[j for j, box in enumerate(listed) if matches(box, t)] for t in truth]
    owner: dict[int, int] = {}  # listed index -> truth index

    def augment(i: int, seen: set[int]) -> bool:
        for j in edges[i]:
            if j not in seen:
                seen.add(j)
                if j not in owner or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(len(truth)):
        augment(i, set())
    return {i: j for j, i in owner.items()}


@dataclass(frozen=True)
class PageScore:
    truth: int
    listed: int
    matched: int
    missed: tuple[str, ...]    # truth names not matched
    extra: tuple[int, ...]     # listed indices not matched

    @property
    def recall(self) -> float:
        return self.matched / self.truth if self.truth else 1.0

    @property
    def precision(self) -> float:
        return self.matched / self.listed if self.listed else 1.0


def score_page(names: Sequence[str], truth: Sequence[Box], listed: Sequence[Box]) -> PageScore:
    pairs = maximum_matching(truth, listed)
    used = set(pairs.values())
    return PageScore(len(truth), len(listed), len(pairs),
                     tuple(n for i, n in enumerate(names) if i not in pairs),
                     tuple(j for j in range(len(listed)) if j not in used))


def pooled(scores: Sequence[PageScore]) -> dict[str, float]:
    truth, listed = sum(s.truth for s in scores), sum(s.listed for s in scores)
    matched = sum(s.matched for s in scores)
    return {"truth": truth, "listed": listed, "matched": matched,
            "recall": matched / truth if truth else 1.0, "precision": matched / listed if listed else 1.0}


def truth_boxes(fixture: Fixture, resolved: Sequence[dict]) -> list[Box]:
    for element, result in zip(fixture.usable, resolved):
        if "error" in result:
            raise ValueError(f"{fixture.name}.json: {element.name!r}: {result['error']}")
    return [r["bbox"] for r in resolved]


# -- observing ----------------------------------------------------------------------------------

class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


def serve(folder: Path) -> ThreadingHTTPServer:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def page_url(httpd: ThreadingHTTPServer, fixture: Fixture) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}/{fixture.name}.html"


def observe_webrl(fixtures: Sequence[Fixture], httpd, repeats: int, discovery: str = "full") -> dict:
    """{page: {"listed": [element dicts], "truth": [resolved], "observe_s": [...]}}"""
    from webrl.envs import TaskSpec, WebEnv
    from webrl.envs.observation import collect_elements

    env = WebEnv(config={"browser": {"viewport": "cpu"}, "observation": {"discovery": discovery}})
    pages = {}
    try:
        for fixture in fixtures:
            spec = TaskSpec(id=f"element_recall/{fixture.name}", goal="observe the page",
                            start_url=page_url(httpd, fixture))
            _, info = env.reset(options={"task": spec})
            times = []
            for _ in range(repeats):
                started = time.perf_counter()
                collect_elements(env.page, env.config.observation, 30.0)
                env.page.screenshot(type="png", scale="css")
                times.append(time.perf_counter() - started)
            truth = [env.page.evaluate(RESOLVE_TRUTH_JS, list(u.path)) for u in fixture.usable]
            pages[fixture.name] = {"listed": info["elements"], "truth": truth, "observe_s": times}
    finally:
        env.close()
    return pages


def observe_browsergym(fixtures: Sequence[Fixture], httpd, repeats: int, cache: Path) -> dict:
    job = {"pages": [{"name": f.name, "url": page_url(httpd, f), "paths": [list(u.path) for u in f.usable]}
                     for f in fixtures],
           "viewport": list(VIEWPORT), "repeats": repeats, "resolve_js": RESOLVE_TRUTH_JS}
    return run_browsergym(job, cache)


def run_browsergym(job: dict, cache: Path) -> dict:
    """Run _browsergym_recall_runner.py on `job` in the BrowserGym venv; its one JSON line."""
    sys.path.insert(0, str(Path(__file__).parent))
    from env_step import ensure_browsergym_venv

    python, env = ensure_browsergym_venv(cache)
    with tempfile.TemporaryDirectory(prefix="element-recall-") as folder:
        job_file = Path(folder) / "job.json"
        job_file.write_text(json.dumps(job))
        done = subprocess.run([str(python), str(RUNNER), str(job_file)], env=env, capture_output=True,
                              text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"BrowserGym runner failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def describe(element: dict) -> str:
    """`button#buy "Buy now"`: enough to find an over-listed element in the page source."""
    where = f'#{element["dom_id"]}' if element["dom_id"] else ""
    return f'{element["tag"]}{where} "{element["name"][:30]}"'


def score_all(fixtures, webrl_pages, browsergym=None) -> dict:
    """{"pages": {page: {tool: row}}, "overall": {tool: row}}; a row has counts, recall,
    precision, observe_ms (median), and for webrl the missed and over-listed elements."""
    rows: dict[str, dict[str, dict]] = {}
    scores: dict[str, list[PageScore]] = {tool: [] for tool in TOOLS}
    times: dict[str, list[float]] = {tool: [] for tool in TOOLS}
    for fixture in fixtures:
        names = [u.name for u in fixture.usable]
        page = webrl_pages[fixture.name]
        listed = page["listed"]
        score = score_page(names, truth_boxes(fixture, page["truth"]), [e["bbox"] for e in listed])
        rows[fixture.name] = {"webrl": {**pooled([score]), "observe_ms": 1000 * statistics.median(page["observe_s"]),
                                        "missed": list(score.missed),
                                        "over_listed": [describe(listed[j]) for j in score.extra]}}
        scores["webrl"].append(score)
        times["webrl"].append(rows[fixture.name]["webrl"]["observe_ms"])
        if browsergym is None:
            continue
        bg = browsergym["pages"][fixture.name]
        for tool, flag in (("browsergym_som", "set_of_marks"), ("browsergym_clickable", "clickable")):
            score = score_page(names, truth_boxes(fixture, bg["truth"]), bg[flag])
            rows[fixture.name][tool] = {**pooled([score]), "observe_ms": 1000 * statistics.median(bg["observe_s"]),
                                        "missed": list(score.missed)}
            scores[tool].append(score)
            times[tool].append(rows[fixture.name][tool]["observe_ms"])
    overall = {tool: {**pooled(scores[tool]), "observe_ms": statistics.mean(times[tool])}
               for tool in TOOLS if scores[tool]}
    return {"pages": rows, "overall": overall}


# -- MiniWoB++: the oracles' targets, webrl and BrowserGym -------------------------------------

MINIWOB_VIEWPORT = (640, 480)  # the "small" preset oracle_coverage runs webrl at
SETTLE_S = 0.5                 # BrowserGym's own pre_observation_delay after each replayed action
# CSS child path of a data-webrl-id mark from <html>, resolvable by RESOLVE_TRUTH_JS in another
# browser: "html > body:nth-child(2) > div:nth-child(1) > button:nth-child(3)"
TARGET_PATH_JS = """(id) => {
  let el = document.querySelector(`[data-webrl-id="${id}"]`);
  if (!el) return null;
  const steps = [];
  for (; el.parentElement; el = el.parentElement) {
    const index = Array.prototype.indexOf.call(el.parentElement.children, el) + 1;
    steps.unshift(`${el.tagName.toLowerCase()}:nth-child(${index})`);
  }
  return ['html'].concat(steps).join(' > ');
}"""


@dataclass(frozen=True)
class OracleState:
    """One state of a webrl oracle episode, observed before the oracle's action."""
    goal: str
    action: dict | None      # Action.to_dict(); None: the oracle did not find an element it needs
    box: list | None         # [x, y, w, h] of the action's element in webrl's list; None for wait
    path: str | None         # TARGET_PATH_JS of that element, to find it again in BrowserGym
    scroll_by: list | None   # [dx, dy] CSS px a scroll action moves (webrl's execute rule)


@dataclass(frozen=True)
class OracleEpisode:
    task: str
    seed: int
    url: str                 # the page on this process's MiniWoB server
    solved: bool             # reward 1
    states: tuple[OracleState, ...]


def scroll_pixels(action, viewport: Sequence[int]) -> list[float]:
    from webrl.envs.execute import DEFAULT_SCROLL_AMOUNT

    amount = DEFAULT_SCROLL_AMOUNT if action.amount is None else float(action.amount)
    vertical = action.direction in ("up", "down")
    pixels = round(amount * (viewport[1] if vertical else viewport[0]))
    sign = -1 if action.direction in ("up", "left") else 1
    return [0, sign * pixels] if vertical else [sign * pixels, 0]


class OracleRecorder:
    """A MiniWoB++ task's scripted oracle as the episode runner's agent, recording each state's
    goal, action and target (its box, and its path in the page, read from `env.page`); it ends the
    episode ("no_oracle_action") where the oracle has no action."""

    def __init__(self, env: Any, task: Any):
        self.env, self.task, self.states = env, task, []

    def __call__(self, request: Any, result: Any) -> Any:
        from webrl.envs.observation import oracle_view
        from webrl.rollout.agents import action_decision
        from webrl.rollout.episode import EndEpisode

        obs, info = result.observation, result.info
        action = self.task.oracle_action(oracle_view(obs, info))
        target = None if action is None or action.element is None else info["elements"][action.element]
        self.states.append(OracleState(
            obs["goal"], None if action is None else action.to_dict(),
            None if target is None else list(target["bbox"]),
            None if target is None else self.env.page.evaluate(TARGET_PATH_JS, target["id"]),
            scroll_pixels(action, MINIWOB_VIEWPORT) if action and action.kind == "scroll" else None))
        return EndEpisode("no_oracle_action") if action is None else action_decision(action, request.observation)


def oracle_episodes(seeds: Sequence[int], names: Sequence[str] = (), max_steps: int = 15) -> list[OracleEpisode]:
    """Run the scripted oracles (all, or `names`) on webrl's list, one episode of the episode
    runner each (`OracleRecorder`); record each state's goal, action and target."""
    from webrl.envs import WebEnv
    from webrl.envs.miniwob import MiniWoBTask
    from webrl.envs.miniwob_oracles import ORACLES
    from webrl.rollout.episode import EpisodeSpec, run_episode
    from webrl.rollout.slots import GymSlot

    unknown = sorted(set(names) - set(ORACLES))
    if unknown:
        raise ValueError(f"--miniwob-tasks: no scripted oracle for {unknown}; known: {sorted(ORACLES)}")
    env = WebEnv(config={"browser": {"viewport": "small"}})
    episodes = []
    try:
        for name in sorted(names or ORACLES):
            for seed in seeds:
                task = MiniWoBTask(name, seed=seed)
                recorder = OracleRecorder(env, task)
                final = run_episode(EpisodeSpec(task, max_turns=max_steps, screenshot="none"), GymSlot(env),
                                    recorder).final
                episodes.append(OracleEpisode(name, seed, task.spec.start_url, final.reward == 1.0,
                                              tuple(recorder.states)))
    finally:
        env.close()
    return episodes


def oracle_coverage(episodes: Sequence[OracleEpisode]) -> dict:
    """{task: {"seeds": n, "listed": n where the oracle always found its elements, "solved": n}}"""
    coverage: dict[str, dict[str, int]] = {}
    for episode in episodes:
        row = coverage.setdefault(episode.task, {"seeds": 0, "listed": 0, "solved": 0})
        row["seeds"] += 1
        row["listed"] += all(s.action is not None for s in episode.states)
        row["solved"] += episode.solved
    return coverage


def replay_browsergym(episodes: Sequence[OracleEpisode], cache: Path) -> dict:
    """BrowserGym's marks at each state of webrl's episodes (see _browsergym_recall_runner.py)."""
    from dataclasses import asdict

    from webrl.envs.execute import DEFAULT_WAIT_S
    from webrl.envs.page_scripts import SCROLL_JS
    from webrl.envs.miniwob import _START_JS, _STATE_JS

    job = {"pages": [], "miniwob": [asdict(e) for e in episodes], "viewport": list(MINIWOB_VIEWPORT),
           "repeats": 1, "resolve_js": RESOLVE_TRUTH_JS, "start_js": _START_JS, "state_js": _STATE_JS,
           "scroll_js": SCROLL_JS, "settle_s": SETTLE_S, "wait_s": DEFAULT_WAIT_S, "max_time_ms": 300_000}
    return run_browsergym(job, cache)


def faithful(state: OracleState, replayed: dict) -> str:
    """"" when BrowserGym's page showed what webrl's did: the same goal, and the target found
    again by its path with a box matching webrl's by the fixtures' rule; else why not."""
    if replayed["goal"] != state.goal:
        return f"goal {replayed['goal']!r} != webrl's {state.goal!r}"
    if replayed["box"] is None:
        return f"target {state.path} not found: {replayed['box_error']}"
    if not matches(replayed["box"], state.box):
        return f"target box {[round(v, 1) for v in replayed['box']]} does not match webrl's {state.box}"
    return ""


def judge_replayed(state: OracleState, seen: dict) -> dict:
    """One replayed state: BrowserGym's box of the target, whether a mark of each flag matches it,
    why the state is not faithful ("" when it is) and the largest box deviation from webrl's."""
    box = seen["box"]
    return {"browsergym_box": box, "unfaithful": faithful(state, seen),
            "deviation_px": max(abs(a - b) for a, b in zip(box, state.box)) if box else None,
            **{flag: bool(box) and any(matches(mark, box) for mark in seen[flag])
               for flag in ("set_of_marks", "clickable")}}


def miniwob_recall(episodes: Sequence[OracleEpisode], browsergym: dict | None = None) -> dict:
    """{"tasks": {task: {tool: {"states", "covered"}}}, "overall": {tool: {states, covered,
    coverage, tasks_covered, tasks}}, "unfaithful": [...], "replay_errors": [...], "episodes":
    [per-state details]}.

    A state is one the oracle acted in on an element (wait states are replayed, not counted).
    webrl: covered when the oracle found its element in webrl's list; a state where it found none
    counts as not covered. BrowserGym: covered when a mark of the flag matches the target's box
    (the fixtures' rule) in BrowserGym's page; states where the replay does not show what webrl
    saw are left out of BrowserGym's counts and listed under "unfaithful"."""
    tools = ("webrl",) + (("browsergym_som", "browsergym_clickable") if browsergym else ())
    tasks: dict[str, dict[str, dict[str, int]]] = {}
    unfaithful, errors, details = [], [], []
    for index, episode in enumerate(episodes):
        rows = tasks.setdefault(episode.task, {t: {"states": 0, "covered": 0} for t in tools})
        replay = browsergym["miniwob"][index] if browsergym else {"states": [], "raw_reward": None}
        details.append({"task": episode.task, "seed": episode.seed, "webrl_solved": episode.solved,
                        "browsergym_raw_reward": replay["raw_reward"], "states": []})
        for step, state in enumerate(episode.states):
            details[-1]["states"].append({"action": state.action, "box": state.box})
            if state.action is not None and state.box is None:
                continue  # a wait
            rows["webrl"]["states"] += 1
            rows["webrl"]["covered"] += state.action is not None
            if not browsergym or state.action is None:
                continue
            where = {"task": episode.task, "seed": episode.seed, "step": step}
            if step >= len(replay["states"]):
                unfaithful.append({**where, "why": "the replay stopped before this state"})
                continue
            seen = replay["states"][step]
            judged = judge_replayed(state, seen)
            details[-1]["states"][-1].update(judged)
            if seen["action_error"]:
                errors.append({**where, "error": seen["action_error"]})
            if judged["unfaithful"]:
                unfaithful.append({**where, "why": judged["unfaithful"]})
                continue
            for tool, flag in (("browsergym_som", "set_of_marks"), ("browsergym_clickable", "clickable")):
                rows[tool]["states"] += 1
                rows[tool]["covered"] += judged[flag]
    overall = {}
    for tool in tools:
        states = sum(r[tool]["states"] for r in tasks.values())
        covered = sum(r[tool]["covered"] for r in tasks.values())
        counted = [r[tool] for r in tasks.values() if r[tool]["states"]]
        overall[tool] = {"states": states, "covered": covered, "coverage": covered / states if states else 1.0,
                         "tasks_covered": sum(r["covered"] == r["states"] for r in counted), "tasks": len(counted)}
    return {"tasks": tasks, "overall": overall, "unfaithful": unfaithful, "replay_errors": errors,
            "episodes": details}


# -- report -----------------------------------------------------------------------------------

def table(results: dict) -> str:
    lines = [f"{'page':<22}{'tool':<22}{'recall':>8}{'precision':>11}{'matched/truth/listed':>22}{'observe ms':>12}"]
    sections = [("OVERALL", results["overall"])] + sorted(results["pages"].items())
    for page, tools in sections:
        for tool, row in tools.items():
            counts = f'{row["matched"]}/{row["truth"]}/{row["listed"]}'
            lines.append(f"{page:<22}{tool:<22}{row['recall']:>8.1%}{row['precision']:>11.1%}{counts:>22}"
                         f"{row['observe_ms']:>12.1f}")
    return "\n".join(lines)


def miniwob_table(recall: dict) -> str:
    lines = [f"{'MiniWoB++ tool':<22}{'states covered':>16}{'coverage':>10}{'tasks fully covered':>21}"]
    for tool, row in recall["overall"].items():
        lines.append(f"{tool:<22}{row['covered']:>9}/{row['states']:<6}{row['coverage']:>10.1%}"
                     f"{row['tasks_covered']:>14}/{row['tasks']:<6}")
    for task, tools in sorted(recall["tasks"].items()):
        short = {t: f"{r['covered']}/{r['states']}" for t, r in tools.items() if r["covered"] < r["states"]}
        if short:
            lines.append(f"  {task}: not covered in {short}")
    lines += [f"  unfaithful: {u}" for u in recall["unfaithful"]]
    return "\n".join(lines)


def run_miniwob(seeds: Sequence[int], names: Sequence[str], cache: Path, skip_browsergym: bool) -> dict:
    episodes = oracle_episodes(seeds, names)
    coverage = oracle_coverage(episodes)
    ok = sum(c["listed"] == c["seeds"] for c in coverage.values())
    print(f"\nMiniWoB++ oracles, seeds {list(seeds)}: every needed element listed in {ok}/{len(coverage)} tasks; "
          f"reward 1 in {sum(c['solved'] == c['seeds'] for c in coverage.values())}/{len(coverage)}")
    browsergym = None if skip_browsergym else replay_browsergym(episodes, cache)
    recall = miniwob_recall(episodes, browsergym)
    print(miniwob_table(recall))
    if browsergym:
        replay_solved = sum(r["raw_reward"] == 1 for r in browsergym["miniwob"])
        recall["browsergym_replay_solved"] = {"episodes": len(episodes), "reward_1": replay_solved}
        print(f"BrowserGym replay reached raw reward 1 in {replay_solved}/{len(episodes)} episodes")
    return {"seeds": list(seeds), "oracles": coverage, **recall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", default="", help="comma-separated fixture names (default: all)")
    parser.add_argument("--no-fixtures", action="store_true", help="skip the fixture pages (with --miniwob)")
    parser.add_argument("--repeats", type=int, default=3, help="timed observations per page and tool")
    parser.add_argument("--discovery", default="full", choices=("full", "selectors"))
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "webrl-bench")
    parser.add_argument("--skip-browsergym", action="store_true")
    parser.add_argument("--miniwob", action="store_true", help="also check the MiniWoB++ oracles' elements")
    parser.add_argument("--miniwob-seeds", default="11", help="comma-separated seeds")
    parser.add_argument("--miniwob-tasks", default="", help="comma-separated oracle tasks (default: all)")
    parser.add_argument("--json", type=Path, help="write results here")
    args = parser.parse_args()
    if args.repeats < 1:
        raise SystemExit(f"--repeats must be >= 1, got {args.repeats}")
    if args.no_fixtures and not args.miniwob:
        raise SystemExit("--no-fixtures leaves nothing to run without --miniwob")
    try:
        seeds = [int(s) for s in args.miniwob_seeds.split(",")]
    except ValueError:
        raise SystemExit(f"--miniwob-seeds must be comma-separated integers, got {args.miniwob_seeds!r}")
    results: dict[str, Any] = {}
    if not args.no_fixtures:
        results = run_fixtures(args)
    if args.miniwob:
        results["miniwob"] = run_miniwob(seeds, [n for n in args.miniwob_tasks.split(",") if n], args.cache,
                                         args.skip_browsergym)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1) + "\n")


def run_fixtures(args: argparse.Namespace) -> dict:
    fixtures = load_fixtures(FIXTURES, [n for n in args.pages.split(",") if n])
    httpd = serve(FIXTURES)
    try:
        webrl_pages = observe_webrl(fixtures, httpd, args.repeats, args.discovery)
        browsergym = None if args.skip_browsergym else observe_browsergym(fixtures, httpd, args.repeats, args.cache)
    finally:
        httpd.shutdown()
    results = score_all(fixtures, webrl_pages, browsergym)
    results["config"] = {"viewport": list(VIEWPORT), "repeats": args.repeats, "discovery": args.discovery,
                         "browsergym_versions": browsergym["versions"] if browsergym else None}
    print(table(results))
    for page, tools in sorted(results["pages"].items()):
        row = tools["webrl"]
        if row["missed"] or row["over_listed"]:
            print(f"webrl {page}: missed {row['missed']}; over-listed {row['over_listed']}")
    return results


if __name__ == "__main__":
    main()

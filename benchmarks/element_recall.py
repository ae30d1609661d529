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
the oracle on webrl's list and count the tasks where every element it needs was listed (it
never returned None) and the reward reached 1. BrowserGym is not run there.

    python benchmarks/element_recall.py --miniwob --json benchmarks/results/element_recall_2026-12-01/results.json
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
    sys.path.insert(0, str(Path(__file__).parent))
    from env_step import ensure_browsergym_venv

    python, env = ensure_browsergym_venv(cache)
    job = {"pages": [{"name": f.name, "url": page_url(httpd, f), "paths": [list(u.path) for u in f.usable]}
                     for f in fixtures],
           "viewport": list(VIEWPORT), "repeats": repeats, "resolve_js": RESOLVE_TRUTH_JS}
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


def oracle_coverage(seeds: Sequence[int], max_steps: int = 15) -> dict:
    """{task: {"seeds": n, "listed": n where the oracle always found its elements, "solved": n}}"""
    from webrl.envs import WebEnv
    from webrl.envs.miniwob import MiniWoBTask
    from webrl.envs.miniwob_oracles import ORACLES
    from webrl.envs.observation import oracle_view

    env = WebEnv(config={"browser": {"viewport": "small"}})
    coverage = {}
    try:
        for name in sorted(ORACLES):
            listed = solved = 0
            for seed in seeds:
                task = MiniWoBTask(name, seed=seed)
                obs, info = env.reset(options={"task": task})
                found, reward = True, 0.0
                for _ in range(max_steps):
                    action = task.oracle_action(oracle_view(obs, info))
                    if action is None:
                        found = False
                        break
                    obs, reward, terminated, truncated, info = env.step(action)
                    if terminated or truncated:
                        break
                listed += found
                solved += reward == 1.0
            coverage[name] = {"seeds": len(seeds), "listed": listed, "solved": solved}
    finally:
        env.close()
    return coverage


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", default="", help="comma-separated fixture names (default: all)")
    parser.add_argument("--repeats", type=int, default=3, help="timed observations per page and tool")
    parser.add_argument("--discovery", default="full", choices=("full", "selectors"))
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "webrl-bench")
    parser.add_argument("--skip-browsergym", action="store_true")
    parser.add_argument("--miniwob", action="store_true", help="also check the MiniWoB++ oracles' elements")
    parser.add_argument("--miniwob-seeds", default="11", help="comma-separated seeds")
    parser.add_argument("--json", type=Path, help="write results here")
    args = parser.parse_args()
    if args.repeats < 1:
        raise SystemExit(f"--repeats must be >= 1, got {args.repeats}")
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
    if args.miniwob:
        coverage = oracle_coverage([int(s) for s in args.miniwob_seeds.split(",")])
        results["miniwob"] = coverage
        ok = sum(c["listed"] == c["seeds"] for c in coverage.values())
        print(f"\nMiniWoB++ oracles: every needed element listed in {ok}/{len(coverage)} tasks; "
              f"reward 1 in {sum(c['solved'] == c['seeds'] for c in coverage.values())}/{len(coverage)}")
        for name, c in coverage.items():
            if c["listed"] < c["seeds"] or c["solved"] < c["seeds"]:
                print(f"  {name}: listed {c['listed']}/{c['seeds']}, solved {c['solved']}/{c['seeds']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()

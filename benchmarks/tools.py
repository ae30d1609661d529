"""Tools on the sandbox (issue 27 item 4): the same test tasks with tools off and `tools="task"`,
for a scripted policy and the tiny model, with the side effects The Tool Illusion warns about.

    .venv/bin/python benchmarks/tools.py [--seeds 2] [--seed 5000] [--levels 0 1 2]
        [--sites shop travel wiki widgets] [--max-steps 15] [--model-steps 6]
        [--generator webrl:tiny-webagent-pointer | none] [--viewport small] [--json FILE]

Tasks: for every site and level, `--seeds` test-split tasks `make_task(site, level, "test",
--seed + i)` (fresh seeds: no other benchmark or test uses 5000+); every condition runs the same
tasks. Conditions: scripted/off, scripted/on, tiny/off, tiny/on (on = `WebEnvConfig.tools="task"`,
each site's own tool in the observation and the prompt's Tools block).

The scripted policy reads the goal and the page (elements, url, the page's visible text), never the
task's hidden params or its oracle. Both conditions share one page heuristic (`PageHeuristic`):
answer a question from the page text when the open article is the one the question is about
(following one infobox link for "the river that flows through X"-style hops), type the next
quoted string (or, without quotes, the first capitalised phrase) into a search box and press
Enter, pick a dropdown option the goal names, click the link/button/checkbox whose name holds
the most unused goal words, else stop. With tools on, `ToolPlanner` first calls the site's tool
with arguments read from the goal (shop: the product name; wiki: the article title(s); travel:
"from X to Y on DATE" as written; widgets: each `type "v" in "Label"`), then acts on the result:
opens the returned URL that best matches the goal (shop, wiki visit, travel booking page), or
answers straight from the tool's JSON (wiki facts and comparisons: no article page is opened).

Side effects counted (scripted/on): `answers_from_tool` (answers whose value came from a tool
result while no article page was opened) and how many of them were right; `wrong_entity` (a
tool result whose best match does not name the goal's entity: shop product name, wiki title,
travel route); `tool_errors` (calls whose record is not ok). The tiny model never saw tools in
training: the table shows whether it calls one and how often its first action changes when the
Tools block is in the prompt.

Interpretations: the page heuristic is this benchmark's own; it cannot compare two articles or
fill the travel search form, so those tasks fail without tools by construction (the table's
per-site rows say where the tool is the only way this policy gets through).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

SITES = ("shop", "travel", "wiki", "widgets")
CLICK_ROLES = ("link", "button", "checkbox", "radio", "tab")
STOPWORDS = frozenset("a an the of to in on for and or with from by at is are what which who how my me "
                      "then into as it them this these that".split())
# question cue -> infobox label (read from the goal's wording, never from the task's params)
FACT_CUES = (("first climbed by", "First climbed by"), ("who first climbed", "First climbed by"),
             ("first climbed", "First ascent"), ("population", "Population"), ("inhabitants", "Population"),
             ("people live", "Population"), ("area", "Area"), ("elevation", "Elevation"), ("how high", "Elevation"),
             ("founded", "Founded"), ("mayor", "Mayor"), ("capital", "Capital"), ("currency", "Currency"),
             ("official language", "Official language"), ("independence", "Independence"),
             ("range", "Range"), ("how long", "Length"), ("longer", "Length"), ("higher", "Elevation"),
             ("flow into", "Mouth"), ("discharge", "Discharge"))
HOP_CUES = (("the country where", "Country"), ("the river that flows through", "River"),
            ("the mountain where", "Source"), ("the capital of", "Capital"))


# -- reading the goal -------------------------------------------------------------------------
def words(text: Any) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", str(text or "").casefold()) if len(w) > 1 and w not in STOPWORDS}


def norm(text: Any) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", str(text or "").casefold()))


def quoted(goal: str) -> list[str]:
    return re.findall(r'"([^"]+)"', goal)


def phrases(goal: str) -> list[str]:
    """Runs of capitalised words, sentence starts left out, site names dropped:
    "Search Wikiverse to answer: Who is the mayor of Quinlinholm?" -> ["Quinlinholm"]."""
    out, run, start = [], [], True
    for token in re.finditer(r"[A-Za-z0-9][A-Za-z0-9'&-]*|[.?!:,;()\"$]", re.sub(r'"[^"]*"', " , ", goal)):
        w = token.group()
        if (w[0].isupper() or (run and w == "&")) and not start:
            run.append(w)
        else:
            out.append(" ".join(run))
            run = []
        start = w in ".?!:"
    out.append(" ".join(run))
    return [p for p in out if p and p != "Wikiverse"]


def fact_label(goal: str) -> Optional[str]:
    low = goal.casefold()
    return next((label for cue, label in FACT_CUES if cue in low), None)


def hop_labels(goal: str) -> list[str]:
    """Infobox links to follow, innermost first: "the mountain where the river that flows through
    Holsunford rises" -> ["River", "Source"]."""
    low = goal.casefold()
    found = sorted((low.find(cue), label) for cue, label in HOP_CUES if cue in low)
    return [label for _, label in reversed(found)]


def lead_passenger(goal: str) -> dict[str, str]:
    m = re.search(r"Lead passenger: (\S+) ([^,]+), (\S+@\S+?)\.?$", goal)
    return {"first": m.group(1), "last": m.group(2), "email": m.group(3)} if m else {}


def field_values(goal: str) -> list[tuple[str, str]]:
    """(label, text) pairs a widgets goal asks to type: `type "v" in "L"`, `Enter "v" as L`."""
    pairs = re.findall(r'(?:type|enter) "([^"]+)" (?:in|into) (?:the )?"([^"]+)"', goal, flags=re.I)
    pairs += re.findall(r'enter "([^"]+)" as ([^.]+)\.', goal, flags=re.I)
    return [(label.strip(), value) for value, label in pairs]


# -- the page heuristic -----------------------------------------------------------------------
@dataclass
class PageHeuristic:
    """One action from the goal, the page's elements and its visible text (module docstring)."""

    goal: str
    used: set = field(default_factory=set)
    typed: list = field(default_factory=list)
    searched: bool = False
    hops: list = field(default_factory=list)
    pending_enter: bool = False
    used_hop: bool = False  # an infobox link was followed: the open article is the question's

    def __post_init__(self) -> None:
        self.hops = hop_labels(self.goal)

    def next_action(self, url: str, elements: Sequence[dict], text: str):
        from webrl.actions import Action

        if self.pending_enter:
            self.pending_enter = False
            return Action("press", text="Enter")
        if self.goal.rstrip().endswith("?") and "/wiki/page/" in url:
            action = self._from_article(elements, text)
            if action is not None:
                return action
        action = self._type(elements) or self._select(elements) or self._click(elements)
        return action if action is not None else Action.stop()

    def _from_article(self, elements, text: str):
        from webrl.actions import Action

        facts = infobox(text)
        title = article_title(text)
        if self.hops and title and (norm(title) in norm(self.goal) or self.used_hop):
            target = facts.get(self.hops[0])
            link = next((e for e in elements if e.get("role") == "link" and target and norm(e.get("name")) == norm(target)),
                        None)
            if link is not None:
                self.hops.pop(0)
                self.used_hop = True
                return Action.click(int(link["id"]))
        label = fact_label(self.goal)
        if not self.hops and label in facts and (norm(title) in norm(self.goal) or self.used_hop):
            return Action.answer(facts[label])
        return None

    def _type(self, elements):
        from webrl.actions import Action

        boxes = [e for e in elements if e.get("role") in ("searchbox", "textbox")]
        person = lead_passenger(self.goal)
        for e in boxes:  # a booking form: the lead passenger's fields
            key = next((k for k in ("first", "last", "email") if k in norm(e.get("name"))), None)
            if key and person and not e.get("value") and key not in self.typed:
                self.typed.append(key)
                return Action.type_text(person[key], int(e["id"]))
        pairs = field_values(self.goal)
        for label, text in pairs:  # type "v" in "Label": the box of that label
            hit = next((e for e in boxes if norm(e.get("name")) == norm(label)), None)
            if hit is not None and (label, text) not in self.typed:
                self.typed.append((label, text))
                self.used |= words(label)
                return Action.type_text(text, int(hit["id"]))
        labels = {label for label, _ in pairs}
        left = [q for q in quoted(self.goal) if q not in self.typed and q not in labels and not pairs]
        search = next((e for e in boxes if e.get("role") == "searchbox"), None)
        if not left and search is not None and not self.searched and not quoted(self.goal):
            left = phrases(self.goal)[:1]
        if not left or not boxes:
            return None
        box, value = search or boxes[0], left[0]
        self.typed.append(value)
        self.searched = True
        self.used |= words(box.get("name"))
        self.pending_enter = box.get("role") == "searchbox"
        return Action.type_text(value, int(box["id"]))

    def _select(self, elements):
        from webrl.actions import Action

        for e in elements:
            options = [o for o in e.get("options") or () if o and norm(o) in norm(self.goal)
                       and f" {norm(o)} " in f" {norm(self.goal)} "]
            if e.get("role") == "combobox" and options:
                best = max(options, key=len)
                if norm(e.get("selected")) != norm(best):
                    self.used |= words(best)
                    return Action.select(int(e["id"]), best)
        return None

    def _click(self, elements):
        from webrl.actions import Action

        want = words(self.goal) - self.used
        best, best_key = None, None
        for order, e in enumerate(elements):
            if e.get("role") not in CLICK_ROLES:
                continue
            have = words(e.get("name"))
            gain = len(have & want)
            key = (-gain, len(have), order)
            if gain and (best_key is None or key < best_key):
                best, best_key = e, key
        if best is None:
            return None
        self.used |= words(best.get("name"))
        return Action.click(int(best["id"]))


def infobox(text: str) -> dict[str, str]:
    """Infobox rows of a wiki article's visible text ("Mayor\\tDaniel Novak" lines)."""
    facts = {}
    for line in text.split("\n"):
        if "\t" in line:
            label, _, value = line.partition("\t")
            facts.setdefault(label.strip(), value.strip())
    return facts


def article_title(text: str) -> str:
    m = re.search(r"\n([^\n]+)\nFrom Wikiverse", text)
    return m.group(1).strip() if m else ""


# -- the tool planner -------------------------------------------------------------------------
@dataclass
class ToolPlanner:
    """Tool calls read from the goal, then what to do with their results (module docstring).

    `next_call()` gives the next `tool(...)` action or None; `take(site_result)` reads a result;
    `then` is the follow-up: ("goto", url), ("answer", text) or None (hand over to the pages).
    """

    site: str
    goal: str
    queue: list = field(default_factory=list)
    then: Optional[tuple[str, str]] = None
    wrong_entity: int = 0
    found: dict = field(default_factory=dict)  # wiki: title -> facts
    hops: list = field(default_factory=list)  # wiki: infobox links still to follow

    def __post_init__(self) -> None:
        from webrl.actions import Action

        g = self.goal
        self.hops = hop_labels(g)
        if self.site == "shop":
            names = sorted((p for p in phrases(g) if len(p.split()) >= 2), key=len, reverse=True)
            query = quoted(g)[0] if quoted(g) else (names[0] if names else "")
            if query:
                self.queue = [Action.tool("search_catalog", {"query": query})]
        elif self.site == "wiki":
            self.queue = [Action.tool("search_articles", {"query": p}) for p in phrases(g)[:2]]
        elif self.site == "travel":
            m = re.search(r"from (.+?) to (.+?) on (.+?) for ", g)
            if m:
                self.queue = [Action.tool("find_flights", {"origin": m.group(1), "destination": m.group(2),
                                                           "date": m.group(3)})]
        elif self.site == "widgets":
            self.queue = [Action.tool("fill_field", {"field": label, "text": text}) for label, text in field_values(g)]

    def next_call(self):
        return self.queue.pop(0) if self.queue else None

    def take(self, call, feedback: str) -> None:
        """Read one ok http result (the JSON after the feedback's first line)."""
        try:
            data = json.loads(feedback.split("\n", 1)[1].split(" ... [cut at")[0])
        except (IndexError, ValueError):
            return
        getattr(self, f"_take_{self.site}", lambda *_: None)(call, data)

    def _take_shop(self, call, data) -> None:
        products = data.get("products") or []
        best = max(products, key=lambda p: (norm(p["name"]) in norm(self.goal), len(words(p["name"]) & words(self.goal))),
                   default=None)
        self.wrong_entity += int(best is None or norm(best["name"]) not in norm(self.goal))
        if best is not None:
            self.then = ("goto", best["url"])

    def _take_wiki(self, call, data) -> None:
        query = call.args_dict["query"]
        results = data.get("results") or []
        best = next((r for r in results if norm(r["title"]) == norm(query)), results[0] if results else None)
        self.wrong_entity += int(best is None or norm(best["title"]) != norm(query))
        if best is None:
            return
        from webrl.actions import Action

        label = fact_label(self.goal)
        self.found[best["title"]] = best["facts"]
        if not self.goal.rstrip().endswith("?"):
            self.then = ("goto", best["url"])
            return
        if self.hops:  # follow the infobox link by searching for its title
            target = best["facts"].get(self.hops.pop(0))
            if target:
                self.queue.insert(0, Action.tool("search_articles", {"query": target}))
            return
        if self.queue or label is None:
            return
        if " or " in self.goal and len(self.found) == 2:  # a comparison: the larger value's title
            self.then = ("answer", max(self.found, key=lambda t: _number(self.found[t].get(label, ""))))
        elif label in best["facts"]:
            self.then = ("answer", best["facts"][label])

    def _take_travel(self, call, data) -> None:
        flights = data.get("flights") or []
        args = call.args_dict
        route_ok = bool(flights) and norm(data.get("origin")) != "" and all(
            norm(args[k]) in norm(_city_names(data.get(k, ""))) for k in ("origin", "destination"))
        self.wrong_entity += int(not route_ok)
        low = self.goal.casefold()
        pool = [f for f in flights if " nonstop " not in low or f["stops"] == 0]
        named = [f for f in pool if f["airline"].casefold() in low]
        pool = named or pool
        keys = {"cheapest": lambda f: f["price_eur"], "shortest": lambda f: f["duration_min"],
                "earliest": lambda f: f["depart"], "latest": lambda f: tuple(-int(x) for x in f["depart"].split(":"))}
        word = next((w for w in keys if w in low), None)
        if pool:
            best = min(pool, key=keys[word]) if word else pool[0]
            self.then = ("goto", best["url"])


def _number(value: str) -> float:
    m = re.search(r"[\d,.]+", value or "")
    try:
        return float(m.group().replace(",", "")) if m else float("-inf")
    except ValueError:
        return float("-inf")


def _city_names(code: str) -> str:
    from webrl.envs.sites.travel.world import CITIES

    return f"{code} {CITIES[code][0]}" if code in CITIES else code


# -- episodes ---------------------------------------------------------------------------------
class ScriptedAgent:
    """The scripted policy as the episode runner's agent: tool calls first (tools on), their
    follow-up, then the page heuristic (it reads the page's visible text from `env.page`).
    `after(result)` takes in what the last action's tool returned; `from_tool[i]`: turn i's action
    came from a tool result."""

    def __init__(self, env, task, tools_on: bool):
        self.env, self.goal = env, task.spec.goal
        self.pages = PageHeuristic(task.spec.goal)
        self.planner = ToolPlanner(task.spec.site, task.spec.goal) if tools_on else None
        self.action, self.from_tool = None, []

    def __call__(self, request, result):
        from webrl.actions import Action
        from webrl.rollout.agents import action_decision

        if request.history:
            self.after(result)
        action, from_tool, planner, pages = None, False, self.planner, self.pages
        if planner is not None:
            action = planner.next_call()
            if action is None and planner.then is not None:
                kind, value = planner.then
                planner.then, from_tool = None, kind == "answer"
                action = Action("goto", text=value) if kind == "goto" else Action.answer(value)
                if kind == "goto":  # the tool found the page: the heuristic does not search again
                    pages.searched = True
                    pages.typed += quoted(self.goal)
                    pages.used |= words(" ".join(phrases(self.goal)))
        if action is None:
            text = self.env.page.inner_text("body") if self.env.page is not None else ""
            action = pages.next_action(str(result.observation.get("url", "")), result.info.get("elements") or [], text)
        self.action = action
        self.from_tool.append(from_tool)
        return action_decision(action, request.observation)

    def after(self, result) -> None:
        """What the env said of the last action: a macro's filled field, an HTTP tool's result."""
        tool, action = result.info.get("tool"), self.action
        if tool is not None and tool["kind"] == "macro" and tool["ok"]:
            self.pages.typed.append((action.args_dict["field"], action.args_dict["text"]))  # the macro filled it
            self.pages.used |= words(action.args_dict["field"])
        if tool is not None and self.planner is not None and tool["ok"] and tool["kind"] == "http":
            self.planner.take(action, result.observation["feedback"])


def episode_of(env, task, agent, max_steps: int):
    """One episode of the episode runner in `env`, at most `max_steps` turns and the task's own
    limit (every past turn's images kept in the history)."""
    from webrl.rollout.episode import EpisodeSpec, run_episode
    from webrl.rollout.slots import GymSlot

    max_turns = min(max_steps, task.spec.max_steps)
    return run_episode(EpisodeSpec(task, max_turns=max_turns, keep_history_images=max_turns), GymSlot(env), agent)


def run_scripted(env, task, tools_on: bool, max_steps: int) -> dict:
    """One episode of `ScriptedAgent` on `task`."""
    agent = ScriptedAgent(env, task, tools_on)
    episode = episode_of(env, task, agent, max_steps)
    agent.after(episode.final)  # the runner ended the episode after its last action
    record = _recorded(episode, _new_record(task, "scripted/" + ("on" if tools_on else "off")))
    visited_article = False
    for turn, result, from_tool in zip(episode.trajectory.turns, episode.results, agent.from_tool):
        visited_article |= "/wiki/page/" in str(result.observation.get("url", ""))
        if turn.action.kind == "answer":
            record["answer_from_tool"] = from_tool and not visited_article
    if agent.planner is not None:
        record["wrong_entity"] = agent.planner.wrong_entity
    return record


def run_model(env, task, policy, max_steps: int) -> dict:
    """One greedy episode of the generator on `task`."""
    from webrl.rollout.agents import PolicyAgent

    episode = episode_of(env, task, PolicyAgent(policy), max_steps)
    record = _recorded(episode, _new_record(task, "model"))
    for turn in episode.trajectory.turns:
        record["parse_errors"] += int(turn.action is None)
        record["raw"].append(turn.response_text[:120])
    return record


def _recorded(episode, record: dict) -> dict:
    """`record` with every turn counted (`_count`) and the episode's success."""
    for turn, result in zip(episode.trajectory.turns, episode.results):
        _count(record, turn.action, result.info, result.observation)
    record["success"] = bool(episode.final.terminated and float(episode.final.reward) >= 1.0)
    return record


def _new_record(task, policy: str) -> dict:
    return {"task": task.spec.id, "policy": policy, "success": False, "steps": 0, "tool_calls": 0,
            "tool_errors": 0, "wrong_entity": 0, "answer_from_tool": False, "parse_errors": 0,
            "calls": [], "trace": [], "raw": []}


def _count(record: dict, action, info: dict, obs: dict) -> None:
    from webrl.actions import format_compact

    record["steps"] += 1
    record["trace"].append(format_compact(action) if action is not None else "(parse error)")
    run = info.get("tool")
    if run is not None:
        record["tool_calls"] += 1
        record["tool_errors"] += int(not run["ok"])
        record["calls"].append({"call": format_compact(action), "ok": run["ok"], "error": run["error"],
                                "status": run["status"], "feedback": str(obs.get("feedback", ""))[:300]})


def summarise(records: Sequence[dict]) -> dict:
    n = len(records)
    from_tool = [r for r in records if r["answer_from_tool"]]
    return {"episodes": n, "successes": sum(r["success"] for r in records),
            "mean_steps": round(sum(r["steps"] for r in records) / max(1, n), 2),
            "tool_calls": sum(r["tool_calls"] for r in records), "tool_errors": sum(r["tool_errors"] for r in records),
            "wrong_entity": sum(r["wrong_entity"] for r in records),
            "answers_from_tool": len(from_tool), "answers_from_tool_correct": sum(r["success"] for r in from_tool),
            "parse_errors": sum(r["parse_errors"] for r in records)}


def build_generator(path: str):
    """The generator with the shipped checkpoint's prompt (`train_config.default_generator`), greedy."""
    import dataclasses

    from webrl.models import load_model
    from webrl.policy import GeneratorConfig, GeneratorPolicy
    from webrl.run.config import default_generator

    config = default_generator()
    model, processor = load_model(path)
    return GeneratorPolicy(model, processor, GeneratorConfig(
        prompt=config.prompt, sampling=dataclasses.replace(config.sampling, greedy=True)))


def make_tasks(sites: Sequence[str], levels: Sequence[int], seeds: int, seed: int) -> list:
    from webrl.envs.sites.source import make_task

    return [make_task(site, level, "test", seed + i) for site in sites for level in levels for i in range(seeds)]


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sites", nargs="+", default=list(SITES), choices=SITES)
    p.add_argument("--levels", nargs="+", type=int, default=[0, 1, 2], choices=[0, 1, 2])
    p.add_argument("--seeds", type=int, default=2, help="test tasks per site and level")
    p.add_argument("--seed", type=int, default=5000, help="first task seed")
    p.add_argument("--max-steps", type=int, default=15, help="scripted steps per episode at most")
    p.add_argument("--model-steps", type=int, default=6, help="model steps per episode at most")
    p.add_argument("--generator", default="webrl:tiny-webagent-pointer", help="model path, or 'none' to skip")
    p.add_argument("--viewport", default="small")
    p.add_argument("--json", default="", help="write the results here")
    a = p.parse_args(argv)
    for name in ("seeds", "max_steps", "model_steps"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    return a


def main(argv=None) -> dict:
    from webrl.envs import BrowserSession, WebEnv, WebEnvConfig

    argv = list(sys.argv[1:] if argv is None else argv)
    a = _args(argv)
    t0 = time.time()
    tasks = make_tasks(a.sites, a.levels, a.seeds, a.seed)
    session = BrowserSession()
    envs = {on: WebEnv(WebEnvConfig.from_dict({"browser": {"viewport": a.viewport}, "tools": "task" if on else ""}),
                       session=session) for on in (False, True)}
    records: dict[str, list] = {}
    timings = {}
    try:
        for on in (False, True):
            records["scripted/" + ("on" if on else "off")] = [run_scripted(envs[on], t, on, a.max_steps) for t in tasks]
        timings["scripted_s"] = round(time.time() - t0, 1)
        if a.generator != "none":
            generator = build_generator(a.generator)
            for on in (False, True):
                name = "tiny/" + ("on" if on else "off")
                records[name] = [dict(run_model(envs[on], t, generator, a.model_steps), policy=name) for t in tasks]
            timings["tiny_s"] = round(time.time() - t0 - timings["scripted_s"], 1)
    finally:
        for env in envs.values():
            env.close()
        session.close()
    results = {"command": " ".join([".venv/bin/python", "benchmarks/tools.py"] + argv), "settings": vars(a),
               "timings_s": timings, "tasks": [t.spec.id for t in tasks],
               "conditions": {k: summarise(v) for k, v in records.items()},
               "by_site": {k: {s: summarise([r for r in v if r["task"].startswith(s + "/")]) for s in a.sites}
                           for k, v in records.items()},
               "episodes": records}
    if "tiny/off" in records:
        results["tiny_first_action_changed"] = sum(x["trace"][:1] != y["trace"][:1]
                                                   for x, y in zip(records["tiny/off"], records["tiny/on"]))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))
    return results


def table(results: dict) -> str:
    head = ("condition     success  mean steps  tool calls  tool errors  wrong-entity  answers from tool "
            "(right)  parse errors")
    rows = [head]
    for name, s in results["conditions"].items():
        rows.append(f"{name:13s} {s['successes']:>2d}/{s['episodes']:<5d} {s['mean_steps']:<11.2f} {s['tool_calls']:<11d} "
                    f"{s['tool_errors']:<12d} {s['wrong_entity']:<13d} {s['answers_from_tool']} "
                    f"({s['answers_from_tool_correct']}){'':15s} {s['parse_errors']}")
    rows.append("")
    rows.append("per site (success k/N)  " + "  ".join(f"{k:>12s}" for k in results["conditions"]))
    for site in next(iter(results["by_site"].values())):
        rows.append(f"{site:23s} " + "  ".join(f"{results['by_site'][k][site]['successes']:>5d}/"
                                               f"{results['by_site'][k][site]['episodes']:<6d}"
                                               for k in results["conditions"]))
    return "\n".join(rows)


if __name__ == "__main__":
    main()

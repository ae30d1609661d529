"""Synthesized tasks: the plan that realises one, its declarative checker, and the task source
`tasks.jsonl` that `load_synth_tasks` reads back as webrl `Task`s.

Shapes:
  Target      an element described robustly: role + accessible name (+ tag), never a Set-of-Mark
              id; `resolve_target` finds it in the current page's `info["elements"]`.
  PlanStep    one `Action` template: kind, optional target, text ("click" a target, "type" text
              into a target, "select" an option of a target, "press" a key, "stop", "answer").
  checker     None (the run's judges score the task, like `LiveWebTask`) or a JSON object
              {"kind": one of CHECKER_KINDS, "value": str, "target": {role, name, tag}?}:
                url_contains        the final URL (percent-decoded) contains value
                url_matches         re.search(value, final URL)
                page_text_contains  the final page's text contains value (normalised)
                answer_contains     the agent's answer contains value (normalised)
                selected            the select named target.name shows option value
  tasks.jsonl one row per task: id, goal, start_url, origin, checker, category, provenance
              (+ max_steps). start_url is the path (+ query) on `origin`, the site's origin as
              the demonstrations show it (`SynthTask.shown_origin`, else the real one at
              synthesis time); an older row's absolute start_url is read as origin + path.

Re-basing: a local server binds a new port per run, so a row's origin may be dead by the time
the tasks are used. `load_synth_tasks(path, base_url)` puts each task on `base_url` (default:
the row's origin) and, where that differs from the row's origin, gives the task a
`url_alias` showing the row's origin, so the observations read as the demonstrations did
(the way `SiteTask` shows the sandbox at `SHOWN_ORIGIN`).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional
from urllib.parse import unquote, urlparse

from webrl.actions import Action
from webrl.envs.sites.common import normalize
from webrl.envs.task import BaseTask, OriginAlias, TaskReward, TaskSpec, origin

CHECKER_KINDS = ("url_contains", "url_matches", "page_text_contains", "answer_contains", "selected")
TASK_CATEGORIES = ("navigation", "item", "search", "filter", "form", "action", "information", "other")
PLAN_KINDS = ("click", "type", "select", "press", "stop", "answer", "back", "goto")

_SELECTED_JS = """() => Array.from(document.querySelectorAll('select')).map((s) => {
  const label = s.getAttribute('aria-label') || (s.labels && s.labels[0] ? s.labels[0].innerText : '') || s.name || '';
  const option = s.selectedIndex >= 0 ? s.options[s.selectedIndex] : null;
  return [label, option ? (option.label || option.text) : ''];
})"""


@dataclass(frozen=True)
class Target:
    role: str
    name: str
    tag: str = ""

    def describe(self) -> str:
        return f"{self.role} {self.name!r}"


def resolve_target(target: Target, elements: list[dict]) -> Optional[dict]:
    """The first element with the target's role and (normalised) accessible name; failing that,
    the first of that role whose name starts with the target's name (a label followed by its
    options' text, as `<label>Brand <select>` names read)."""
    want = normalize(target.name)
    same_role = [e for e in elements if e.get("role") == target.role and (not target.tag or e.get("tag") == target.tag)]
    for e in same_role:
        if normalize(e.get("name", "")) == want:
            return e
    for e in same_role:
        if want and normalize(e.get("name", "")).startswith(want + " "):
            return e
    return None


@dataclass
class PlanStep:
    kind: str
    target: Optional[Target] = None
    text: str = ""

    def __post_init__(self) -> None:
        if self.kind not in PLAN_KINDS:
            raise ValueError(f"PlanStep.kind must be one of {PLAN_KINDS}, got {self.kind!r}")
        if self.kind in ("click", "type", "select") and self.target is None:
            raise ValueError(f"a {self.kind!r} plan step needs a target")

    def to_action(self, element_id: Optional[int]) -> Action:
        """The `Action` on the resolved element id (None for steps without a target)."""
        if self.kind == "click":
            return Action.click(element_id)
        if self.kind == "type":
            return Action.type_text(self.text, element=element_id)
        if self.kind == "select":
            return Action.select(element_id, self.text)
        if self.kind == "press":
            return Action("press", text=self.text)
        if self.kind == "answer":
            return Action.answer(self.text)
        if self.kind == "back":
            return Action("back")
        if self.kind == "goto":
            return Action("goto", text=self.text)
        return Action.stop()


@dataclass
class SynthTask:
    """One proposed task. `plan` is empty for LLM proposals (an acting policy collects them)."""

    id: str
    goal: str
    start_url: str
    category: str
    checker: Optional[dict[str, Any]] = None
    plan: list[PlanStep] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)
    max_steps: int = 10
    shown_origin: str = ""
    """Origin the observations show in place of `start_url`'s (empty: the real one)."""

    def to_row(self) -> dict[str, Any]:
        parts = urlparse(self.start_url)
        return {"id": self.id, "goal": self.goal, "start_url": parts.path + (f"?{parts.query}" if parts.query else ""),
                "origin": self.shown_origin or origin(self.start_url), "checker": self.checker,
                "category": self.category, "provenance": self.provenance, "max_steps": self.max_steps}

    def web_task(self) -> "SynthWebTask":
        return SynthWebTask(self.spec(), self.shown_origin)

    def spec(self) -> TaskSpec:
        return TaskSpec(id=self.id, goal=self.goal, start_url=self.start_url, max_steps=self.max_steps,
                        site="synth", params={"checker": self.checker, "category": self.category})


def check_checker(checker: Any) -> Optional[str]:
    """None when `checker` is a valid checker (or None), else what is wrong with it."""
    if checker is None:
        return None
    if not isinstance(checker, dict):
        return f"must be null or an object, got {type(checker).__name__}"
    if checker.get("kind") not in CHECKER_KINDS:
        return f"kind must be one of {CHECKER_KINDS}, got {checker.get('kind')!r}"
    if not isinstance(checker.get("value"), str) or not checker["value"]:
        return "value must be a non-empty string"
    if checker["kind"] == "url_matches":
        try:
            re.compile(checker["value"])
        except re.error as e:
            return f"value is not a regular expression: {e}"
    if checker["kind"] == "selected":
        target = checker.get("target")
        if not isinstance(target, dict) or not isinstance(target.get("name"), str):
            return "a 'selected' checker needs target {role, name}"
    return None


def evaluate_checker(checker: dict[str, Any], url: str, page_text: str, answer: Optional[str],
                     selects: list[tuple[str, str]] = ()) -> bool:
    """The checker's verdict on a final state (pure: the page is read by the caller)."""
    kind, value = checker["kind"], checker["value"]
    if kind == "url_contains":
        return value in unquote(url)
    if kind == "url_matches":
        return re.search(value, unquote(url)) is not None
    if kind == "page_text_contains":
        return normalize(value) in normalize(page_text)
    if kind == "answer_contains":
        return answer is not None and normalize(value) in normalize(answer)
    name = normalize(checker["target"]["name"])
    return any(normalize(label).startswith(name) and normalize(option) == normalize(value)
               for label, option in selects)


class SynthWebTask(BaseTask):
    """A synthesized task as a webrl `Task`: reward from its declarative checker, or
    `TaskReward(None)` (judges score it) when it has none. `shown_origin`: observations show
    the site at this origin (the one its demonstrations recorded) when the task runs elsewhere."""

    def __init__(self, spec: TaskSpec, shown_origin: str = ""):
        super().__init__(spec)
        self.shown_origin = shown_origin

    def url_alias(self) -> Optional[OriginAlias]:
        if not self.shown_origin or self.shown_origin == origin(self.spec.start_url):
            return None
        return OriginAlias.of(self.spec.start_url, self.shown_origin)

    def reward(self, page: Any, answer: Optional[str]) -> TaskReward:
        checker = self.spec.params.get("checker")
        if checker is None:
            return TaskReward(None)
        text = page.inner_text("body") if checker["kind"] == "page_text_contains" else ""
        selects = [tuple(s) for s in page.evaluate(_SELECTED_JS)] if checker["kind"] == "selected" else []
        ok = evaluate_checker(checker, page.url, text, answer, selects)
        return TaskReward(1.0 if ok else 0.0, {"checker": checker["kind"], "value": checker["value"],
                                               "url": page.url})


def is_origin(url: Any) -> bool:
    """True for "scheme://host[:port]" (http or https), a trailing slash allowed; no path or query."""
    parts = urlparse(url) if isinstance(url, str) else None
    return parts is not None and parts.scheme in ("http", "https") and bool(parts.netloc) and \
        parts.path in ("", "/") and not parts.query


def _row_origin_and_path(row: dict, where: str) -> tuple[str, str]:
    """(origin, path) of a row: start_url a path on `origin`, or (older rows) an absolute URL."""
    start, recorded = row["start_url"], row.get("origin")
    if recorded is not None and not is_origin(recorded):
        raise ValueError(f"{where}: field 'origin' must be an http(s) origin (scheme://host[:port]), got {recorded!r}")
    if start.startswith("/"):
        if recorded is None:
            raise ValueError(f"{where}: field 'start_url' is a path ({start!r}); the row needs field 'origin'")
        return recorded.rstrip("/"), start
    if urlparse(start).scheme not in ("http", "https"):
        raise ValueError(f"{where}: field 'start_url' must be a path on 'origin' or an http(s) URL, got {start!r}")
    parts = urlparse(start)
    return (recorded or origin(start)).rstrip("/"), (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def task_from_row(row: Any, where: str, base_url: Optional[str] = None) -> SynthWebTask:
    """A row of tasks.jsonl as a `SynthWebTask` on `base_url` (default: the row's origin);
    ValueError naming `where` and the field."""
    if not isinstance(row, dict):
        raise ValueError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
    for name in ("id", "goal", "start_url"):
        if not isinstance(row.get(name), str) or not row[name].strip():
            raise ValueError(f"{where}: field {name!r} must be a non-empty string, got {row.get(name)!r}")
    recorded, path = _row_origin_and_path(row, where)
    if row.get("category") not in TASK_CATEGORIES:
        raise ValueError(f"{where}: field 'category' must be one of {TASK_CATEGORIES}, got {row.get('category')!r}")
    problem = check_checker(row.get("checker"))
    if problem:
        raise ValueError(f"{where}: field 'checker' {problem}")
    if not isinstance(row.get("provenance", {}), dict):
        raise ValueError(f"{where}: field 'provenance' must be an object")
    max_steps = row.get("max_steps", 10)
    if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
        raise ValueError(f"{where}: field 'max_steps' must be an integer >= 1, got {max_steps!r}")
    unknown = set(row) - {"id", "goal", "start_url", "origin", "checker", "category", "provenance", "max_steps"}
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}")
    base = (base_url or recorded).rstrip("/")
    task = SynthTask(row["id"], row["goal"], base + path, row["category"], row.get("checker"),
                     provenance=row.get("provenance", {}), max_steps=max_steps, shown_origin=recorded)
    return task.web_task()


def load_synth_tasks(path: str | Path, base_url: Optional[str] = None) -> list[SynthWebTask]:
    """The tasks of a `tasks.jsonl` written by `webrl synth`, on `base_url` (the site's origin
    now, e.g. a sandbox server's `ensure_server()`; default: each row's recorded origin). A
    malformed row raises ValueError naming the file, the line and the field; a bad `base_url`
    names base_url."""
    if base_url is not None and not is_origin(base_url):
        raise ValueError(f"load_synth_tasks: base_url must be an http(s) origin (scheme://host[:port]), "
                         f"got {base_url!r}")
    path = Path(path)
    tasks = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not JSON: {e}") from None
            tasks.append(task_from_row(row, f"{path}:{lineno}", base_url))
    return tasks


def write_tasks(path: str | Path, tasks: list[SynthTask]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for task in tasks:
            f.write(json.dumps(task.to_row(), ensure_ascii=False) + "\n")

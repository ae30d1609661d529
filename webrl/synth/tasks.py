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
  tasks.jsonl one row per task: id, goal, start_url, checker, category, provenance (+ max_steps).
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
from webrl.envs.task import BaseTask, TaskReward, TaskSpec

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

    def to_row(self) -> dict[str, Any]:
        return {"id": self.id, "goal": self.goal, "start_url": self.start_url, "checker": self.checker,
                "category": self.category, "provenance": self.provenance, "max_steps": self.max_steps}

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
    `TaskReward(None)` (judges score it) when it has none."""

    def reward(self, page: Any, answer: Optional[str]) -> TaskReward:
        checker = self.spec.params.get("checker")
        if checker is None:
            return TaskReward(None)
        text = page.inner_text("body") if checker["kind"] == "page_text_contains" else ""
        selects = [tuple(s) for s in page.evaluate(_SELECTED_JS)] if checker["kind"] == "selected" else []
        ok = evaluate_checker(checker, page.url, text, answer, selects)
        return TaskReward(1.0 if ok else 0.0, {"checker": checker["kind"], "value": checker["value"],
                                               "url": page.url})


def task_from_row(row: Any, where: str) -> SynthWebTask:
    """A row of tasks.jsonl as a `SynthWebTask`; ValueError naming `where` and the field."""
    if not isinstance(row, dict):
        raise ValueError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
    for name in ("id", "goal", "start_url"):
        if not isinstance(row.get(name), str) or not row[name].strip():
            raise ValueError(f"{where}: field {name!r} must be a non-empty string, got {row.get(name)!r}")
    if urlparse(row["start_url"]).scheme not in ("http", "https"):
        raise ValueError(f"{where}: field 'start_url' must be an http(s) URL, got {row['start_url']!r}")
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
    unknown = set(row) - {"id", "goal", "start_url", "checker", "category", "provenance", "max_steps"}
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}")
    task = SynthTask(row["id"], row["goal"], row["start_url"], row["category"], row.get("checker"),
                     provenance=row.get("provenance", {}), max_steps=max_steps)
    return SynthWebTask(task.spec())


def load_synth_tasks(path: str | Path) -> list[SynthWebTask]:
    """The tasks of a `tasks.jsonl` written by `webrl synth`. A malformed row raises ValueError
    naming the file, the line and the field."""
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
            tasks.append(task_from_row(row, f"{path}:{lineno}"))
    return tasks


def write_tasks(path: str | Path, tasks: list[SynthTask]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for task in tasks:
            f.write(json.dumps(task.to_row(), ensure_ascii=False) + "\n")

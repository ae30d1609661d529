"""Grounded skills (WebXSkill's grounded mode): `skill(name, args)` runs as ONE env step.

    run = run_skill(action, library, steps)   # action: Action("skill", text=name, args=...)
    run.feedback, run.error                   # -> obs["feedback"], obs["last_action_error"]
    run.to_dict()                             # -> info["skill"] (JSON-able; Turn.skill_steps)

`steps` is a `SkillSteps` over the running episode (`WebEnv` passes `EpisodeSkillSteps`): for
each bound step it starts a step (`start(i)`: a fresh step deadline and dialog count, as every
env step gets), reads the current page's elements with the observation's own collection (som.js,
which also refreshes the `data-webrl-id` marks actions address), resolves the step's `Target`
with `webrl.envs.skill_matching.resolve_target`, builds the step's `Action` and has the env
execute it exactly like a normal step (`execute_action` + `settle`: same timeouts, allowlist and
dialog guards, tab and navigation handling). Execution stops at the first step that fails, its target not found or its
action failing; steps before it keep their effects and control returns to the agent.

Messages (i is 1-based, n the number of steps):
  feedback  `Skill search_products(query="blue mug"): ran 2/2 steps` then one line per step run,
            `step i/n type(3, "blue mug"): <what the env reported>` (a failed step: `failed: ...`)
  error     `skill search_products: step 2/3 (click link 'Blue mug'): no element matches on this page`
            `skill search_products: step 2/3 (click link 'Blue mug'): <the action's error>`
            `skill 'x' ...: missing ['query']` (bind), `no skill named 'x'; the library has [...]`,
            `no skill library: ...` (the env has none)

Record (`info["skill"]`): {"name", "args": {..}, "steps": [{"index" (0-based), "step" (its label,
`click link 'Blue mug'`), "action" (compact; "" if it was never built), "ok", "feedback",
"error"}], "ok", "url_matched"}.

Interpretations of WebXSkill (its code is not public):
- A skill whose `url_patterns` do not match the current page still runs: the patterns are the
  graph's retrieval index (what the "skills" text lists), not a precondition; a step whose
  target is not on the page fails with a clear message anyway. The feedback says the skill was
  called off its pages and the record has `url_matched: False`.
- Reward and termination are computed after the whole skill, like after any step; a skill never
  ends the episode itself (its steps cannot be answer/stop).
- Training: the turn's tokens are the agent's `skill(...)` call; the expansion is recorded on the
  turn (`Turn.skill_steps`) for analysis and never trained on.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol, Sequence

from playwright.sync_api import TimeoutError as PlaywrightTimeout

from webrl.actions import Action, ActionError, format_compact
from webrl.envs.episode import Episode
from webrl.envs.execute import PageUnresponsive
from webrl.envs.observation import ObservationConfig, collect_elements
from webrl.envs.safety import Deadline
from webrl.envs.skill_matching import resolve_target
from webrl.envs.skills import SkillArgsError, SkillFileError, SkillLibrary, SkillStep

NO_LIBRARY = "no skill library: this environment has no skills (WebEnvConfig.skills_dir is empty)"
TARGET_MISSING = "no element matches on this page"


class SkillSteps(Protocol):
    """The running episode as the skill executor sees it."""

    def start(self, index: int) -> None:
        """Begin skill step `index` (0-based): its own step deadline and dialog count."""

    def elements(self) -> Sequence[dict[str, Any]]:
        """The current page's elements (what the observation would list; refreshes the marks)."""

    def url(self) -> str:
        """The current page's URL as the agent sees it (a task's stable origin shown)."""

    def act(self, action: Action) -> tuple[str, str]:
        """Execute `action` like an env step: (feedback, error), error "" when it succeeded."""


class EpisodeSkillSteps:
    """`SkillSteps` over a `WebEnv` episode. `execute(episode, action, deadline) -> (feedback,
    error)` is the env's own step execution (`WebEnv._execute`: execute_action + settle). Step 0
    reuses the env step's `deadline`; each later step gets a fresh one of `step_timeout_s` and a
    fresh dialog count. Feedback and errors show the task's stable origin, as the observation does."""

    def __init__(self, episode: Episode, execute: Callable[[Any, Action, Deadline], tuple[str, str]],
                 observation: ObservationConfig, deadline: Deadline, step_timeout_s: float):
        self.episode, self.execute, self.observation = episode, execute, observation
        self.deadline, self.step_timeout_s = deadline, step_timeout_s

    def _show(self, text: str) -> str:
        return self.episode.alias.show(text) if self.episode.alias is not None else text

    def start(self, index: int) -> None:
        if index:
            self.deadline = Deadline(self.step_timeout_s)
            self.episode.events.dialogs_this_step = 0

    def elements(self) -> list:
        try:
            collected = collect_elements(self.episode.tabs.page, self.observation, self.deadline.timeout_s())
        except PlaywrightTimeout as timeout:
            raise PageUnresponsive("the page did not answer while a skill step read its elements") from timeout
        self.episode.elements = collected["elements"]
        return self.episode.elements

    def url(self) -> str:
        return self._show(self.episode.tabs.page.url)

    def act(self, action: Action) -> tuple[str, str]:
        feedback, error = self.execute(self.episode, action, self.deadline)
        return self._show(feedback), self._show(error)


@dataclass
class SkillStepRecord:
    """One executed (or attempted) step of a skill run."""

    index: int
    step: str = ""
    action: str = ""
    ok: bool = False
    feedback: str = ""
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "step": self.step, "action": self.action, "ok": self.ok,
                "feedback": self.feedback, "error": self.error}


@dataclass
class SkillRun:
    """What one `skill(name, args)` call did. `total`: the skill's number of steps (0 if it never
    bound); `error`: "" when every step ran."""

    name: str
    args: dict[str, str]
    total: int = 0
    steps: list[SkillStepRecord] = field(default_factory=list)
    error: str = ""
    url_matched: bool = True

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def feedback(self) -> str:
        if not self.total:
            return ""
        done = sum(s.ok for s in self.steps)
        head = f"Skill {self.call()}: ran {done}/{self.total} steps" + ("" if self.ok else ", then stopped")
        if not self.url_matched:
            head += " (called on a page outside the skill's URL patterns)"
        lines = [head]
        for s in self.steps:
            what = s.feedback if s.ok else f"failed: {s.error}"
            lines.append(f"step {s.index + 1}/{self.total} {s.action or f'({s.step})'}: {what or 'done'}")
        return "\n".join(lines)

    def call(self) -> str:
        args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in self.args.items())
        return f"{self.name}({args})"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "args": dict(self.args), "steps": [s.to_dict() for s in self.steps],
                "ok": self.ok, "url_matched": self.url_matched}


def step_label(step: SkillStep) -> str:
    """`click link 'Blue mug'`, `type searchbox 'Search' "blue mug"`, `press "Enter"` (bound step)."""
    parts = [step.kind]
    if step.target is not None:
        parts.append(step.target.describe())
    if step.text is not None:
        parts.append(json.dumps(step.text, ensure_ascii=False))
    return " ".join(parts)


def skill_step_count(action: Any, library: Optional[SkillLibrary]) -> int:
    """How many env-step time budgets `action` may use: a known skill's step count, else 1."""
    if isinstance(action, Action) and action.kind == "skill" and library is not None and action.text in library:
        return len(library.get(action.text).steps)
    return 1


def skills_text(library: Optional[SkillLibrary], url: str) -> str:
    """The observation's "skills" text: one `signature: description` line per skill that applies to
    `url` (`Skill.applies_to`), in name order; "" without a library."""
    if library is None:
        return ""
    return "\n".join(f"{s.signature()}: {s.description}" for s in sorted(library, key=lambda s: s.name)
                     if s.applies_to(url))


def run_skill(action: Action, library: Optional[SkillLibrary], steps: SkillSteps) -> SkillRun:
    """Run the skill `action` names, step by step, stopping at the first failing step."""
    run = SkillRun(action.text, action.args_dict)
    if library is None:
        run.error = NO_LIBRARY
        return run
    try:
        skill = library.get(action.text)
    except KeyError as e:
        run.error = str(e.args[0])
        return run
    try:
        bound = skill.bind(run.args)
    except (SkillArgsError, SkillFileError) as e:  # SkillFileError: an argument that unmakes a step
        run.error = str(e)
        return run
    run.total = len(bound)
    run.url_matched = skill.applies_to(steps.url())
    for b in bound:
        steps.start(b.index)
        record = SkillStepRecord(b.index, step_label(b.step))
        run.steps.append(record)
        where = f"skill {skill.name}: step {b.index + 1}/{run.total} ({step_label(b.step)})"
        element = None
        if b.step.target is not None:
            element = resolve_target(b.step.target, steps.elements(), kind=b.step.kind)
            if element is None:
                record.error = TARGET_MISSING
                run.error = f"{where}: {TARGET_MISSING}"
                break
        try:
            concrete = b.step.action(element)
        except ActionError as e:  # a step that cannot become an action (a library file checks this)
            record.error = str(e)
            run.error = f"{where}: {e}"
            break
        record.action = format_compact(concrete)
        record.feedback, record.error = steps.act(concrete)
        if record.error:
            run.error = f"{where}: {record.error}"
            break
        record.ok = True
    return run

"""Running one `tool(name, args)` call as ONE env step (`webrl.envs.tools` declares the tools).

`run_tool(action, tools, runner)` checks the call against the tool's params, fills its URL, asks
the `ToolRunner` (the running episode; `WebEnv` passes `EpisodeToolRunner`) whether the network
policy allows it, then makes the HTTP request, opens the page or runs the macro's steps. Every
failure is a message in the returned `ToolRun`, never an exception.

Messages:
  feedback  `Tool search_catalog(query="mug") -> HTTP 200, 412 chars:` + newline + the result
            (cut: `... [cut at 2000 of 5120 chars]`); navigate: `Tool ...: opened <url>; <goto's feedback>`
  error     `tool search_catalog: <why>`: `no tool named 'x'; this site has ['a', 'b']`, `takes
            search_catalog(query: text); missing ['query']`, `argument 'n' must be an integer`,
            `refused <url>: host ... is outside the allowed domains (...)`, `HTTP 404`,
            `no answer within 20 s`; without tools `no tools: ...`.
Record (`info["tool"]`): {"name", "kind", "args", "ok", "error", "url" (as the agent sees it),
"status" (HTTP status, 0 if none), "result_chars" (full length), "truncated", "steps" (macro)}.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Protocol

from playwright.sync_api import TimeoutError as PlaywrightTimeout

from webrl.actions import Action
from webrl.envs.skill_run import EpisodeSkillSteps, SkillRun, run_skill
from webrl.envs.skills import Skill, SkillLibrary, placeholders
from webrl.envs.task import origin
from webrl.envs.tools import Tool

NO_TOOLS = "no tools: this environment exposes none (WebEnvConfig.tools is empty or the task declares none)"


@dataclass
class HttpResult:
    status: int
    text: str
    content_type: str = ""


class ToolRunner(Protocol):
    """The running episode as the tool executor sees it (`WebEnv` passes one over its episode)."""

    def origin(self) -> str:
        """The task's real origin (`http://127.0.0.1:PORT`) relative tool URLs join onto."""

    def refusal(self, url: str) -> Optional[str]:
        """None if the network policy lets the episode reach `url`, else why not."""

    def show(self, text: str) -> str:
        """`text` with real URLs shown as the agent sees them (the task's stable origin)."""

    def http(self, method: str, url: str, form: Mapping[str, str]) -> HttpResult:
        """One request with the episode's cookies, no redirect followed; raises TimeoutError."""

    def navigate(self, url: str) -> tuple[str, str]:
        """A `goto(url)` env step: (feedback, error)."""

    def macro(self, skill: Skill, args: Mapping[str, str]) -> SkillRun:
        """The macro's steps through the grounded-skills executor."""


@dataclass
class ToolRun:
    """What one `tool(name, args)` call did; `error` "" when it succeeded."""

    name: str
    args: dict[str, str]
    kind: str = ""
    url: str = ""
    status: int = 0
    result: str = ""
    result_chars: int = 0
    truncated: bool = False
    feedback: str = ""
    error: str = ""
    steps: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.error

    def call(self) -> str:
        return f"{self.name}(" + ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in self.args.items()) + ")"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "args": dict(self.args), "ok": self.ok, "error": self.error,
                "url": self.url, "status": self.status, "result_chars": self.result_chars,
                "truncated": self.truncated, "steps": list(self.steps)}


def run_tool(action: Action, tools: Mapping[str, Tool], runner: ToolRunner) -> ToolRun:
    """Run the tool `action` names (one env step); every failure is a message, never an exception
    (a browser that dies mid-call still raises, as in any step)."""
    run = ToolRun(action.text, action.args_dict)
    if not tools:
        run.error = f"tool {run.name}: {NO_TOOLS}"
        return run
    tool = tools.get(run.name)
    if tool is None:
        run.error = f"tool {run.name}: no tool named {run.name!r}; this site has {sorted(tools)}"
        return run
    run.kind = tool.kind
    try:
        args = tool.bind(run.args)
    except ValueError as e:
        run.error = f"tool {run.name}: {e}"
        return run
    if tool.kind == "macro":
        return _run_macro(run, tool, args, runner)
    url = tool.filled_url(args, runner.origin())
    run.url = runner.show(url)
    reason = runner.refusal(url)
    if reason:
        run.error = f"tool {run.name}: refused {run.url}: {reason}"
        return run
    if tool.kind == "navigate":
        feedback, error = runner.navigate(url)
        run.feedback = f"Tool {run.call()}: opened {run.url}" + (f"; {feedback}" if feedback else "")
        run.error = f"tool {run.name}: {error}" if error else ""
        return run
    return _run_http(run, tool, args, url, runner)


def _run_http(run: ToolRun, tool: Tool, args: Mapping[str, str], url: str, runner: ToolRunner) -> ToolRun:
    form = {k: v for k, v in args.items() if k not in placeholders(tool.url)} if tool.method == "POST" else {}
    try:
        response = runner.http(tool.method, url, form)
    except TimeoutError as e:
        run.error = f"tool {run.name}: no answer: {e}"
        return run
    run.status = response.status
    text = runner.show(_compact(response.text, response.content_type))
    run.result_chars, run.truncated = len(text), len(text) > tool.max_result_chars
    run.result = text[:tool.max_result_chars] + (f" ... [cut at {tool.max_result_chars} of {len(text)} chars]"
                                                 if run.truncated else "")
    run.feedback = f"Tool {run.call()} -> HTTP {response.status}, {len(text)} chars:\n{run.result}"
    if not 200 <= response.status < 300:
        run.error = f"tool {run.name}: HTTP {response.status} from {run.url}"
    return run


def _compact(text: str, content_type: str) -> str:
    """JSON re-dumped without spaces (more result per character); other text as it is."""
    if "json" not in content_type:
        return text
    try:
        return json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        return text


def _run_macro(run: ToolRun, tool: Tool, args: Mapping[str, str], runner: ToolRunner) -> ToolRun:
    skill_run = runner.macro(tool.macro_skill(), args)
    run.steps = [s.to_dict() for s in skill_run.steps]
    done = sum(s.ok for s in skill_run.steps)
    head = f"Tool {run.call()} (macro): ran {done}/{skill_run.total} steps" + ("" if skill_run.ok else ", then stopped")
    run.feedback = "\n".join([head] + skill_run.feedback.split("\n")[1:])
    if skill_run.error:  # "skill NAME: step 2/3 (...): why" -> "tool NAME: step 2/3 (...): why"
        run.error = "tool " + skill_run.error.removeprefix("skill ")
    return run


class EpisodeToolRunner:
    """`ToolRunner` over a `WebEnv` episode. `execute(episode, action, deadline) -> (feedback, error)`
    is the env's own step execution; `deadline` is the env step's; `network` the episode's policy
    check (`refusal(url)`); macro steps get fresh step deadlines (`EpisodeSkillSteps`)."""

    def __init__(self, episode: Any, execute: Any, refusal: Any, deadline: Any, observation: Any,
                 step_timeout_s: float):
        self.episode, self.execute, self._refusal = episode, execute, refusal
        self.deadline, self.observation, self.step_timeout_s = deadline, observation, step_timeout_s

    def origin(self) -> str:
        return origin(self.episode.task.spec.start_url)

    def refusal(self, url: str) -> Optional[str]:
        return self._refusal(url)

    def show(self, text: str) -> str:
        return self.episode.alias.show(text) if self.episode.alias is not None else text

    def http(self, method: str, url: str, form: Mapping[str, str]) -> HttpResult:
        timeout_s = self.deadline.timeout_s()
        try:
            response = self.episode.context.request.fetch(
                url, method=method, form=dict(form) if method == "POST" else None, max_redirects=0,
                timeout=timeout_s * 1000, fail_on_status_code=False)
        except PlaywrightTimeout:
            raise TimeoutError(f"the site did not answer within {timeout_s:.1f} s (the step's time left)") from None
        text = response.text()
        return HttpResult(response.status, text, response.headers.get("content-type", ""))

    def navigate(self, url: str) -> tuple[str, str]:
        feedback, error = self.execute(self.episode, Action("goto", text=url), self.deadline)
        return self.show(feedback), self.show(error)

    def macro(self, skill: Skill, args: Mapping[str, str]) -> SkillRun:
        steps = EpisodeSkillSteps(self.episode, self.execute, self.observation, self.deadline, self.step_timeout_s)
        run = run_skill(Action.skill(skill.name, args), SkillLibrary([skill]), steps)
        self.deadline = steps.deadline
        return run

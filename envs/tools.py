"""Tools as higher-level actions ("The Tool Illusion"): a registry a site exposes, run as ONE env step.

    tool = Tool("search_catalog", "Search the catalogue; JSON of matching products with their URLs",
                params=(ToolParam("query"),), kind="http", url="/shop/api/search?q={query}")
    run = run_tool(Action.tool("search_catalog", {"query": "mug"}), {tool.name: tool}, runner)
    run.feedback, run.error      # -> obs["feedback"], obs["last_action_error"]
    run.to_dict()                # -> info["tool"] (JSON-able; Turn.tool_call)

This module holds the declarations (`Tool`, `ToolParam`), where an episode's tools come from and
the observation's "tools" text; `webrl.envs.tool_run` runs a call (`run_tool`, its messages and
record).

Kinds:
  http      a site API call: `method` (GET or POST) on the URL template `url` (a path on the task's
            origin, or an absolute URL); `{param}` placeholders are filled URL-encoded (POST sends
            the arguments the template does not use as a form body). The response text (JSON
            re-dumped compactly) is cut to `max_result_chars` and goes into the feedback. The call
            carries the episode's cookies (`BrowserContext.request`), follows no redirect, and its
            URL must pass the episode's network policy exactly as a navigation must
            (`DomainAllowlist.check_navigation`, plus `AddressPolicy` under the "public" subresource
            policy): a URL off the allowed sites is refused before any request is made.
  navigate  the browser opens the filled URL template (e.g. a search results page) via a `goto`
            step, so the allowlist, readiness and tab handling are a normal step's.
  macro     a fixed action sequence (`steps`: `webrl.skills.SkillStep`s, targets by role and name,
            `{param}` in text), run by the grounded-skills executor (`webrl.envs.skill_run`), each
            step with a step's own time limit; it stops at the first failing step.

Where tools come from (`WebEnvConfig.tools`): "" none (the observation's "tools" text is "" and the
prompt is exactly as without tools); "task" the task's own declaration: a `tools()` hook returning
`Tool`s if the task has one, else, for the sandbox sites, the site module's `TOOLS`
(`webrl.envs.sites.<site>.tasks.TOOLS`); any other value is a JSON file, `{"tools": [tool dicts]}`
(`Tool.to_dict`'s shape), for every task. A bad file or declaration raises `ToolFileError`.

Interpretations of the paper (its tool set is not the sandbox's): a tool result is text in the
feedback, never a page; the env does not check that the agent verifies it on a page (the
benchmark `benchmarks/tools.py` measures how often it does not). The turn trains on the agent's
`tool(...)` call only; the record is for analysis.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence
from urllib.parse import quote, urljoin

from webrl.actions import Action, is_call_name
from webrl.envs.skills import Skill, SkillFileError, SkillStep, placeholders

TOOL_KINDS = ("http", "navigate", "macro")
PARAM_TYPES = ("text", "integer")
HTTP_METHODS = ("GET", "POST")


class ToolFileError(ValueError):
    """A tool declaration or tools file that is not valid; the message names the tool and field."""


@dataclass(frozen=True)
class ToolParam:
    """One parameter: `name` (identifier), `type` ("text" or "integer"), what it is for."""

    name: str
    type: str = "text"
    description: str = ""

    def __post_init__(self) -> None:
        if not is_call_name(self.name):
            raise ToolFileError(f"tool param name must be an identifier that is no Python keyword, got {self.name!r}")
        if self.type not in PARAM_TYPES:
            raise ToolFileError(f"tool param {self.name!r}: type must be one of {PARAM_TYPES}, got {self.type!r}")


@dataclass(frozen=True)
class Tool:
    """A higher-level action a site exposes (module docstring). `url`: http/navigate template;
    `method`: http only; `steps`: macro only; `max_result_chars`: http result cut."""

    name: str
    description: str
    params: tuple[ToolParam, ...] = ()
    kind: str = "http"
    url: str = ""
    method: str = "GET"
    steps: tuple[SkillStep, ...] = field(default=(), hash=False)
    max_result_chars: int = 2000

    def __post_init__(self) -> None:
        where = f"tool {self.name!r}"
        if not is_call_name(self.name):
            raise ToolFileError(f"tool name must be an identifier (letters, digits, _), got {self.name!r}")
        if self.kind not in TOOL_KINDS:
            raise ToolFileError(f"{where}: kind must be one of {TOOL_KINDS}, got {self.kind!r}")
        if self.method not in HTTP_METHODS:
            raise ToolFileError(f"{where}: method must be one of {HTTP_METHODS}, got {self.method!r}")
        if not isinstance(self.max_result_chars, int) or self.max_result_chars < 1:
            raise ToolFileError(f"{where}: max_result_chars must be an int >= 1, got {self.max_result_chars!r}")
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ToolFileError(f"{where}: duplicate param names {names}")
        if self.kind == "macro":
            if not self.steps or self.url:
                raise ToolFileError(f"{where}: a macro tool needs steps and takes no url")
            self.macro_skill()  # its steps must use declared params only
        else:
            if not self.url or self.steps:
                raise ToolFileError(f"{where}: an {self.kind} tool needs a url template and takes no steps")
            unknown = placeholders(self.url) - set(names)
            if unknown:
                raise ToolFileError(f"{where}: url uses undeclared params {sorted(unknown)}")

    def signature(self) -> str:
        return f"{self.name}(" + ", ".join(f"{p.name}: {p.type}" for p in self.params) + ")"

    def bind(self, args: Mapping[str, str]) -> dict[str, str]:
        """`args` checked against the params; ValueError naming what is missing, unknown or mistyped."""
        wanted = {p.name: p for p in self.params}
        missing, unknown = sorted(set(wanted) - set(args)), sorted(set(args) - set(wanted))
        if missing or unknown:
            parts = [f"missing {missing}"] * bool(missing) + [f"unknown {unknown}"] * bool(unknown)
            raise ValueError(f"takes {self.signature()}; {'; '.join(parts)}")
        for name, value in args.items():
            if wanted[name].type == "integer" and not value.strip().lstrip("-").isdigit():
                raise ValueError(f"argument {name!r} must be an integer, got {value!r}")
        return dict(args)

    def filled_url(self, args: Mapping[str, str], origin: str) -> str:
        """The URL template with `args` URL-encoded, joined onto the task's real `origin`."""
        return urljoin(origin + "/", self.url.format_map({k: quote(v, safe="") for k, v in args.items()}))

    def macro_skill(self) -> Skill:
        """A macro's steps as a `Skill` for the grounded-skills executor (params become text)."""
        try:
            return Skill(self.name, self.description, steps=self.steps,
                         params=tuple(_skill_param(p) for p in self.params))
        except SkillFileError as e:
            raise ToolFileError(f"tool {self.name!r}: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "description": self.description, "kind": self.kind,
                             "params": [{"name": p.name, "type": p.type, "description": p.description}
                                        for p in self.params]}
        if self.kind == "macro":
            d["steps"] = self.macro_skill().to_dict()["steps"]
        else:
            d["url"] = self.url
        if self.kind == "http":
            d.update(method=self.method, max_result_chars=self.max_result_chars)
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "tool") -> "Tool":
        if not isinstance(d, dict):
            raise ToolFileError(f"{where}: expected a JSON object, got {type(d).__name__}")
        allowed = {"name", "description", "kind", "params", "url", "method", "steps", "max_result_chars"}
        unknown = sorted(set(d) - allowed)
        if unknown:
            raise ToolFileError(f"{where}: unknown field(s) {unknown}; allowed: {sorted(allowed)}")
        for key in ("name", "description", "kind"):
            if not isinstance(d.get(key), str):
                raise ToolFileError(f"{where}: field {key!r} must be a string")
        try:
            params = tuple(ToolParam(**p) for p in d.get("params", []))
            steps = ()
            if d.get("steps"):
                skill = Skill.from_dict({"name": d["name"], "description": d["description"], "steps": d["steps"],
                                         "params": [{"name": p.name} for p in params]}, where)
                steps = skill.steps
            return cls(d["name"], d["description"], params, d["kind"], str(d.get("url", "")),
                       str(d.get("method", "GET")), steps, d.get("max_result_chars", 2000))
        except (TypeError, SkillFileError, ToolFileError) as e:
            raise ToolFileError(f"{where}: {e}") from None


def _skill_param(p: ToolParam):
    from webrl.envs.skills import SkillParam

    return SkillParam(p.name, "text", p.description)


# -- where tools come from ------------------------------------------------------------------------
def load_tools_file(path: str | Path) -> tuple[Tool, ...]:
    """Tools of a JSON file `{"tools": [...]}`; ToolFileError naming the file and the tool."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ToolFileError(f"tools file {path}: cannot read it: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("tools"), list):
        raise ToolFileError(f'tools file {path}: expected {{"tools": [tool objects]}}')
    return check_tools(Tool.from_dict(t, f"tools file {path}: tools[{i}]") for i, t in enumerate(data["tools"]))


def check_tools(tools: Any) -> tuple[Tool, ...]:
    tools = tuple(tools)
    if not all(isinstance(t, Tool) for t in tools):
        raise ToolFileError(f"tools must be Tool objects, got {[type(t).__name__ for t in tools]}")
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise ToolFileError(f"tool names must be unique, got {names}")
    return tools


def task_tools(task: Any) -> tuple[Tool, ...]:
    """The tools `task` declares: its `tools()` hook, else its sandbox site's `TOOLS`, else none."""
    inner = getattr(task, "wrapped", task)  # as_task's DefaultedTask keeps the user's object there
    hook = getattr(inner, "tools", None)
    if callable(hook):
        return check_tools(hook() or ())
    from webrl.envs.sites.common import SiteTask
    from webrl.envs.sites.source import site_module

    if isinstance(inner, SiteTask):
        return check_tools(getattr(site_module(inner.spec.site), "TOOLS", ()))
    return ()


def tools_text(tools: Sequence[Tool]) -> str:
    """The observation's "tools" text: one `signature: description` line per tool, in name order."""
    return "\n".join(f"{t.signature()}: {t.description}" for t in sorted(tools, key=lambda t: t.name))


def tool_step_count(action: Any, tools: Mapping[str, Tool]) -> int:
    """How many env-step time budgets `action` may use: a known macro's step count, else 1."""
    if isinstance(action, Action) and action.kind == "tool" and action.text in tools:
        return max(1, len(tools[action.text].steps))
    return 1


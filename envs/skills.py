"""Skills as data (WebXSkill): a parameterised program of webrl `Action`s plus step-level guidance.

    skill = Skill(name="search_products", description="Search the shop for a product",
                  params=(SkillParam("query", "text"),),
                  steps=(SkillStep("type", Target(role="searchbox"), text="{query}",
                                   guidance="Type the product name into the search box"),
                         SkillStep("press", text="Enter", guidance="Submit the search")),
                  url_patterns=("/shop/*",), leads_to="/shop/search*")
    actions = skill.bind({"query": "blue mug"})        # list[BoundStep]: targets + literal args
    element_id = resolve_target(step.target, elements)  # webrl.envs.skill_matching: on the current page

A step's element is never a raw Set-of-Mark id (ids change with every page): it is a `Target`
described by role and accessible name, either literal (`Target(role="button", name="Add to
cart")`) or taken from a parameter (`Target(role="link", name="{item}")`, the parameter holding the
element's accessible name). Text arguments may hold `{param}` placeholders (a literal brace is `{{` or `}}`).
How a `Target` resolves against a page (`resolve_target`) and how `url_patterns` match a URL
(`url_matches`): `webrl.envs.skill_matching`.

Interpretation of WebXSkill (its code is not public): the paper does not fix the step schema; we use
webrl's own action kinds, the element-free kinds (press, scroll, goto, back, wait) included, and
record provenance as trajectory ids plus replay counts.

Files: one skill per JSON file `<name>.json` in a library folder (`SkillLibrary`; the extraction
report `report.json` beside them is not a skill); a malformed file raises `SkillFileError` naming
the file and the field.
"""
from __future__ import annotations

import dataclasses
import json
import os
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from webrl.actions import Action, ActionError, is_call_name
from webrl.envs.skill_matching import url_matches

__all__ = ["PARAM_TYPES", "REPORT_FILE", "STEP_KINDS", "BoundStep", "Skill", "SkillArgsError", "SkillFileError",
           "SkillLibrary", "SkillParam", "SkillStep", "Target"]

PARAM_TYPES = ("text", "element", "option", "url")
"""text: typed text; element: an element's accessible name; option: a select option label; url: a URL."""
STEP_KINDS = ("click", "hover", "type", "select", "press", "scroll", "goto", "back", "forward", "wait")
"""Action kinds a skill step may use (no answer/stop: a skill never ends the episode)."""
ELEMENT_KINDS = ("click", "hover", "type", "select", "scroll")
"""Step kinds that may take a target (required for click, hover, select)."""
REPORT_FILE = "report.json"
GRAPH_FILE = "graph.json"
"""Files a library folder may hold besides the skills (the extraction report of
webrl.skills.commands, a saved SkillGraph); `SkillLibrary.load` skips them."""

_EXTRA_FIELDS = {"click": ("button", "clicks"), "scroll": ("direction", "amount"), "wait": ("amount",),
                 "type": ("clear",)}


class SkillFileError(ValueError):
    """A skill file or dict that is not a valid skill; the message names the file and field."""


class SkillArgsError(ValueError):
    """Arguments that do not fit a skill's parameters (missing, unknown, wrong type)."""


def placeholders(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def _fill(text: str, args: Mapping[str, str]) -> str:
    return text.format_map({k: str(v) for k, v in args.items()})


@dataclass(frozen=True)
class SkillParam:
    """One parameter: `name`, `type` (one of PARAM_TYPES), what it is for."""

    name: str
    type: str = "text"
    description: str = ""

    def __post_init__(self) -> None:
        if not is_call_name(self.name):
            raise SkillFileError(f"param name must be an identifier that is no Python keyword, got {self.name!r}")
        if self.type not in PARAM_TYPES:
            raise SkillFileError(f"param {self.name!r}: type must be one of {PARAM_TYPES}, got {self.type!r}")


@dataclass(frozen=True)
class Target:
    """An element described robustly: role (ARIA role or tag, "" = any) and accessible name (may be
    a `{param}` placeholder or contain one). At least one of the two is set."""

    role: str = ""
    name: str = ""

    def __post_init__(self) -> None:
        if not (self.role or self.name):
            raise SkillFileError("target needs a role or a name")

    def bind(self, args: Mapping[str, str]) -> "Target":
        return Target(self.role, _fill(self.name, args))

    def describe(self) -> str:
        return f"{self.role or 'element'} {self.name!r}" if self.name else self.role


@dataclass(frozen=True)
class SkillStep:
    """One action of the program. `kind` from STEP_KINDS; `target` for element kinds; `text` for
    type/select/press/goto (may hold `{param}`); `extra` holds the kind's other fields (click:
    button/clicks, scroll: direction/amount, wait: amount, type: clear); `guidance` is the step's
    natural-language instruction (guided mode shows it; grounded mode reports it)."""

    kind: str
    target: Optional[Target] = None
    text: Optional[str] = None
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)
    guidance: str = ""

    def __post_init__(self) -> None:
        if self.kind not in STEP_KINDS:
            raise SkillFileError(f"step kind must be one of {STEP_KINDS}, got {self.kind!r}")
        if self.target is not None and self.kind not in ELEMENT_KINDS:
            raise SkillFileError(f"step {self.kind!r} takes no target (only {ELEMENT_KINDS} do)")
        if self.target is None and self.kind in ("click", "hover", "select"):
            raise SkillFileError(f"step {self.kind!r} needs a target")
        if self.text is None and self.kind in ("type", "select", "press", "goto"):
            raise SkillFileError(f"step {self.kind!r} needs text")
        bad = set(self.extra) - set(_EXTRA_FIELDS.get(self.kind, ()))
        if bad:
            raise SkillFileError(f"step {self.kind!r}: extra takes {_EXTRA_FIELDS.get(self.kind, ())}, got {sorted(bad)}")
        if self.kind == "scroll" and "direction" not in self.extra:
            raise SkillFileError("step 'scroll' needs extra.direction")

    @property
    def placeholders(self) -> set[str]:
        out = placeholders(self.text or "")
        if self.target is not None:
            out |= placeholders(self.target.name)
        return out

    def action(self, element: Optional[int] = None) -> Action:
        """The concrete `Action` once the target resolved to `element` (None for element-free
        steps). Raises ActionError for impossible combinations."""
        fields = dict(self.extra)
        if self.text is not None:
            fields["text"] = self.text
        if element is not None:
            fields["element"] = element
        return Action(self.kind, **fields)


@dataclass(frozen=True)
class BoundStep:
    """A step with the skill's arguments substituted (target name and text are literal)."""

    index: int
    step: SkillStep

    @property
    def guidance(self) -> str:
        return self.step.guidance


@dataclass(frozen=True)
class Skill:
    """A reusable, parameterised multi-step procedure.

    name: identifier, unique in a library; description: one line for the prompt.
    params: typed parameters; steps: the program (>= 1 step); url_patterns: where it applies
    ([] = anywhere); leads_to: URL pattern of the page it usually ends on ("" = unknown).
    provenance: ids of the trajectories it was mined from; replays / replay_successes: how often
    validation replays ran it and how often they succeeded.
    """

    name: str
    description: str
    params: tuple[SkillParam, ...] = ()
    steps: tuple[SkillStep, ...] = ()
    url_patterns: tuple[str, ...] = ()
    leads_to: str = ""
    provenance: tuple[str, ...] = ()
    replays: int = 0
    replay_successes: int = 0

    def __post_init__(self) -> None:
        if not is_call_name(self.name):
            raise SkillFileError(f"name must be an identifier (letters, digits, _; no Python keyword), got {self.name!r}")
        if not self.steps:
            raise SkillFileError(f"skill {self.name!r}: steps must not be empty")
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise SkillFileError(f"skill {self.name!r}: duplicate param names {names}")
        used = set().union(*(s.placeholders for s in self.steps))
        unknown = used - set(names)
        if unknown:
            raise SkillFileError(f"skill {self.name!r}: steps use undeclared params {sorted(unknown)}")
        if not 0 <= self.replay_successes <= self.replays:
            raise SkillFileError(f"skill {self.name!r}: need 0 <= replay_successes <= replays")

    # -- use --------------------------------------------------------------------------------
    def bind(self, args: Mapping[str, Any]) -> list[BoundStep]:
        """Steps with `args` substituted. Raises SkillArgsError naming the missing / unknown params."""
        wanted = {p.name: p for p in self.params}
        missing = sorted(set(wanted) - set(args))
        unknown = sorted(set(args) - set(wanted))
        if missing or unknown:
            raise SkillArgsError(f"skill {self.name!r} takes {self.signature()}; "
                                 + (f"missing {missing}" if missing else "") + ("; " if missing and unknown else "")
                                 + (f"unknown {unknown}" if unknown else ""))
        for k, v in args.items():
            if not isinstance(v, (str, int, float)) or isinstance(v, bool):
                raise SkillArgsError(f"skill {self.name!r}: argument {k!r} must be a string, got {v!r}")
        in_targets = set().union(*(placeholders(s.target.name) for s in self.steps if s.target is not None))
        blank = sorted(k for k in in_targets if not str(args[k]).strip())
        if blank:
            raise SkillArgsError(f"skill {self.name!r}: {blank} name the element to act on and must not be empty")
        out = []
        for i, s in enumerate(self.steps):
            target = s.target.bind(args) if s.target is not None else None
            text = _fill(s.text, args) if s.text is not None else None
            out.append(BoundStep(i, dataclasses.replace(s, target=target, text=text)))
        return out

    def signature(self) -> str:
        return f"{self.name}(" + ", ".join(f"{p.name}: {p.type}" for p in self.params) + ")"

    def applies_to(self, url: str) -> bool:
        return not self.url_patterns or any(url_matches(p, url) for p in self.url_patterns)

    @property
    def replay_rate(self) -> float:
        return self.replay_successes / self.replays if self.replays else 0.0

    # -- (de)serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "params": [dataclasses.asdict(p) for p in self.params],
                "steps": [_step_dict(s) for s in self.steps],
                "url_patterns": list(self.url_patterns), "leads_to": self.leads_to,
                "provenance": list(self.provenance), "replays": self.replays,
                "replay_successes": self.replay_successes}

    @classmethod
    def from_dict(cls, d: Any, where: str = "skill") -> "Skill":
        """From `to_dict`'s dict; raises SkillFileError naming `where` and the field."""
        if not isinstance(d, dict):
            raise SkillFileError(f"{where}: expected a JSON object, got {type(d).__name__}")
        allowed = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - allowed)
        if unknown:
            raise SkillFileError(f"{where}: unknown field(s) {unknown}; allowed: {sorted(allowed)}")
        for key in ("name", "description", "steps"):
            if key not in d:
                raise SkillFileError(f"{where}: missing field {key!r}")
        try:
            params = tuple(_param(p, f"{where}: params[{i}]") for i, p in enumerate(_list(d, "params", where)))
            steps = tuple(_step(s, f"{where}: steps[{i}]") for i, s in enumerate(_list(d, "steps", where)))
            return cls(name=_str(d, "name", where), description=_str(d, "description", where), params=params,
                       steps=steps, url_patterns=tuple(str(p) for p in _list(d, "url_patterns", where)),
                       leads_to=str(d.get("leads_to", "")),
                       provenance=tuple(str(p) for p in _list(d, "provenance", where)),
                       replays=int(d.get("replays", 0)), replay_successes=int(d.get("replay_successes", 0)))
        except SkillFileError as e:
            msg = str(e)
            raise SkillFileError(msg if msg.startswith(where) else f"{where}: {msg}") from None
        except (TypeError, ValueError) as e:
            raise SkillFileError(f"{where}: {e}") from None


def _step_dict(s: SkillStep) -> dict[str, Any]:
    d: dict[str, Any] = {"kind": s.kind}
    if s.target is not None:
        d["target"] = {"role": s.target.role, "name": s.target.name}
    if s.text is not None:
        d["text"] = s.text
    if s.extra:
        d["extra"] = dict(s.extra)
    if s.guidance:
        d["guidance"] = s.guidance
    return d


def _list(d: dict, key: str, where: str) -> list:
    value = d.get(key, [])
    if not isinstance(value, list):
        raise SkillFileError(f"{where}: field {key!r} must be a list, got {type(value).__name__}")
    return value


def _str(d: dict, key: str, where: str) -> str:
    value = d[key]
    if not isinstance(value, str):
        raise SkillFileError(f"{where}: field {key!r} must be a string, got {value!r}")
    return value


def _param(p: Any, where: str) -> SkillParam:
    if not isinstance(p, dict) or set(p) - {"name", "type", "description"} or "name" not in p:
        raise SkillFileError(f"{where}: a param is {{name, type, description}}, got {p!r}")
    try:
        return SkillParam(**p)
    except SkillFileError as e:
        raise SkillFileError(f"{where}: {e}") from None


def _step(s: Any, where: str) -> SkillStep:
    if not isinstance(s, dict) or "kind" not in s:
        raise SkillFileError(f"{where}: a step is an object with 'kind', got {s!r}")
    unknown = sorted(set(s) - {"kind", "target", "text", "extra", "guidance"})
    if unknown:
        raise SkillFileError(f"{where}: unknown field(s) {unknown}")
    target = s.get("target")
    if not isinstance(s.get("extra", {}), dict):
        raise SkillFileError(f"{where}.extra: must be an object, got {s['extra']!r}")
    try:
        if target is not None:
            if not isinstance(target, dict) or set(target) - {"role", "name"}:
                raise SkillFileError(f"target is {{role, name}}, got {target!r}")
            target = Target(str(target.get("role", "")), str(target.get("name", "")))
        step = SkillStep(kind=s["kind"], target=target, text=s.get("text"), extra=dict(s.get("extra", {})),
                         guidance=str(s.get("guidance", "")))
        step.action(element=0 if step.target is not None else None)  # refuses impossible fields
        return step
    except (SkillFileError, ActionError) as e:
        raise SkillFileError(f"{where}: {e}") from None


# -- library -----------------------------------------------------------------------------------
class SkillLibrary:
    """Skills by name, stored as `<folder>/<name>.json` (one skill per file)."""

    def __init__(self, skills: Iterable[Skill] = ()):
        self._skills: dict[str, Skill] = {}
        for s in skills:
            self.add(s)

    def add(self, skill: Skill) -> None:
        if skill.name in self._skills:
            raise ValueError(f"a skill named {skill.name!r} is already in the library")
        self._skills[skill.name] = skill

    def get(self, name: str) -> Skill:
        if name not in self._skills:
            raise KeyError(f"no skill named {name!r}; the library has {sorted(self._skills) or 'none'}")
        return self._skills[name]

    def __contains__(self, name: object) -> bool:
        return name in self._skills

    def __iter__(self):
        return iter(self._skills.values())

    def __len__(self) -> int:
        return len(self._skills)

    def names(self) -> list[str]:
        return sorted(self._skills)

    def save(self, folder: str | Path) -> Path:
        """Write every skill as `<name>.json` (atomically each) and return the folder."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for s in self._skills.values():
            path = folder / f"{s.name}.json"
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(s.to_dict(), indent=1, ensure_ascii=False) + "\n")
            os.replace(tmp, path)
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> "SkillLibrary":
        """Every `*.json` in `folder` but REPORT_FILE and GRAPH_FILE; a bad file raises SkillFileError
        naming it and the field."""
        folder = Path(folder)
        if not folder.is_dir():
            raise SkillFileError(f"{folder}: skill library folder does not exist")
        lib = cls()
        for path in sorted(folder.glob("*.json")):
            if path.name in (REPORT_FILE, GRAPH_FILE):
                continue
            try:
                data = json.loads(path.read_text())
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                raise SkillFileError(f"{path}: not a JSON file: {e}") from None
            skill = Skill.from_dict(data, where=str(path))
            if skill.name != path.stem:
                raise SkillFileError(f"{path}: field 'name' is {skill.name!r} but the file is named {path.stem!r}")
            lib.add(skill)
        return lib

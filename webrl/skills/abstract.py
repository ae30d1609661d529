"""Skill extraction's abstraction (WebXSkill stage 1, step 3): the occurrences of one mined window
-> one parameterised `Skill` (`abstract`), and back: the first window of a trajectory that fits a
skill (`find_occurrence`) and the arguments it held there (`arguments_from`), which validation
replays. The rules are in `webrl.skills.extract`'s docstring."""
from __future__ import annotations

import keyword
import re
from typing import Any, Mapping, Optional, Sequence

from webrl.envs.skills import Skill, SkillParam, SkillStep, Target
from webrl.skills.steps import Occurrence, RawStep, merge_kinds, page_kind, robust_steps
from webrl.types import Trajectory


def _norm(text: Any) -> str:
    return " ".join(str(text or "").split()).casefold()


def _slug(text: str, fallback: str, words_kept: int = 2) -> str:
    words = re.findall(r"[a-z0-9]+", text.casefold())[:words_kept]
    slug = "_".join(words)
    if not slug or slug[0].isdigit():
        slug = fallback
    slug = slug[:40]
    return slug + "_" if keyword.iskeyword(slug) or slug in ("true", "false", "null", "none") else slug


_PARAM = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}\Z")  # a name or text that is exactly one placeholder


def _escape(name: str) -> str:
    """A literal element name as a Target name (braces doubled: they are not placeholders)."""
    return name.replace("{", "{{").replace("}", "}}")


def _unescape(name: str) -> str:
    return name.replace("{{", "{").replace("}}", "}")


def _common_prefix(names: Sequence[str]) -> str:
    split = [n.split() for n in names]
    out = []
    for words in zip(*split):
        if len({w.casefold() for w in words}) != 1:
            break
        out.append(words[0])
    return " ".join(out)


class _Params:
    """Parameters being declared for one skill: name -> (type, the value in each occurrence)."""

    def __init__(self) -> None:
        self.params: list[SkillParam] = []
        self.values: dict[str, tuple[str, ...]] = {}

    def get(self, values: tuple[str, ...], type_: str, hint: str, description: str) -> str:
        for p in self.params:  # the same value in every occurrence: one parameter (query typed = link named)
            if self.values[p.name] == values and (p.type == type_ or {p.type, type_} <= {"text", "element"}):
                return p.name
        name, n = hint, 2
        while name in self.values:
            name, n = f"{hint}_{n}", n + 1
        self.params.append(SkillParam(name, type_, description))
        self.values[name] = values
        return name


def _guidance(kind: str, target: Optional[Target], text: Optional[str], extra: Mapping[str, Any],
              text_param: Optional[str]) -> str:
    where = ""
    if target is not None:
        name = target.name.replace("{", "<").replace("}", ">")
        where = f"the {target.role or 'element'}" + (f' "{name}"' if name else "")
    value = f"<{text_param}>" if text_param else f'"{text}"'
    if kind == "click":
        return f"Click {where}"
    if kind == "hover":
        return f"Hover over {where}"
    if kind == "type":
        return f"Type {value} into {where}" if where else f"Type {value}"
    if kind == "select":
        return f"Choose {value} in {where}"
    if kind == "press":
        return f"Press {value}"
    if kind == "scroll":
        return f"Scroll {extra.get('direction', 'down')}" + (f" in {where}" if where else "")
    if kind == "goto":
        return f"Go to {value}"
    return {"back": "Go back", "forward": "Go forward", "wait": "Wait for the page"}[kind]


def abstract(occurrences: Sequence[Occurrence]) -> Skill:
    """One skill from the occurrences of a mined window (see the module docstring, step 3)."""
    params = _Params()
    steps = []
    goals = [_norm(o.trajectory.goal) for o in occurrences]
    for pos, first in enumerate(occurrences[0].steps):
        column = [o.steps[pos] for o in occurrences]
        target = None
        if first.role is not None:
            names = tuple(s.name for s in column)
            in_goal = all(_norm(n) in g for n, g in zip(names, goals))
            if len({_norm(n) for n in names}) == 1:
                target = Target(first.role, _escape(first.name))
            elif _common_prefix(names) and not in_goal:  # the task names each element: a parameter
                target = Target(first.role, _escape(_common_prefix(names)))
            else:
                pname = params.get(names, "element", _slug(first.role, "element"),
                                   f"name of the {first.role}" + (" named in the task" if in_goal else " to use"))
                target = Target(first.role, "{" + pname + "}")
        text, text_param = first.text, None
        if first.text is not None:
            texts = tuple(s.text or "" for s in column)
            if len(set(texts)) > 1:
                type_ = {"select": "option", "goto": "url"}.get(first.kind, "text")
                hint = _slug(target.name if target is not None and "{" not in target.name else first.kind,
                             f"{first.kind}_text")
                text_param = params.get(texts, type_, hint, f"{type_} for step {pos + 1} ({first.kind})")
                text = "{" + text_param + "}"
            else:
                text = text.replace("{", "{{").replace("}", "}}")
        extra = dict(first.extra)
        steps.append(SkillStep(first.kind, target, text, extra, _guidance(first.kind, target, first.text, extra,
                                                                             text_param)))
    start = merge_kinds(page_kind(o.steps[0].url) for o in occurrences)
    ends = [page_kind(o.next_url) for o in occurrences if o.next_url]
    description = "; ".join(s.guidance for s in steps)
    return Skill(name=_skill_name(steps), description=description[:200], params=tuple(params.params),
                 steps=tuple(steps), url_patterns=(start,), leads_to=merge_kinds(ends) if ends else "",
                 provenance=tuple(dict.fromkeys(o.trajectory.task_id for o in occurrences)))


def _skill_name(steps: Sequence[SkillStep]) -> str:
    """kind + first word of the literal target name (or the role), per step: type_search_click_search."""
    parts = []
    for s in steps:
        label = ""
        if s.target is not None:
            label = s.target.role if "{" in s.target.name or not s.target.name else s.target.name
        word = _slug(label, "", words_kept=1)
        parts.append(s.kind + ("_" + word[:12] if word else ""))
    return "_".join(parts)[:60].rstrip("_")


def arguments_from(skill: Skill, occurrence: Occurrence) -> dict[str, str]:
    """The values the skill's parameters held in `occurrence` (which must fit the skill's steps)."""
    args: dict[str, str] = {}
    for step, raw in zip(skill.steps, occurrence.steps):
        if step.target is not None and _PARAM.match(step.target.name):
            args[step.target.name[1:-1]] = raw.name
        if step.text is not None and _PARAM.match(step.text):
            args[step.text[1:-1]] = raw.text or ""
    return args


def find_occurrence(skill: Skill, traj: Trajectory) -> Optional[Occurrence]:
    """The first window of `traj` that fits `skill` (kinds, roles, literal names and texts)."""
    n = len(skill.steps)
    for run in robust_steps(traj):
        for start in range(len(run) - n + 1):
            window = run[start:start + n]
            if all(_fits(step, raw) for step, raw in zip(skill.steps, window)) and skill.applies_to(window[0].url):
                last = window[-1].turn
                next_url = traj.turns[last + 1].observation.url if last + 1 < len(traj.turns) else ""
                return Occurrence(traj, tuple(window), next_url)
    return None


def _fits(step: SkillStep, raw: RawStep) -> bool:
    if step.kind != raw.kind or dict(raw.extra) != dict(step.extra):
        return False
    if (step.target is None) != (raw.role is None):
        return False
    if step.target is not None:
        if _norm(step.target.role) != _norm(raw.role):
            return False
        if not _PARAM.match(step.target.name) and not _norm(raw.name).startswith(_norm(_unescape(step.target.name))):
            return False
    if step.text is not None and not step.text.startswith("{") and step.text.replace("{{", "{").replace(
            "}}", "}") != raw.text:
        return False
    return True

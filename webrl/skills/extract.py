"""Skill extraction (WebXSkill stage 1): successful trajectories -> parameterised, validated skills.

    result = extract_skills(trajectories, ExtractionConfig(min_support=2, max_len=4))
    result.skills                  # list[Skill], deterministic given the inputs
    result.report                  # {"trajectories": .., "mined": .., "abstracted": .., "validated": ..}

Pipeline:
1. Robust steps: each turn of a successful trajectory (`info.task_reward == 1` or `reward == 1`)
   becomes a `RawStep`: an element action's id is looked up in the turn's recorded elements
   (`turn.observation.elements`) and kept as (role, name); element-free kinds (press, goto, back,
   forward, wait, scroll without element) are kept as they are. A turn whose element is not
   recorded, or whose kind a skill cannot hold (answer, stop, coordinates, tabs), cuts the run.
2. Mining: every window of 2..max_len consecutive robust steps gets a signature (kind, role,
   extra fields and page kind per step); a signature is *mined* when windows with it occur in
   >= min_support distinct tasks (`task_id`). One occurrence per trajectory (the first) is used.
   Windows contained in a longer mined window with the same supporting tasks are dropped
   (closed patterns only), so a 3-step routine does not also come out as its two 2-step halves.
3. Abstraction per step position, across the occurrences: a value equal in all occurrences stays
   literal; a varying value becomes a typed parameter (typed text -> "text", select option ->
   "option", goto URL -> "url", element name -> "element"; an earlier parameter is reused when it
   held the same value in every occurrence). A varying element name whose words share a prefix
   across occurrences (select labels such as "Size Choose a size S M L") becomes the literal prefix
   (`resolve_target` matches by prefix). Guidance text is written from each step;
   url_patterns come from the start pages, leads_to from the page after the last step.
4. Validation (optional): `validate(skill, replay, cases)` runs `replay(skill, args, task)` on
   each case and records replays / replay_successes; skills below `min_replay_rate` are dropped.
   `WebEnvReplay` is the real replay (Chromium, sandbox sites).

Page kinds (`page_kind`): a URL's path with every segment holding a digit replaced by "*";
two pages are compatible when their kinds are equal, or when they differ only in the last
segment and the path has >= 3 segments (/shop/c/jackets ~ /shop/c/lamps -> /shop/c/*).

Interpretation of WebXSkill (its code is not public): the paper mines "reusable action
subsequences" with an LLM over synthetic trajectories; we mine them by exact support counting
over (kind, role, page kind) signatures, abstract by comparing occurrences, and validate by
scripted replay instead of an LLM judge. Parameters that vary but do not occur in the goal are
still parameters (the caller chooses them, e.g. which listed product to open).
"""
from __future__ import annotations

import dataclasses
import keyword
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence
from urllib.parse import urlparse

from webrl.envs.skills import STEP_KINDS, Skill, SkillParam, SkillStep, Target
from webrl.types import Trajectory

__all__ = ["ExtractionConfig", "ExtractionResult", "Occurrence", "RawStep", "extract_skills", "mine_candidates",
           "page_kind", "robust_steps", "validate"]

_EXTRA = {"click": ("button", "clicks"), "scroll": ("direction", "amount"), "wait": ("amount",), "type": ("clear",)}
_DEFAULTS = {"button": "left", "clicks": 1, "clear": True}
Replay = Callable[[Skill, Mapping[str, str], Any], bool]
"""(skill, arguments, task) -> did the task's checker succeed with the skill in the episode."""


@dataclass
class ExtractionConfig:
    """How skills are mined from trajectories."""

    min_support: int = 2
    """A subsequence must occur in at least this many distinct tasks (>= 2)."""
    max_len: int = 4
    """Longest subsequence mined, in steps (>= 2)."""
    min_replay_rate: float = 1.0
    """Validation keeps skills whose replays succeed at least this often (0 < rate <= 1)."""
    max_replays: int = 3
    """Validation replays per skill at most (>= 1)."""

    def __post_init__(self) -> None:
        from webrl.config import ConfigError

        if not (isinstance(self.min_support, int) and self.min_support >= 2):
            raise ConfigError(f"min_support must be an integer >= 2, got {self.min_support!r}")
        if not (isinstance(self.max_len, int) and self.max_len >= 2):
            raise ConfigError(f"max_len must be an integer >= 2, got {self.max_len!r}")
        if not 0.0 < float(self.min_replay_rate) <= 1.0:
            raise ConfigError(f"min_replay_rate must be in (0, 1], got {self.min_replay_rate!r}")
        if not (isinstance(self.max_replays, int) and self.max_replays >= 1):
            raise ConfigError(f"max_replays must be an integer >= 1, got {self.max_replays!r}")


@dataclass(frozen=True)
class RawStep:
    """One turn as a robust step: kind, target (role, name) or None, text, extra fields, and the
    page it was taken on (`url`); `turn` is its index in the trajectory."""

    kind: str
    role: Optional[str]
    name: str
    text: Optional[str]
    extra: tuple[tuple[str, Any], ...]
    url: str
    turn: int


@dataclass(frozen=True)
class Occurrence:
    """A window of robust steps in one trajectory, and the URL of the page after it ("" unknown)."""

    trajectory: Trajectory
    steps: tuple[RawStep, ...]
    next_url: str


@dataclass
class ExtractionResult:
    skills: list[Skill]
    report: dict[str, Any] = field(default_factory=dict)


def is_success(traj: Trajectory) -> bool:
    return traj.status == "ok" and (traj.info.task_reward == 1 or traj.reward == 1)


def page_kind(url: str) -> str:
    """The URL's path with digit-holding segments as "*" (query and host dropped)."""
    path = urlparse(url).path or "/"
    return "/".join("*" if re.search(r"\d", seg) else seg for seg in path.split("/"))


def _page_key(kind: str) -> str:
    """The grouping key of a page kind: its last segment as "*" when the path is deep enough."""
    segs = kind.split("/")
    if len([s for s in segs if s]) >= 3 and segs[-1]:
        return "/".join(segs[:-1] + ["*"])
    return kind


def _merge_kinds(kinds: Iterable[str]) -> str:
    kinds = sorted(set(kinds))
    return kinds[0] if len(kinds) == 1 else _page_key(kinds[0])


def robust_steps(traj: Trajectory) -> list[list[RawStep]]:
    """The trajectory's turns as runs of robust steps (a non-robust turn ends a run)."""
    runs: list[list[RawStep]] = [[]]
    for i, turn in enumerate(traj.turns):
        step = _robust(turn, i)
        if step is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append(step)
    return [r for r in runs if r]


def _robust(turn: Any, index: int) -> Optional[RawStep]:
    a = turn.action
    if a is None or a.kind not in STEP_KINDS:
        return None
    extra = tuple((k, getattr(a, k)) for k in _EXTRA.get(a.kind, ())
                  if getattr(a, k) is not None and getattr(a, k) != _DEFAULTS.get(k))
    role, name = None, ""
    if a.element is not None:
        record = next((e for e in turn.observation.elements if e.get("id") == a.element), None)
        if record is None:
            return None  # the element cannot be described without its record
        role = str(record.get("role") or record.get("tag") or "")
        name = " ".join(str(record.get("name") or "").split())
        if not (role or name):
            return None
    elif a.kind in ("click", "hover", "select"):
        return None
    return RawStep(a.kind, role, name, a.text, extra, turn.observation.url, index)


def _signature(steps: Sequence[RawStep]) -> tuple:
    return tuple((s.kind, s.role, s.extra, _page_key(page_kind(s.url))) for s in steps)


def mine_candidates(trajectories: Sequence[Trajectory],
                    config: ExtractionConfig) -> tuple[list[list[Occurrence]], int]:
    """Closed frequent windows (for each, one occurrence per supporting trajectory, in input order),
    most supported first, and how many windows were frequent before closing."""
    found: dict[tuple, dict[int, Occurrence]] = {}
    for t_index, traj in enumerate(trajectories):
        for run in robust_steps(traj):
            for length in range(2, config.max_len + 1):
                for start in range(len(run) - length + 1):
                    window = tuple(run[start:start + length])
                    last = window[-1].turn
                    next_url = traj.turns[last + 1].observation.url if last + 1 < len(traj.turns) else ""
                    found.setdefault(_signature(window), {}).setdefault(t_index, Occurrence(traj, window, next_url))
    frequent = {sig: occ for sig, occ in found.items()
                if len({o.trajectory.task_id for o in occ.values()}) >= config.min_support}
    closed = []
    for sig, occ in frequent.items():
        tasks = {o.trajectory.task_id for o in occ.values()}
        if not any(len(other) > len(sig) and _contains(other, sig)
                   and {o.trajectory.task_id for o in frequent[other].values()} == tasks for other in frequent):
            closed.append((sig, [occ[k] for k in sorted(occ)]))
    closed.sort(key=lambda item: (-len({o.trajectory.task_id for o in item[1]}), -len(item[0]), repr(item[0])))
    return [occ for _, occ in closed], len(frequent)


def _contains(longer: tuple, shorter: tuple) -> bool:
    n = len(shorter)
    return any(longer[i:i + n] == shorter for i in range(len(longer) - n + 1))


# -- abstraction --------------------------------------------------------------------------------
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
    start = _merge_kinds(page_kind(o.steps[0].url) for o in occurrences)
    ends = [page_kind(o.next_url) for o in occurrences if o.next_url]
    description = "; ".join(s.guidance for s in steps)
    return Skill(name=_skill_name(steps), description=description[:200], params=tuple(params.params),
                 steps=tuple(steps), url_patterns=(start,), leads_to=_merge_kinds(ends) if ends else "",
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


# -- validation and the whole pipeline ----------------------------------------------------------
def validate(skill: Skill, replay: Replay, cases: Sequence[tuple[Mapping[str, str], Any]]) -> Skill:
    """`skill` with replays / replay_successes counted over `cases` ((args, task) pairs)."""
    successes = sum(bool(replay(skill, args, task)) for args, task in cases)
    return dataclasses.replace(skill, replays=skill.replays + len(cases),
                               replay_successes=skill.replay_successes + successes)


def extract_skills(trajectories: Sequence[Trajectory], config: Optional[ExtractionConfig] = None,
                   replay: Optional[Replay] = None, held_out: Sequence[Trajectory] = (),
                   task_of: Optional[Callable[[Trajectory], Any]] = None) -> ExtractionResult:
    """Mine, abstract and (when `replay` is given) validate skills.

    Validation cases: for each skill, the trajectories of `held_out` (or, when empty, the input
    trajectories) that contain a window fitting the skill, at most `max_replays`, in order; the
    arguments come from that window and the task from `task_of(trajectory)`.
    """
    config = config or ExtractionConfig()
    ok = [t for t in trajectories if is_success(t)]
    candidates, mined = mine_candidates(ok, config)
    skills: list[Skill] = []
    names: set[str] = set()
    for occurrences in candidates:
        skill = abstract(occurrences)
        name, n = skill.name, 2
        while name in names:
            name, n = f"{skill.name}_{n}", n + 1
        names.add(name)
        skills.append(dataclasses.replace(skill, name=name))
    report: dict[str, Any] = {"trajectories": len(trajectories), "successful": len(ok), "mined": mined,
                              "abstracted": len(skills), "validated": None, "replays": 0, "replay_successes": 0}
    if replay is None:
        return ExtractionResult(skills, report)
    pool = [t for t in held_out if is_success(t)] or ok
    kept = []
    for skill in skills:
        cases = []
        for traj in pool:
            occ = find_occurrence(skill, traj)
            if occ is not None:
                cases.append((arguments_from(skill, occ), task_of(traj) if task_of else traj))
            if len(cases) == config.max_replays:
                break
        checked = validate(skill, replay, cases)
        report["replays"] += checked.replays
        report["replay_successes"] += checked.replay_successes
        if checked.replays and checked.replay_rate >= config.min_replay_rate:
            kept.append(checked)
    report["validated"] = len(kept)
    report["validated_on"] = "held_out" if held_out else "source"
    return ExtractionResult(kept, report)

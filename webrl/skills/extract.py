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

Steps 1 and the page kinds are `webrl.skills.steps`, step 3 `webrl.skills.abstract`.

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
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from webrl.envs.skills import Skill
from webrl.skills.abstract import abstract, arguments_from, find_occurrence
from webrl.skills.steps import Occurrence, RawStep, is_success, page_key, page_kind, robust_steps
from webrl.types import Trajectory

__all__ = ["ExtractionConfig", "ExtractionResult", "extract_skills", "mine_candidates", "validate"]

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


@dataclass
class ExtractionResult:
    skills: list[Skill]
    report: dict[str, Any] = field(default_factory=dict)


def _signature(steps: Sequence[RawStep]) -> tuple:
    return tuple((s.kind, s.role, s.extra, page_key(page_kind(s.url))) for s in steps)


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

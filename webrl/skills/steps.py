"""Skill extraction's input (WebXSkill stage 1, step 1): a trajectory's turns as robust steps
(`RawStep`: kind, element role and name instead of an id, text, extra fields, page), runs of them
(`robust_steps`), windows of them (`Occurrence`), and page kinds (`page_kind`: a URL's path with
every digit-holding segment as "*"; `page_key` groups kinds that differ only in the last segment
of a path of >= 3 segments). See `webrl.skills.extract` for the pipeline."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional
from urllib.parse import urlparse

from webrl.envs.skills import STEP_KINDS
from webrl.types import Trajectory

_EXTRA = {"click": ("button", "clicks"), "scroll": ("direction", "amount"), "wait": ("amount",), "type": ("clear",)}
_DEFAULTS = {"button": "left", "clicks": 1, "clear": True}


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


def is_success(traj: Trajectory) -> bool:
    return traj.status == "ok" and (traj.info.task_reward == 1 or traj.reward == 1)


def page_kind(url: str) -> str:
    """The URL's path with digit-holding segments as "*" (query and host dropped)."""
    path = urlparse(url).path or "/"
    return "/".join("*" if re.search(r"\d", seg) else seg for seg in path.split("/"))


def page_key(kind: str) -> str:
    """The grouping key of a page kind: its last segment as "*" when the path is deep enough."""
    segs = kind.split("/")
    if len([s for s in segs if s]) >= 3 and segs[-1]:
        return "/".join(segs[:-1] + ["*"])
    return kind


def merge_kinds(kinds: Iterable[str]) -> str:
    kinds = sorted(set(kinds))
    return kinds[0] if len(kinds) == 1 else page_key(kinds[0])


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

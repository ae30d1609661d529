"""The two records a trajectory carries, with their checks: `TurnObservation` (`Turn.observation`,
what a turn was decided on) and `TrajectoryInfo` (`Trajectory.info`, where a trajectory came from
and how its episode ended).

Both are written to the trajectory log as JSON objects of their fields; `from_dict` accepts any
subset of the fields (logs written before a field existed) and refuses any other key or a value
of the wrong type with a message naming the field.
"""
from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Optional


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _numbers(n: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, (list, tuple)) and len(v) == n and all(map(_is_number, v))


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


_STR = (lambda v: isinstance(v, str), "a string")
_INT = (_is_int, "an integer")
_BOOL = (lambda v: isinstance(v, bool), "true or false")


def _element(v: Any) -> bool:
    return isinstance(v, dict) and _is_int(v.get("id")) and _numbers(4)(v.get("bbox"))


def _check_record(record: Any, checks: dict[str, tuple[Callable[[Any], bool], str]]) -> None:
    """Raise ValueError naming the first field of `record` whose value fails its check."""
    for name, (ok, what) in checks.items():
        value = getattr(record, name)
        if not ok(value):
            raise ValueError(f"{type(record).__name__}.{name} must be {what}, got {value!r}")


def _record_from_dict(cls: type, d: Any) -> Any:
    """`cls(**d)`, refusing anything but a dict of `cls`'s own field names."""
    if not isinstance(d, dict):
        raise ValueError(f"{cls.__name__} must be a JSON object, got {type(d).__name__}")
    allowed = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(d) - set(allowed))
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {unknown}; allowed: {allowed}")
    return cls(**d)


@dataclass
class TurnObservation:
    """What a turn was decided on, as the trajectory log keeps it (the screenshot itself is the
    turn's last image). One shape for every writer: rollouts, oracle demos, Online-Mind2Web imports.

    url, title, elements_text, feedback, last_action_error, tabs, step: the env observation's text
      fields, as `webrl.policy.Observation` holds them (feedback / last_action_error: of the
      previous action).
    screenshot_size: [width, height] of the screenshot the policy saw; None when it saw none.
    elements: the Set-of-Mark boxes (env `info["elements"]`, `WebEnv`'s spec card), each a
      dict with at least "id" (int) and "bbox" ([x, y, w, h] screenshot pixels), optionally
      "role", "name", "tag", "in_viewport", "options", "selected"; [] when not recorded.
    action_bbox: [x, y, w, h] of the element the turn's action targets; None for other actions.
    action_point: [x, y] the turn's action clicks at; None for other actions.
    om2w_action: an imported Online-Mind2Web step's action string when it is not a webrl action.
    skills / skill_guidance: the callable skills (grounded mode) and the retrieved skills'
      guidance (guided mode) the prompt showed at this turn; "" when none.
    tools: the tools the prompt listed at this turn (`webrl.envs.tools`); "" when none.
    """

    url: str = ""
    title: str = ""
    elements_text: str = ""
    feedback: str = ""
    last_action_error: str = ""
    tabs: str = ""
    step: int = 0
    screenshot_size: Optional[list[int]] = None
    elements: list[dict[str, Any]] = field(default_factory=list)
    action_bbox: Optional[list[float]] = None
    action_point: Optional[list[float]] = None
    om2w_action: str = ""
    skills: str = ""
    skill_guidance: str = ""
    tools: str = ""

    _CHECKS = {"url": _STR, "title": _STR, "elements_text": _STR, "feedback": _STR,
               "last_action_error": _STR, "tabs": _STR, "step": _INT,
               "screenshot_size": (_optional(_numbers(2)), "None or [width, height]"),
               "elements": (lambda v: isinstance(v, list), "a list"),
               "action_bbox": (_optional(_numbers(4)), "None or [x, y, w, h]"),
               "action_point": (_optional(_numbers(2)), "None or [x, y]"), "om2w_action": _STR,
               "skills": _STR, "skill_guidance": _STR, "tools": _STR}

    def __post_init__(self) -> None:
        _check_record(self, self._CHECKS)
        for i, e in enumerate(self.elements):
            if not _element(e):
                raise ValueError(f'TurnObservation.elements[{i}] must be a dict with an integer "id" and a '
                                 f'4-number "bbox", got {e!r}')
        # JSON has lists only: stored tuples would not compare equal after a save/load round trip
        self.elements = [{k: list(v) if isinstance(v, tuple) else v for k, v in e.items()} for e in self.elements]
        for name in ("screenshot_size", "action_bbox", "action_point"):
            if getattr(self, name) is not None:
                setattr(self, name, list(getattr(self, name)))

    @classmethod
    def from_dict(cls, d: Any) -> "TurnObservation":
        """From the JSON object `to_dict` writes (any subset of the fields)."""
        return _record_from_dict(cls, d)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class TrajectoryInfo:
    """Where a trajectory came from and how its episode ended.

    site / level / split / task_params / start_url: the task's `TaskSpec` provenance ("shop",
      0..2, "train" | "test", the generator's parameters, the first page); "" / 0 / {} unknown.
    started_at / finished_at: wall-clock (time.time()) bounds of the successful attempt.
    attempts: episode attempts made (a retry follows each infrastructure error); 0 = not a rollout.
    terminated: the episode ended on the agent's done action (or the task's own end);
      truncated: it ended on the step limit or an infrastructure error instead.
    task_reward: the env checker's outcome in [0, 1]; None when only a judge can tell
      (needs_judge) or the episode never reached the checker. `Trajectory.reward` stays None
      until a reward function (webrl.reward) turns this, or a judge's verdict, into a score.
    needs_judge: the task has no programmatic checker (live web).
    checker_details: what the env's checker found at the episode's end (`TaskReward.details`,
      e.g. {"links": ["c4"]}); {} without a checker. Kept apart from `Trajectory.reward_details`,
      which the reward function writes when it scores.
    reference_length: human reference steps of an Online-Mind2Web task (None: unknown).
    source: what wrote a trajectory not collected here, e.g. "online-mind2web-v2" for an import.
    recording: the HAR file the episode was recorded to or replayed from (env
      `info["recording"]`, `webrl.envs.recording`); "" when recording was off.
    stopped_by: what ended the episode on the rollout's side before the env did: "" (nothing),
      "parse_failures" (`rollout.stop_after_parse_failures` unparseable turns in a row).
    """

    site: str = ""
    level: int = 0
    split: str = ""
    task_params: dict[str, Any] = field(default_factory=dict)
    start_url: str = ""
    started_at: Optional[float] = None
    finished_at: Optional[float] = None
    attempts: int = 0
    terminated: bool = False
    truncated: bool = False
    task_reward: Optional[float] = None
    needs_judge: bool = False
    checker_details: dict[str, Any] = field(default_factory=dict)
    reference_length: Optional[int] = None
    source: str = ""
    recording: str = ""
    stopped_by: str = ""

    _CHECKS = {"site": _STR, "level": _INT, "split": _STR,
               "task_params": (lambda v: isinstance(v, dict), "a dict"), "start_url": _STR,
               "started_at": (_optional(_is_number), "None or a number"),
               "finished_at": (_optional(_is_number), "None or a number"), "attempts": _INT,
               "terminated": _BOOL, "truncated": _BOOL,
               "task_reward": (_optional(_is_number), "None or a number"), "needs_judge": _BOOL,
               "checker_details": (lambda v: isinstance(v, dict), "a dict"),
               "reference_length": (_optional(_is_int), "None or an integer"), "source": _STR,
               "recording": _STR, "stopped_by": _STR}

    def __post_init__(self) -> None:
        _check_record(self, self._CHECKS)

    @classmethod
    def from_dict(cls, d: Any) -> "TrajectoryInfo":
        """From the JSON object `to_dict` writes (any subset of the fields)."""
        return _record_from_dict(cls, d)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


TRAJECTORY_INFO_FIELDS = tuple(f.name for f in dataclasses.fields(TrajectoryInfo))


def check_info_field(setting: str, key: str) -> None:
    """Raise ValueError unless `key`, the value of config option `setting`, names a `TrajectoryInfo` field."""
    if key not in TRAJECTORY_INFO_FIELDS:
        raise ValueError(f"{setting} must name a Trajectory.info field, got {key!r}; "
                         f"allowed: {list(TRAJECTORY_INFO_FIELDS)}")

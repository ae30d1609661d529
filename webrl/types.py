"""Typed containers that travel between stages: `Image`, `Turn`, `Trajectory`, `Batch`, and the
two records they carry, `TurnObservation` (`Turn.observation`) and `TrajectoryInfo` (`Trajectory.info`).

Contract: a `Turn` holds the prompt token ids exactly as the model saw them, the
sampled response ids and their rollout log-probs; nothing is re-tokenised between rollout and
learner. Images travel as compressed bytes (PNG/JPEG), never as float tensors.

Trajectories serialise to one JSON object per trajectory plus one image file per image
(`save_trajectories` / `load_trajectories`), losslessly. The two records are written as JSON
objects of their fields; a file may hold any subset of them (older logs), never another key.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from webrl.actions import Action

TRAJECTORY_STATUSES = ("ok", "dropped")


@dataclass(frozen=True)
class Image:
    """A compressed image. `data` is PNG or JPEG bytes; `format` says which."""

    data: bytes
    format: str = "png"

    def __post_init__(self) -> None:
        if self.format not in ("png", "jpeg"):
            raise ValueError(f"Image.format must be 'png' or 'jpeg', got {self.format!r}")

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()[:16]

    def to_pil(self):
        import io

        from PIL import Image as PILImage

        return PILImage.open(io.BytesIO(self.data)).convert("RGB")

    @classmethod
    def from_pil(cls, img, format: str = "png") -> "Image":
        import io

        buf = io.BytesIO()
        img.save(buf, format="PNG" if format == "png" else "JPEG", quality=90)
        return cls(buf.getvalue(), format)

    @classmethod
    def from_array(cls, array, format: str = "png") -> "Image":
        """From a uint8 (H, W, 3) array."""
        from PIL import Image as PILImage

        return cls.from_pil(PILImage.fromarray(array), format)

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) read from the header without decoding the pixels."""
        import io

        from PIL import Image as PILImage

        with PILImage.open(io.BytesIO(self.data)) as im:
            return im.size


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

    _CHECKS = {"url": _STR, "title": _STR, "elements_text": _STR, "feedback": _STR,
               "last_action_error": _STR, "tabs": _STR, "step": _INT,
               "screenshot_size": (_optional(_numbers(2)), "None or [width, height]"),
               "elements": (lambda v: isinstance(v, list), "a list"),
               "action_bbox": (_optional(_numbers(4)), "None or [x, y, w, h]"),
               "action_point": (_optional(_numbers(2)), "None or [x, y]"), "om2w_action": _STR}

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

    _CHECKS = {"site": _STR, "level": _INT, "split": _STR,
               "task_params": (lambda v: isinstance(v, dict), "a dict"), "start_url": _STR,
               "started_at": (_optional(_is_number), "None or a number"),
               "finished_at": (_optional(_is_number), "None or a number"), "attempts": _INT,
               "terminated": _BOOL, "truncated": _BOOL,
               "task_reward": (_optional(_is_number), "None or a number"), "needs_judge": _BOOL,
               "checker_details": (lambda v: isinstance(v, dict), "a dict"),
               "reference_length": (_optional(_is_int), "None or an integer"), "source": _STR}

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


@dataclass
class Turn:
    """One agent step = one training sample.

    prompt_ids: (P,) token ids of the whole rendered prompt, exactly as fed to the model.
    response_ids: (R,) sampled token ids.
    logprobs: (R,) log-probs of response_ids under the sampling distribution (temperature
      applied) at rollout time. Empty when the turn was not sampled (e.g. an oracle demo).
    images: the images referenced by the prompt, in prompt order.
    response_text: decoded response; action: the parsed action, or None with parse_error set.
    feedback: the environment's text feedback after executing the action.
    policy_version: version of the weights that produced the turn (-1: not a model).
    decided_by: "generator", "heads", "oracle", ...
    observation: what the turn was decided on (`TurnObservation`); a dict of its fields is
      converted and checked.
    """

    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    images: list[Image] = field(default_factory=list)
    response_text: str = ""
    action: Optional[Action] = None
    parse_error: Optional[str] = None
    feedback: str = ""
    policy_version: int = -1
    decided_by: str = "generator"
    timings: dict[str, float] = field(default_factory=dict)
    observation: TurnObservation = field(default_factory=TurnObservation)

    def __post_init__(self) -> None:
        if self.logprobs and len(self.logprobs) != len(self.response_ids):
            raise ValueError(
                f"Turn.logprobs has {len(self.logprobs)} entries for {len(self.response_ids)} response ids")
        if not isinstance(self.observation, TurnObservation):
            self.observation = TurnObservation.from_dict(self.observation)


@dataclass
class Trajectory:
    """One episode of one task by one policy sample.

    group_id: trajectories of the same task in the same rollout share it (GRPO groups).
    reward: trajectory-level scalar, None until a reward function (webrl.reward
    `score_trajectories`) scores it; the env checker's own outcome is `info.task_reward`.
    reward_details: the reward function's account of `reward` (its rule, a judge's verdict);
    the env checker's own findings are `info.checker_details`.
    status "dropped" (with drop_reason) means infrastructure failed or the judge could not
    score it: it is never trained on and never counted as a task failure.
    info: provenance and episode end (`TrajectoryInfo`); a dict of its fields is converted
    and checked.
    """

    task_id: str
    group_id: str = ""
    goal: str = ""
    turns: list[Turn] = field(default_factory=list)
    reward: Optional[float] = None
    reward_details: dict[str, Any] = field(default_factory=dict)
    status: str = "ok"
    drop_reason: Optional[str] = None
    info: TrajectoryInfo = field(default_factory=TrajectoryInfo)

    def __post_init__(self) -> None:
        if self.status not in TRAJECTORY_STATUSES:
            raise ValueError(f"Trajectory.status must be one of {TRAJECTORY_STATUSES}, got {self.status!r}")
        if self.status == "dropped" and not self.drop_reason:
            raise ValueError("a dropped Trajectory needs a drop_reason")
        if not isinstance(self.info, TrajectoryInfo):
            self.info = TrajectoryInfo.from_dict(self.info)

    def drop(self, reason: str) -> None:
        self.status, self.drop_reason = "dropped", reason

    # -- (de)serialisation -------------------------------------------------------------------
    def to_json(self, image_dir: Path | str, image_prefix: str = "") -> dict[str, Any]:
        """A JSON-able dict; images are written to `image_dir` and referenced by file name."""
        image_dir = Path(image_dir)
        image_dir.mkdir(parents=True, exist_ok=True)
        turns = []
        for t in self.turns:
            d = {f.name: getattr(t, f.name) for f in dataclasses.fields(t)}
            names = []
            for img in t.images:
                name = f"{image_prefix}{img.digest}.{img.format}"
                path = image_dir / name
                if not path.exists():
                    tmp = path.with_suffix(path.suffix + ".tmp")
                    tmp.write_bytes(img.data)
                    os.replace(tmp, path)
                names.append(name)
            d["images"] = names
            d["action"] = t.action.to_dict() if t.action is not None else None
            d["observation"] = t.observation.to_dict()
            turns.append(d)
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["turns"] = turns
        d["info"] = self.info.to_dict()
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any], image_dir: Path | str) -> "Trajectory":
        """From `to_json`'s dict; `info` and each turn's `observation` may hold any subset of
        their fields (files written before a field existed), never an unknown key."""
        image_dir = Path(image_dir)
        d = dict(d)
        turns = []
        for i, td in enumerate(d.pop("turns")):
            td = dict(td)
            td["images"] = [Image((image_dir / n).read_bytes(), "jpeg" if n.endswith(".jpeg") else "png")
                            for n in td["images"]]
            td["action"] = Action.from_dict(td["action"]) if td["action"] is not None else None
            try:
                td["observation"] = TurnObservation.from_dict(td.get("observation", {}))
            except ValueError as e:
                raise ValueError(f"turn {i}: {e}") from e
            turns.append(Turn(**td))
        d["info"] = TrajectoryInfo.from_dict(d.get("info", {}))
        return cls(turns=turns, **d)


def save_trajectories(path: Path | str, trajectories: Iterable[Trajectory], append: bool = True) -> None:
    """Append trajectories as JSON lines to `path`; images go to `<path's folder>/images/`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a" if append else "w") as f:
        for traj in trajectories:
            f.write(json.dumps(traj.to_json(path.parent / "images"), ensure_ascii=False) + "\n")


def load_trajectories(path: Path | str) -> list[Trajectory]:
    """Read a file written by `save_trajectories`. A bad line raises naming file and line."""
    path = Path(path)
    out = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(Trajectory.from_json(json.loads(line), path.parent / "images"))
            except (ValueError, KeyError, TypeError, OSError) as e:
                raise ValueError(f"{path}:{lineno}: not a valid trajectory: {e}") from e
    return out


@dataclass
class Batch:
    """Right-padded tensors of B turn samples for the learner.

    Notation: B turn samples, T = longest prompt+response length in the batch.

    input_ids: (B, T) long, prompt then response, padded with pad_id.
    attention_mask: (B, T) long, 1 on real tokens.
    loss_mask: (B, T) float, 1 on response tokens that are trained on.
    old_logprobs: (B, T) float, rollout log-probs aligned with input_ids (0 off the mask).
    advantages: (B, T) float, the sample's advantage broadcast over its response tokens.
    ref_logprobs: (B, T) float or None, reference-policy log-probs for a KL term.
    group_index / trajectory_index: (B,) long, which group / trajectory each sample came from.
    policy_version: (B,) long, version of the weights that sampled each turn.
    pixel_values / image_grid_thw: the processor's image tensors for the batch, or None.
    """

    input_ids: Any
    attention_mask: Any
    loss_mask: Any
    old_logprobs: Any
    advantages: Any
    ref_logprobs: Any = None
    group_index: Any = None
    trajectory_index: Any = None
    policy_version: Any = None
    pixel_values: Any = None
    image_grid_thw: Any = None

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.attention_mask.sum())

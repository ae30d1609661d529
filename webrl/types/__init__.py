"""Typed containers that travel between stages: `Image`, `Turn`, `Trajectory`, `Batch`, and the
two records they carry, `TurnObservation` (`Turn.observation`) and `TrajectoryInfo`
(`Trajectory.info`), defined with their checks in webrl.types.records and exported here.

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
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from webrl.actions import Action
from webrl.types.records import TRAJECTORY_INFO_FIELDS, TrajectoryInfo, TurnObservation, check_info_field

__all__ = ["Batch", "Image", "TRAJECTORY_INFO_FIELDS", "TRAJECTORY_STATUSES", "Trajectory", "TrajectoryInfo", "Turn",
           "TurnObservation", "check_info_field", "load_trajectories", "save_trajectories"]

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
    skill_steps: when `action` is a `skill(...)` call (grounded skills), the steps the env ran for
      it, in order, as `info["skill"]["steps"]` gives them (`webrl.envs.skill_run`: index, step,
      action, ok, feedback, error); [] for every other turn. A record only: the learner trains on
      `response_ids`, the tokens the agent generated (the one `skill(...)` call), never on the
      skill's expansion, so nothing downstream reads this field to build a `Batch`.
    tool_call: when `action` is a `tool(...)` call, the env's record of it (`info["tool"]`,
      `webrl.envs.tool_run`: name, kind, args, ok, error, url, status, result_chars, truncated, steps);
      {} for every other turn. A record only, like `skill_steps` (the result text itself is in
      `feedback`); a separate field because a tool call is one result, not a list of steps.
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
    skill_steps: list[dict[str, Any]] = field(default_factory=list)
    tool_call: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.logprobs and len(self.logprobs) != len(self.response_ids):
            raise ValueError(
                f"Turn.logprobs has {len(self.logprobs)} entries for {len(self.response_ids)} response ids")
        if not (isinstance(self.skill_steps, list) and all(isinstance(s, dict) for s in self.skill_steps)):
            raise ValueError(f"Turn.skill_steps must be a list of step dicts, got {self.skill_steps!r}")
        if not isinstance(self.tool_call, dict):
            raise ValueError(f"Turn.tool_call must be a dict (info['tool']; {{}} = no tool call), got {self.tool_call!r}")
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

"""Shared pieces of the offline-dataset readers: rows, images, points, turns, the conversion report.

Contract of every reader (`webrl.datasets.<format>.load(path, report, **options)`): it returns
webrl `Trajectory`s whose turns carry the screenshot (compressed bytes, as stored), a typed
`Action`, the observation fields the data has (goal, url, elements, ...), `decided_by="dataset"`
and `response_text` = `dataset_response(action, reasoning)`; every step it cannot map is
counted and listed in the `ConversionReport` with its file, line or row, step index and reason,
and the trajectory keeps its other steps. Structural corruption (a line that is not JSON, a
row without the keys its format needs) raises `DatasetError` naming file and line instead.

Response convention (the one `webrl.recipes.resim` uses for its reasoning demos): reasoning,
when the data has it, goes first as ``<think>\\n...\\n</think>\\n``, then the call in the compact
grammar inside ``<tool_call>`` -- exactly what a `GeneratorPolicy` with action_format="compact"
and think=True answers, so `make_format("compact").parse(turn.response_text) == turn.action`.
A policy with another format re-renders it (`render_for_policy`): the prompt builder keeps a
non-oracle turn's text as it is, so SFT targets and history must already be in its format.

Points: `to_pixels` maps a point given in a source space to pixels of the stored screenshot:
"normalized_1000" (0..1000 on both axes, Qwen3-VL and the processed GUI-360 copies),
"pixels" (absolute pixels of the screenshot itself) or "pixels" of another resolution
(`source_size` given: rescaled by stored / source size).
"""
from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from webrl.actions import Action
from webrl.types import Image, Trajectory, Turn, TurnObservation

POINT_SPACES = ("normalized_1000", "pixels")
DECIDED_BY = "dataset"


class DatasetError(ValueError):
    """A file or row that is structurally not in the format it claims (the message says where)."""


class Unmappable(ValueError):
    """A step with no webrl action: reported and skipped (the message is the report's reason)."""


@dataclass
class SkippedStep:
    """One step that did not become a turn."""

    file: str
    row: int
    """1-based line of a JSON-lines file, 0-based index of a JSON list or parquet row."""
    step: int
    """The step's index within its trajectory (as the data numbers it when it does)."""
    reason: str


@dataclass
class FormatCounts:
    """rows read, trajectories built, steps seen, steps mapped to turns, steps skipped."""

    rows: int = 0
    trajectories: int = 0
    steps: int = 0
    mapped: int = 0
    skipped: int = 0


@dataclass
class ConversionReport:
    """What a conversion did, per format, and every step it could not map."""

    counts: dict[str, FormatCounts] = field(default_factory=dict)
    skipped: list[SkippedStep] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    unrenderable: int = 0
    """Turns `render_for_policy` could not write in the policy's format (left with no target)."""

    def of(self, fmt: str) -> FormatCounts:
        return self.counts.setdefault(fmt, FormatCounts())

    def skip(self, fmt: str, file: Path | str, row: int, step: int, reason: str) -> None:
        self.of(fmt).skipped += 1
        self.skipped.append(SkippedStep(str(file), row, step, reason))

    def merge(self, other: "ConversionReport") -> None:
        for fmt, c in other.counts.items():
            mine = self.of(fmt)
            for name in ("rows", "trajectories", "steps", "mapped", "skipped"):
                setattr(mine, name, getattr(mine, name) + getattr(c, name))
        self.skipped.extend(other.skipped)
        self.files.extend(other.files)
        self.unrenderable += other.unrenderable

    def summary(self) -> dict[str, Any]:
        """JSON-able: {"files", "formats": {fmt: counts}, "skipped": [{file, row, step, reason}], "unrenderable"}."""
        return {"files": list(self.files), "unrenderable": self.unrenderable,
                "formats": {k: vars(v).copy() for k, v in self.counts.items()},
                "skipped": [vars(s).copy() for s in self.skipped]}


@dataclass
class ConversionResult:
    trajectories: list[Trajectory]
    report: ConversionReport


# -- rows ------------------------------------------------------------------------------------------
def read_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number, row dict) of a .jsonl (1-based lines), .json (a list: 0-based indices; an
    object: row 0) or .parquet file (0-based rows). A line that is not a JSON object raises."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist()):
            yield i, row
        return
    if suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as e:
            raise DatasetError(f"{path}: not valid JSON: {e}") from e
        rows = data if isinstance(data, list) else [data]
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise DatasetError(f"{path}[{i}]: expected a JSON object, got {type(row).__name__}")
            yield i, row
        return
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise DatasetError(f"{path}:{lineno}: not valid JSON: {e}") from e
            if not isinstance(row, dict):
                raise DatasetError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            yield lineno, row


def require(row: dict[str, Any], keys: Sequence[str], where: str) -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise DatasetError(f"{where}: missing key(s) {missing}; has {sorted(row)[:20]}")


def as_json(value: Any, where: str) -> Any:
    """A value some datasets store as a JSON string (Mind2Web attributes, candidates)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as e:
            raise DatasetError(f"{where}: not valid JSON: {e}") from e
    return value


# -- images ----------------------------------------------------------------------------------------
_DATA_URL = re.compile(r"^data:image/(png|jpe?g|webp);base64,(.*)$", re.S)


def _image_format(data: bytes) -> str:
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    raise ValueError("not PNG or JPEG bytes")


def image_from(value: Any, base: Path) -> Image:
    """An `Image` from bytes, {"bytes": ...} / {"path": ...} (HF datasets' Image), a
    data:image/...;base64 URL, or a file path relative to `base`. Other encodings (webp)
    are re-encoded as PNG. Raises ValueError / OSError when it cannot."""
    if isinstance(value, dict):
        if value.get("bytes"):
            value = value["bytes"]
        elif value.get("path"):
            value = value["path"]
        elif isinstance(value.get("url"), str):
            value = value["url"]
        else:
            raise ValueError(f"image object without bytes, path or url: {sorted(value)}")
    if isinstance(value, str):
        m = _DATA_URL.match(value)
        if m:
            value = base64.b64decode(m.group(2))
        else:
            value = (base / value.replace("\\", "/")).read_bytes()
    if not isinstance(value, (bytes, bytearray)):
        raise ValueError(f"cannot read an image from {type(value).__name__}")
    data = bytes(value)
    try:
        return Image(data, _image_format(data))
    except ValueError:
        import io

        from PIL import Image as PILImage

        with PILImage.open(io.BytesIO(data)) as im:
            return Image.from_pil(im.convert("RGB"))


# -- points ----------------------------------------------------------------------------------------
def to_pixels(point: Any, space: str, size: Optional[tuple[int, int]],
              source_size: Optional[tuple[int, int]] = None) -> tuple[float, float]:
    """[x, y] in `space` -> pixels of a screenshot of `size` (width, height).

    normalized_1000: x * W / 1000; pixels with source_size (W0, H0): x * W / W0; pixels
    without: unchanged. Raises ValueError for a malformed point or one outside the image.
    """
    if space not in POINT_SPACES:
        raise ValueError(f"point space must be one of {POINT_SPACES}, got {space!r}")
    ok = (isinstance(point, (list, tuple)) and len(point) == 2
          and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in point))
    if not ok:
        raise ValueError(f"a point is [x, y] with two numbers, got {point!r}")
    x, y = float(point[0]), float(point[1])
    if space == "normalized_1000":
        if size is None:
            raise ValueError("a normalised point needs the screenshot's size")
        if not (0 <= x <= 1000 and 0 <= y <= 1000):
            raise ValueError(f"normalised point {list(point)} is outside 0..1000")
        return x * size[0] / 1000, y * size[1] / 1000
    if source_size is not None and size is not None:
        x, y = x * size[0] / source_size[0], y * size[1] / source_size[1]
    if size is not None and not (0 <= x <= size[0] and 0 <= y <= size[1]):
        raise ValueError(f"point ({x:g}, {y:g}) is outside the {size[0]}x{size[1]} screenshot")
    return x, y


# -- turns -----------------------------------------------------------------------------------------
def dataset_response(action: Action, reasoning: str = "", action_format: Any = None, geometry: Any = None) -> str:
    """`<think>\\n{reasoning}\\n</think>\\n` (when there is reasoning) + the call in `action_format`
    (an `ActionFormat`; default compact). Raises ValueError when the format cannot write it."""
    from webrl.policy.formats import CompactFormat

    call = (action_format or CompactFormat()).render(action, geometry)
    reasoning = reasoning.strip()
    return f"<think>\n{reasoning}\n</think>\n{call}" if reasoning else call


def dataset_turn(action: Action, image: Optional[Image], reasoning: str = "", **observation: Any) -> Turn:
    """A converted step: `observation` holds `TurnObservation` fields; screenshot_size is filled in."""
    if image is not None:
        observation.setdefault("screenshot_size", list(image.size))
    return Turn(images=[image] if image is not None else [], response_text=dataset_response(action, reasoning),
                action=action, decided_by=DECIDED_BY, observation=TurnObservation(**observation))


def reasoning_of(turn: Turn) -> str:
    """The reasoning a dataset turn's response carries ("" without a <think> block)."""
    m = re.match(r"\s*<think>\n?(.*?)\n?</think>", turn.response_text, re.S)
    return m.group(1) if m else ""


def render_for_policy(trajectories: Sequence[Trajectory], builder: Any) -> tuple[list[Trajectory], int]:
    """Copies of `trajectories` whose dataset turns answer in `builder`'s action format (a
    `PromptBuilder`), reasoning kept only when `builder.config.think`; (trajectories, turns the
    format cannot write). Such a turn gets an empty response: the SFT converter skips it as a
    target and the prompt shows nothing for it rather than another format's call."""
    import copy

    out, unwritable = [], 0
    for traj in trajectories:
        traj = copy.copy(traj)
        turns = []
        for turn in traj.turns:
            turn = copy.copy(turn)
            if turn.decided_by == DECIDED_BY and turn.action is not None:
                geometry = builder.geometry(turn.images[-1]) if turn.images else None
                reasoning = reasoning_of(turn) if builder.config.think else ""
                try:
                    turn.response_text = dataset_response(turn.action, reasoning, builder.format, geometry)
                except ValueError:
                    turn.response_text, unwritable = "", unwritable + 1
            turns.append(turn)
        traj.turns = turns
        out.append(traj)
    return out, unwritable

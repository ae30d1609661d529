"""ShareGPT-with-images records (the LLaMA-Factory convention) -> webrl `Trajectory`s.

The layout `webrl.policy.sft.load_sharegpt` reads (a JSON list, or JSON lines, of
``{"messages"|"conversations": [{"role"|"from", "content"|"value"}], "images": [paths]}``, each
`<image>` taking the next image, paths relative to the file), which is also what the OpenWebRL
recipe's Stage 2 writes for LLaMA-Factory (github OpenWebRL/OpenWebRL `sft/README.md`: assistant
turns "<think>...</think>\\n\\n<tool_call>{json}</tool_call>", feedback as user
"<tool_response>...</tool_response>" turns). `load_sharegpt` keeps such a record's prompt text as
it is; this reader instead rebuilds a trajectory so the rollout's own prompt renders it.

One record = one trajectory; one assistant message = one turn. Its screenshot is the last image
before it; its goal the first user message's text (images removed); its feedback the tool /
`<tool_response>` text after the previous assistant message. The call is read as, in order: an
OpenWebRL tool call (`webrl.datasets.openwebrl.tool_action`), then webrl's own formats (Set-of-
Mark "browser" JSON, "computer_use" JSON, compact/pointer grammar). Points of OpenWebRL and
computer_use calls are in `point_space` (default "normalized_1000"; "pixels" = screenshot pixels).
A message none of these reads is reported and skipped.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

from webrl.actions import Action
from webrl.datasets.common import (POINT_SPACES, ConversionReport, DatasetError, Unmappable, dataset_turn,
                                   image_from, read_rows)
from webrl.datasets.openwebrl import TOOLS, call_from_text, strip_think, tool_action
from webrl.policy.computer_use import ComputerUseFormat
from webrl.policy.formats import THINK_RE, TOOL_CALL_RE, PointerFormat, SetOfMarkFormat
from webrl.policy.images import ImageGeometry
from webrl.types import Image, Trajectory, TrajectoryInfo

FORMAT = "sharegpt"
_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system",
          "tool": "tool", "function": "tool", "observation": "tool"}
_RESPONSE = re.compile(r"^\s*<tool_response>\s*(.*?)\s*</tool_response>\s*$", re.S)


def _json_tool_name(text: str) -> Optional[str]:
    """The "name" of the reply's one JSON tool call, None when it has no such call."""
    calls = TOOL_CALL_RE.findall(THINK_RE.sub("", text))
    try:
        obj = json.loads(calls[0]) if len(calls) == 1 else None
    except ValueError:
        return None
    return obj.get("name") if isinstance(obj, dict) else None


def parse_call(text: str, image: Optional[Image], point_space: str) -> tuple[Action, str]:
    """(action, reasoning) of one assistant message; raises `Unmappable` with what was tried."""
    size = image.size if image is not None else None
    reasoning = strip_think(TOOL_CALL_RE.sub("", text))
    name = _json_tool_name(text)
    if name in TOOLS or name == "call_user":
        _, (name, args) = call_from_text(text)
        return tool_action(name, args, size, point_space), reasoning
    # webrl's formats; a "resized" geometry whose resized size is the screenshot's own reads pixels
    geometry = ImageGeometry(size[0], size[1], size[0], size[1]) if size is not None else None
    space = "normalized_1000" if point_space == "normalized_1000" else "resized"
    errors = []
    for fmt in (SetOfMarkFormat(), ComputerUseFormat(space), PointerFormat()):
        parsed = fmt.parse(text, geometry)
        if isinstance(parsed, Action):
            return parsed, reasoning
        errors.append(f"{fmt.name}: {parsed.message}")
    raise Unmappable(("no known action in the reply (" + "; ".join(errors) + ")")[:400])


def _messages(record: dict, base: Path, where: str) -> list[tuple[str, str, list[Image]]]:
    turns = record.get("messages", record.get("conversations"))
    if not isinstance(turns, list):
        raise DatasetError(f"{where}: needs a 'messages' or 'conversations' list")
    paths = list(record.get("images") or [])
    out, used = [], 0
    for j, m in enumerate(turns):
        role = _ROLES.get(m.get("role", m.get("from"))) if isinstance(m, dict) else None
        content = m.get("content", m.get("value")) if isinstance(m, dict) else None
        if role is None or not isinstance(content, str):
            raise DatasetError(f"{where}: message {j} needs a known role and string content, got {m!r}"[:300])
        n = content.count("<image>")
        if used + n > len(paths):
            raise DatasetError(f"{where}: more <image> tags than images ({len(paths)})")
        try:
            images = [image_from(p, base) for p in paths[used:used + n]]
        except (ValueError, OSError) as e:
            raise DatasetError(f"{where}: message {j}: unreadable image: {e}") from e
        used += n
        out.append((role, content.replace("<image>", ""), images))
    if used != len(paths):
        raise DatasetError(f"{where}: {len(paths)} images but {used} <image> tags")
    return out


def load(path: Path, report: ConversionReport, point_space: str = "normalized_1000") -> list[Trajectory]:
    """Trajectories of a ShareGPT-with-images file (module docstring)."""
    if point_space not in POINT_SPACES:
        raise ValueError(f"sharegpt point_space must be one of {POINT_SPACES}, got {point_space!r}")
    out, counts = [], report.of(FORMAT)
    for row_no, record in read_rows(path):
        counts.rows += 1
        msgs = _messages(record, path.parent, f"{path}:{row_no}")
        goal = next((text.strip() for role, text, _ in msgs if role == "user"), "")
        traj = Trajectory(task_id=str(record.get("id", f"{path.stem}[{row_no}]")), goal=goal,
                          info=TrajectoryInfo(source=FORMAT))
        image, feedback, step = None, "", 0
        for role, text, images in msgs:
            if images:
                image = images[-1]
            if role == "tool" or (role == "user" and _RESPONSE.match(text) and step):
                m = _RESPONSE.match(text)
                feedback = m.group(1) if m else text.strip()
            if role != "assistant":
                continue
            counts.steps += 1
            try:
                action, reasoning = parse_call(text, image, point_space)
                traj.turns.append(dataset_turn(action, image, reasoning, step=step, feedback=feedback))
                counts.mapped += 1
            except Unmappable as e:
                report.skip(FORMAT, path, row_no, step, str(e))
            step, feedback = step + 1, ""
        counts.trajectories += 1
        out.append(traj)
    return out

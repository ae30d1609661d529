"""GUI-360 (Windows Office trajectories, hybrid GUI + API actions) -> webrl `Trajectory`s.

Read: the data card (github 2020-qqtcg/GUI-360 `data_card_readme.md`, the HF card of
vyokky/GUI-360: raw `train|test|fail/data/**/*.jsonl`, processed `action_prediction*` JSON) and the
processed copy's card (HF cua-lite/GUI-360 README: parquet rows of images + OpenAI-style
messages + metadata, coordinates normalised to [0, 1000]). Layouts accepted (.jsonl/.json/.parquet):

- raw step rows: ``{"execution_id", "request", "step_id", "evaluation": {"complete": "yes"|"no"},
  "step": {"screenshot_clean": <path>, "thought", "subtask", "action": {"action_type": "GUI"|"API",
  "function", "args", "rectangle", "coordinate_x", "coordinate_y", "control_label"},
  "control_infos": {"uia_controls_info": [{"label", "control_text", "control_type",
  "control_rect": [l, t, r, b]}]}, "status"}}``; grouped by execution_id, ordered by step_id;
  points are pixels of screenshot_clean (paths relative to the file, its images/ or `image_root`).
- processed action-prediction rows: ``{"id", "images": [...], "conversation"|"messages": [user
  (with the image), assistant "<reasoning> <tool_call>{"function", "args", "status"}</tool_call>"]}``;
  each row is a one-step trajectory (its history exists only as text in the prompt); points are
  "normalized_1000" when the row has "metadata" (the cua-lite copy), else "pixels"; the goal is
  the text after "The instruction is:" in the prompt when present.

Hybrid action space -> `Action`:
  click{coordinate, button, double} -> click_at (double: clicks=2)
  type{coordinate, keys, clear_current_text} -> type(keys, clear=clear_current_text) into the
    focused control (the focusing click at `coordinate` is kept as observation.action_point);
    keys that are one pywinauto chord ("{ENTER}", "^a", "{VK_CONTROL}c") -> press("Enter" | "Control+a")
  drag{start_coordinate, end_coordinate} (left button, no held key) -> drag
  wheel_mouse_input{coordinate, wheel_dist} -> scroll_at(up if wheel_dist > 0 else down,
    amount = min(1, |wheel_dist| * WHEEL_NOTCH_FRACTION)): a notch's share of the viewport is not in
    the data; 0.1 is our choice.
Skipped and reported: every API action (table2markdown, insert_excel_table, select_table_range,
set_cell_value, auto_fill, reorder_columns, Word/PowerPoint COM calls, ...: no browser equivalent),
click with a held key or the 'x' button, drag with a held key or the right button, type whose keys
mix text with pywinauto key codes (+ ^ % ~ { }: the typed text is not the literal), steps without
a function (status FINISH). No closing stop() is added: the data has no done action.

Reasoning: step.thought (raw) or the assistant text before the call (processed). Elements: the
UIA controls with their Set-of-Mark labels as ids (element-id formats can address them), the
target's rectangle as observation.action_bbox. task_reward: 1 for evaluation.complete "yes", 0
for "no", None when absent.
"""
from __future__ import annotations

import json
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any, Optional

from webrl.actions import Action, ActionError
from webrl.datasets.common import (POINT_SPACES, ConversionReport, DatasetError, Unmappable, dataset_turn,
                                   image_from, read_rows, require, to_pixels)
from webrl.datasets.openwebrl import strip_think
from webrl.types import Trajectory, TrajectoryInfo

FORMAT = "gui360"
GUI_FUNCTIONS = ("click", "type", "drag", "wheel_mouse_input")
WHEEL_NOTCH_FRACTION = 0.1
_KEYS = {"ENTER": "Enter", "TAB": "Tab", "ESC": "Escape", "ESCAPE": "Escape", "BACKSPACE": "Backspace",
         "BACK": "Backspace", "DELETE": "Delete", "DEL": "Delete", "UP": "ArrowUp", "DOWN": "ArrowDown",
         "LEFT": "ArrowLeft", "RIGHT": "ArrowRight", "HOME": "Home", "END": "End", "PGUP": "PageUp",
         "PGDN": "PageDown", "SPACE": " ", "F2": "F2", "F4": "F4", "F5": "F5", "F9": "F9"}
_MODIFIERS = {"^": "Control", "%": "Alt", "+": "Shift", "{VK_CONTROL}": "Control", "{VK_SHIFT}": "Shift",
              "{VK_MENU}": "Alt", "{VK_LCONTROL}": "Control", "{VK_LSHIFT}": "Shift"}
_CHORD = re.compile(r"^((?:\{VK_L?(?:CONTROL|SHIFT|MENU)\}|[\^%+])*)(\{[A-Z0-9_]+\}|[^{}^%+~])$")
_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)
_INSTRUCTION = re.compile(r"The instruction is:\s*\n(.*?)\n\s*\n", re.S)


def _chord(keys: str) -> Optional[str]:
    """pywinauto chord -> webrl press text ("^a" -> "Control+a", "{ENTER}" -> "Enter"); None if not one."""
    m = _CHORD.match(keys)
    if not m:
        return None
    mods = re.findall(r"\{VK_L?(?:CONTROL|SHIFT|MENU)\}|[\^%+]", m.group(1))
    key = m.group(2)
    if key.startswith("{"):
        key = _KEYS.get(key[1:-1])
        if key is None:
            return None
    elif not mods:
        return None  # a single plain character is text, not a chord
    return "+".join([_MODIFIERS[x] for x in mods] + [key])


def gui_action(function: str, args: Any, size: Optional[tuple[int, int]], space: str,
               action_type: str = "GUI") -> Action:
    """One GUI-360 call -> `Action`; raises `Unmappable` with the reason."""
    if not function:
        raise Unmappable("no function (the step only reports a status)")
    if action_type == "API":
        raise Unmappable(f"API action {function!r} has no browser equivalent")
    if function not in GUI_FUNCTIONS:
        raise Unmappable(f"{function!r} is not one of the GUI functions {GUI_FUNCTIONS} (an API call or "
                         f"unknown): no browser equivalent")
    if not isinstance(args, dict):
        raise Unmappable(f"{function}: args must be an object, got {args!r}"[:200])

    def point(key: str) -> tuple[float, float]:
        try:
            return to_pixels(args.get(key), space, size)
        except ValueError as e:
            raise Unmappable(f"{function}.{key}: {e}") from e

    try:
        if function == "click":
            if args.get("pressed") or args.get("button", "left") not in ("left", "right", "middle"):
                raise Unmappable(f"click with button={args.get('button')!r}, pressed={args.get('pressed')!r}")
            return Action.click_at(*point("coordinate"), button=args.get("button", "left"),
                                   clicks=2 if args.get("double") else 1)
        if function == "type":
            keys = str(args["keys"])
            chord = _chord(keys)
            if chord is not None:
                return Action("press", text=chord)
            if re.search(r"[{}^%+~]", keys):
                raise Unmappable(f"type keys {keys!r} mix text with pywinauto key codes")
            return Action.type_text(keys, clear=bool(args.get("clear_current_text", False)))
        if function == "drag":
            if args.get("key_hold") or args.get("button", "left") != "left":
                raise Unmappable(f"drag with button={args.get('button')!r}, key_hold={args.get('key_hold')!r}")
            (x, y), (tx, ty) = point("start_coordinate"), point("end_coordinate")
            return Action("drag", x=x, y=y, to_x=tx, to_y=ty)
        dist = float(args["wheel_dist"])
        x, y = point("coordinate")
        return Action("scroll_at", direction="up" if dist > 0 else "down",
                      amount=min(1.0, abs(dist) * WHEEL_NOTCH_FRACTION), x=x, y=y)
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, Unmappable):
            raise
        raise Unmappable(f"{function}: missing or malformed argument {e}") from e
    except ActionError as e:
        raise Unmappable(f"{function}: {e}") from e


def _rect(value: Any) -> Optional[list[float]]:
    """[l, t, r, b] or {"left", "top", "right", "bottom"} -> [x, y, w, h]."""
    if isinstance(value, dict) and all(k in value for k in ("left", "top", "right", "bottom")):
        value = [value["left"], value["top"], value["right"], value["bottom"]]
    if isinstance(value, (list, tuple)) and len(value) == 4 and all(isinstance(v, (int, float)) for v in value):
        l, t, r, b = map(float, value)
        return [l, t, r - l, b - t] if r > l and b > t else None
    return None


def _elements(step: dict) -> tuple[list[dict], str]:
    controls = (step.get("control_infos") or {}).get("uia_controls_info") or []
    out = []
    for i, c in enumerate(controls):
        bbox = _rect(c.get("control_rect"))
        label = c.get("label", i)
        if bbox is None or not str(label).isdigit():
            continue
        out.append({"id": int(label), "bbox": bbox, "role": str(c.get("control_type", "")),
                    "name": str(c.get("control_text", ""))})
    if len({e["id"] for e in out}) != len(out):
        return [], ""  # labels that do not identify a control are no Set-of-Mark ids
    return out, "\n".join(f'[{e["id"]}] {e["role"] or "control"} "{e["name"]}"' for e in out)


def _focus_point(action: Action, args: dict, size: tuple[int, int], space: str) -> Optional[list[float]]:
    """The control a `type` focuses first (GUI-360 types at a coordinate; webrl into the focused field)."""
    if action.kind != "type" or "coordinate" not in args:
        return None
    try:
        return list(to_pixels(args["coordinate"], space, size))
    except ValueError:
        return None


def _message_text(message: dict) -> str:
    content = message.get("value", message.get("content"))
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def _screenshot(step: dict, path: Path, image_root: Optional[str]):
    name = step.get("screenshot_clean")
    if not name:
        raise Unmappable("no screenshot_clean")
    bases = [Path(image_root)] if image_root else []
    bases += [path.parent, path.parent / "images"]
    for base in bases:
        if (base / str(name).replace("\\", "/")).exists():
            return image_from(name, base)
    raise Unmappable(f"screenshot {name} not found under {', '.join(map(str, bases))}")


def _raw_trajectories(rows: list[tuple[int, dict]], path: Path, report: ConversionReport,
                      point_space: str, image_root: Optional[str]) -> list[Trajectory]:
    episodes: "OrderedDict[str, list]" = OrderedDict()
    for row_no, row in rows:
        require(row, ("execution_id", "request", "step"), f"{path}:{row_no}")
        if not isinstance(row["step"], dict):
            raise DatasetError(f"{path}:{row_no}: 'step' must be an object")
        episodes.setdefault(str(row["execution_id"]), []).append((row_no, row))
    counts, out = report.of(FORMAT), []
    for execution_id, steps in episodes.items():
        steps.sort(key=lambda r: r[1].get("step_id", 0))
        first = steps[0][1]
        complete = (first.get("evaluation") or {}).get("complete")
        traj = Trajectory(task_id=execution_id, goal=str(first["request"]), info=TrajectoryInfo(
            source=FORMAT, site=str(first.get("app_domain", "")),
            task_params={k: first[k] for k in ("template",) if k in first},
            task_reward={"yes": 1.0, "no": 0.0}.get(complete)))
        for row_no, row in steps:
            counts.steps += 1
            step, index = row["step"], row.get("step_id", len(traj.turns))
            if isinstance(index, bool) or not str(index).lstrip("-").isdigit():
                raise DatasetError(f"{path}:{row_no}: step_id must be an integer, got {index!r}")
            index = int(index)
            act = step.get("action") or {}
            try:
                image = _screenshot(step, path, image_root)
                action = gui_action(str(act.get("function") or ""), act.get("args") or {}, image.size, point_space,
                                    str(act.get("action_type", "GUI")))
            except Unmappable as e:
                report.skip(FORMAT, path, row_no, index, str(e))
                continue
            except (ValueError, OSError) as e:
                report.skip(FORMAT, path, row_no, index, f"unreadable screenshot: {e}")
                continue
            elements, elements_text = _elements(step)
            traj.turns.append(dataset_turn(
                action, image, str(step.get("thought") or ""), step=index, elements=elements,
                elements_text=elements_text, action_bbox=_rect(act.get("rectangle")),
                action_point=_focus_point(action, act.get("args") or {}, image.size, point_space)))
            counts.mapped += 1
        counts.trajectories += 1
        out.append(traj)
    return out


def _processed_trajectory(row_no: int, row: dict, path: Path, report: ConversionReport,
                          point_space: Optional[str]) -> Trajectory:
    where = f"{path}:{row_no}"
    messages = row.get("conversation", row.get("conversations", row.get("messages")))
    if not isinstance(messages, list) or not row.get("images"):
        raise DatasetError(f"{where}: a processed GUI-360 row needs 'images' and 'conversation' or 'messages'")
    user = next((m for m in messages if m.get("from", m.get("role")) in ("human", "user")), None)
    reply = next((m for m in messages if m.get("from", m.get("role")) in ("gpt", "assistant")), None)
    if user is None or reply is None:
        raise DatasetError(f"{where}: needs a user and an assistant message")
    prompt, answer = _message_text(user), _message_text(reply)
    m = _INSTRUCTION.search(prompt)
    goal = (m.group(1) if m else prompt.replace("<image>", "")).strip()
    space = point_space or ("normalized_1000" if "metadata" in row else "pixels")
    traj = Trajectory(task_id=str(row.get("id", f"{path.stem}[{row_no}]")), goal=goal,
                      info=TrajectoryInfo(source=FORMAT))
    counts = report.of(FORMAT)
    counts.steps += 1
    try:
        image = image_from(row["images"][0], path.parent)
        calls = _TOOL_CALL.findall(answer)
        if len(calls) != 1:
            raise Unmappable(f"expected one <tool_call>{{json}}</tool_call>, found {len(calls)}")
        call = json.loads(calls[0])
        if not isinstance(call, dict):
            raise Unmappable(f"tool call is not a JSON object: {calls[0][:100]}")
        action = gui_action(str(call.get("function") or ""), call.get("args") or {}, image.size, space)
        traj.turns.append(dataset_turn(action, image, strip_think(_TOOL_CALL.sub("", answer)), step=0))
        counts.mapped += 1
    except Unmappable as e:
        report.skip(FORMAT, path, row_no, 0, str(e))
    except (ValueError, OSError) as e:
        report.skip(FORMAT, path, row_no, 0, f"unreadable step: {e}")
    counts.trajectories += 1
    return traj


def load(path: Path, report: ConversionReport, point_space: Optional[str] = None,
         image_root: Optional[str] = None) -> list[Trajectory]:
    """Trajectories of a GUI-360 file (raw step rows or processed rows; module docstring).

    point_space: override where points live ("pixels" | "normalized_1000"); default per layout.
    image_root: folder the raw rows' screenshot paths are relative to (default: the file's folder)."""
    if point_space is not None and point_space not in POINT_SPACES:
        raise ValueError(f"gui360 point_space must be one of {POINT_SPACES}, got {point_space!r}")
    raw, out = [], []
    for row_no, row in read_rows(path):
        report.of(FORMAT).rows += 1
        if "execution_id" in row or "step" in row:
            raw.append((row_no, row))
        else:
            out.append(_processed_trajectory(row_no, row, path, report, point_space))
    return _raw_trajectories(raw, path, report, point_space or "pixels", image_root) + out

"""The OpenWebRL recipe's SFT trajectories -> webrl `Trajectory`s.

Read (github OpenWebRL/OpenWebRL): `sft/README.md` and `sft/convert_to_openai_messages.py`
(the released `OpenWebRL_SFT_trajectories.jsonl` and the canonical episodes its Stage 1 writes),
`openwebrl/env/web_env.py` (the tool names, their arguments and how `point_2d` is mapped to the
viewport). Two layouts are accepted, one JSON object per line:

- canonical episode (Stage 1): ``{"tools": [...], "messages": [system, user, assistant, tool,
  ...], "metadata": {"task_id", "rollout_idx", ...}}``; user/tool content is a string or a list
  of ``{"type": "text"}`` / ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``
  parts; an assistant message has its reasoning as content (``<think>...</think>``) and one
  entry in ``tool_calls`` (``{"function": {"name": "click", "arguments": {"point_2d": [x, y]}}}``,
  arguments an object or a JSON string).
- released per-turn rows: ``{"rollout_idx", "metadata": {"task_id", "turn_index", "images":
  [<current screenshot as a data URL>], "messages": [...skeleton, assistant content with
  <tool_call>{json}</tool_call>...]}}``; rows are grouped by (task_id, rollout_idx) and ordered by
  turn_index; turn t's screenshot is row t's image and its response is the t-th assistant
  message of the episode's longest skeleton (as Stage 1 reassembles episodes).

Tool -> `Action` (points in `point_space`, default "normalized_1000": Qwen3-VL's 0..1000, the
recipe's base model; "pixels" for absolute screenshot pixels):
  click{point_2d, clicks, button} -> click_at;  write{message} -> type(message) (the recipe
  clears the field first, as webrl's clear=true);  scroll{direction, amount, point_2d?} ->
  scroll / scroll_at;  press_keys{keys, is_hotkey} -> press("A+B") for a hotkey or one key;
  wait{seconds} -> wait;  done{response} -> answer (stop() when empty);  goto_url{url} -> goto;
  go_back -> back;  hover{point_2d} -> hover_at;  drag{start_point_2d, end_point_2d} -> drag;
  new_tab -> new_tab;  switch_tab{tab_index} -> switch_tab;  close_tab -> close_tab.
Skipped and reported: call_user (no agent-side equivalent), press_keys of a sequence of several
keys or with presses > 1 (one webrl press is one chord), unknown tools, malformed arguments.

Observation fields: goal = metadata.intent, else the first user text; url = metadata.start_url
on the first turn (the recipe shows URLs inside its own prompt text, which webrl re-renders);
feedback = the tool message after the previous call (the env's "Succeed: ..." text).
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

from webrl.actions import Action, ActionError
from webrl.datasets.common import (POINT_SPACES, ConversionReport, DatasetError, Unmappable, dataset_turn,
                                   image_from, read_rows, to_pixels)
from webrl.types import Image, Trajectory, TrajectoryInfo

FORMAT = "openwebrl"
TOOLS = ("click", "write", "scroll", "press_keys", "wait", "done", "goto_url", "go_back", "hover", "drag",
         "new_tab", "switch_tab", "close_tab")
_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)
_VISION = "<|vision_start|><|image_pad|><|vision_end|>"


def tool_action(name: str, args: Any, size: Optional[tuple[int, int]], point_space: str) -> Action:
    """One OpenWebRL tool call -> `Action`; raises `Unmappable` with the reason."""
    if not isinstance(args, dict):
        raise Unmappable(f"{name}: arguments must be an object, got {args!r}"[:200])

    def point(key: str) -> tuple[float, float]:
        try:
            return to_pixels(args.get(key), point_space, size)
        except ValueError as e:
            raise Unmappable(f"{name}.{key}: {e}") from e

    try:
        if name == "click":
            return Action.click_at(*point("point_2d"), button=args.get("button", "left"),
                                   clicks=int(args.get("clicks", 1)))
        if name == "write":
            return Action.type_text(str(args["message"]))
        if name == "scroll":
            direction, amount = args.get("direction", "down"), float(args.get("amount", 0.5))
            if args.get("point_2d"):
                x, y = point("point_2d")
                return Action("scroll_at", direction=direction, amount=amount, x=x, y=y)
            return Action.scroll(direction, amount)
        if name == "press_keys":
            keys = args.get("keys", [])
            keys = [keys] if isinstance(keys, str) else list(keys)
            if not keys or int(args.get("presses", 1)) != 1 or (len(keys) > 1 and not args.get("is_hotkey")):
                raise Unmappable(f"press_keys {keys} (is_hotkey={args.get('is_hotkey', False)}, "
                                 f"presses={args.get('presses', 1)}) is not one chord")
            return Action("press", text="+".join(map(str, keys)))
        if name == "wait":
            return Action("wait", amount=float(args.get("seconds", 3)))
        if name == "done":
            response = str(args.get("response", ""))
            return Action.answer(response) if response else Action.stop()
        if name == "goto_url":
            return Action("goto", text=str(args["url"]))
        if name == "go_back":
            return Action("back")
        if name == "hover":
            x, y = point("point_2d")
            return Action("hover_at", x=x, y=y)
        if name == "drag":
            (x, y), (tx, ty) = point("start_point_2d"), point("end_point_2d")
            return Action("drag", x=x, y=y, to_x=tx, to_y=ty)
        if name == "new_tab":
            return Action("new_tab")
        if name == "switch_tab":
            return Action("switch_tab", tab=int(args["tab_index"]))
        if name == "close_tab":
            return Action("close_tab")
    except (KeyError, TypeError) as e:
        raise Unmappable(f"{name}: missing or malformed argument {e}") from e
    except ActionError as e:
        raise Unmappable(f"{name}: {e}") from e
    if name == "call_user":
        raise Unmappable("call_user asks a human: no webrl action")
    raise Unmappable(f"unknown tool {name!r}; known: {', '.join(TOOLS)}")


def call_from_text(text: str) -> tuple[str, tuple[str, Any]]:
    """(reasoning, (tool name, arguments)) of an assistant text with one JSON tool call."""
    calls = _TOOL_CALL.findall(text)
    if len(calls) != 1:
        raise Unmappable(f"expected one <tool_call>{{json}}</tool_call>, found {len(calls)}")
    try:
        obj = json.loads(calls[0])
        name, args = obj["name"], obj.get("arguments", {})
    except (ValueError, KeyError, TypeError) as e:
        raise Unmappable(f"tool call is not {{\"name\", \"arguments\"}} JSON: {e}") from e
    return _TOOL_CALL.sub("", text), (name, args)


def strip_think(text: str) -> str:
    """Reasoning text without its <think> tags (the call removed beforehand)."""
    return re.sub(r"</?think>", "", text or "").strip()


def _texts_and_images(content: Any, base: Path) -> tuple[str, list[Image]]:
    if isinstance(content, str):
        return content.replace(_VISION, ""), []
    text, images = [], []
    for part in content or []:
        if part.get("type") == "text":
            text.append(part.get("text", ""))
        elif part.get("type") in ("image_url", "image"):
            images.append(image_from(part.get("image_url", part.get("image")), base))
    return "".join(text), images


def _episode_turns(messages: list[dict], screenshots: Optional[list[Image]], base: Path) -> list[dict]:
    """Per assistant message: {"image", "reasoning", "call" | "error", "feedback", "text"} in order.

    `screenshots` (released rows) replaces the images the messages would carry inline."""
    steps, current, feedback, goal_text, shot_index = [], None, "", None, 0
    for m in messages:
        role = m.get("role")
        if role in ("user", "tool"):
            text, images = _texts_and_images(m.get("content"), base)
            if screenshots is not None:
                n = (m.get("content") or "").count(_VISION) if isinstance(m.get("content"), str) else 0
                images, shot_index = screenshots[shot_index:shot_index + n], shot_index + n
            if role == "user" and goal_text is None:
                goal_text = text
            if role == "tool":
                feedback = text.strip()
            if images:
                current = images[-1]
        elif role == "assistant":
            step = {"image": current, "feedback": feedback, "goal_text": goal_text or ""}
            try:
                if m.get("tool_calls"):
                    if len(m["tool_calls"]) != 1:
                        raise Unmappable(f"{len(m['tool_calls'])} tool calls in one turn")
                    fn = m["tool_calls"][0]["function"]
                    args = json.loads(fn["arguments"]) if isinstance(fn.get("arguments"), str) else fn.get("arguments")
                    step["reasoning"], step["call"] = strip_think(m.get("content") or ""), (fn["name"], args)
                else:
                    rest, call = call_from_text(m.get("content") or "")
                    step["reasoning"], step["call"] = strip_think(rest), call
            except Unmappable as e:
                step["error"] = str(e)
            except (KeyError, TypeError, ValueError) as e:
                step["error"] = f"malformed tool call: {e}"
            steps.append(step)
            feedback, current = "", None
    return steps


def _trajectory(task_id: str, steps: list[dict], meta: dict, path: Path, rows: list[int], report: ConversionReport,
                point_space: str) -> Trajectory:
    """rows[t]: the file row step t is reported under (the episode's one row, or turn t's row)."""
    goal = str(meta.get("intent") or (steps[0]["goal_text"].strip() if steps else ""))
    reward = meta.get("reward")
    traj = Trajectory(task_id=task_id, goal=goal, info=TrajectoryInfo(
        source=FORMAT, start_url=str(meta.get("start_url") or ""),
        task_reward=float(reward) if isinstance(reward, (int, float)) and not isinstance(reward, bool) else None))
    counts = report.of(FORMAT)
    for t, step in enumerate(steps):
        counts.steps += 1
        image = step["image"]
        try:
            if "error" in step:
                raise Unmappable(step["error"])
            action = tool_action(*step["call"], image.size if image is not None else None, point_space)
        except Unmappable as e:
            report.skip(FORMAT, path, rows[min(t, len(rows) - 1)], t, str(e))
            continue
        traj.turns.append(dataset_turn(action, image, step["reasoning"], step=t, feedback=step["feedback"],
                                       url=traj.info.start_url if t == 0 else ""))
        counts.mapped += 1
    counts.trajectories += 1
    return traj


def load(path: Path, report: ConversionReport, point_space: str = "normalized_1000") -> list[Trajectory]:
    """Trajectories of an OpenWebRL SFT file (either layout; see the module docstring)."""
    if point_space not in POINT_SPACES:
        raise ValueError(f"openwebrl point_space must be one of {POINT_SPACES}, got {point_space!r}")
    out, episodes = [], defaultdict(list)
    for row_no, row in read_rows(path):
        report.of(FORMAT).rows += 1
        where = f"{path}:{row_no}"
        if isinstance(row.get("messages"), list):  # canonical episode
            meta = row.get("metadata") or {}
            steps = _episode_turns(row["messages"], None, path.parent)
            task_id = f"{meta.get('task_id', row_no)}#{meta.get('rollout_idx', 0)}"
            out.append(_trajectory(task_id, steps, meta, path, [row_no], report, point_space))
            continue
        meta = row.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("messages"), list):
            raise DatasetError(f"{where}: an OpenWebRL row needs 'messages' (canonical episode) or "
                               f"'metadata.messages' (released per-turn row); has {sorted(row)[:20]}")
        episodes[(str(meta.get("task_id")), str(row.get("rollout_idx", 0)))].append((row_no, row))
    for (task_id, rollout), rows in episodes.items():
        rows.sort(key=lambda r: r[1]["metadata"].get("turn_index", 0))
        first_row, longest = rows[0][0], max(rows, key=lambda r: len(r[1]["metadata"]["messages"]))[1]
        try:
            shots = [image_from(r["metadata"]["images"][0], path.parent) for _, r in rows]
        except (KeyError, IndexError, TypeError, ValueError, OSError) as e:
            raise DatasetError(f"{path}:{first_row}: episode {task_id}#{rollout}: a row without its one "
                               f"screenshot in metadata.images: {e}") from e
        steps = _episode_turns(longest["metadata"]["messages"], shots, path.parent)
        out.append(_trajectory(f"{task_id}#{rollout}", steps, longest["metadata"], path, [r for r, _ in rows],
                               report, point_space))
    return out

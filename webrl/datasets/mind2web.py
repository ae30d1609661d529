"""Mind2Web (offline) and Multimodal-Mind2Web -> webrl `Trajectory`s with Set-of-Mark elements.

Read: the Mind2Web data description (HF osunlp/Mind2Web card: train/test JSON, each task
``{"annotation_id", "confirmed_task", "website", "domain", "subdomain", "action_reprs",
"actions": [{"action_uid", "operation": {"op": "CLICK"|"TYPE"|"SELECT", "original_op", "value"},
"pos_candidates": [...], "neg_candidates": [...]}]}``, a candidate ``{"tag", "backend_node_id",
"attributes": <JSON string with "bounding_box_rect": "x,y,w,h", ...>}``) and a Multimodal-Mind2Web
reader (github harpreetsahota204/mind2web_to_fiftyone `mind2web_to_fiftyone.py`: one row per
action with "annotation_id", "action_uid", "target_action_index", "confirmed_task",
"operation", "pos_candidates" / "neg_candidates" as JSON strings and a "screenshot" image whose
pixels are the bounding boxes' frame). Accepted: task objects (.json list or .jsonl) and action
rows (.jsonl/.json/.parquet); an action of a task object may carry its own "screenshot".

Elements: every candidate with a positive bounding box (positive and negative ones, deduplicated
by backend_node_id), ordered top-to-bottom then left-to-right and numbered 0..n-1 -- not in the
data's order, which lists the positive candidate first and would give the answer away as id 0.
With a screenshot, boxes that do not intersect it are dropped and `in_viewport` says whether a
box lies wholly inside. Each element: {"id", "bbox": [x, y, w, h] screenshot pixels, "tag",
"role" (= tag), "name"}; name = the first of aria_label, title, placeholder, value, alt, name
in its attributes (the element's inner text is only in the page HTML, which is not read).
elements_text lists them as ``[3] button "Search"``.

Operation -> `Action` on the positive candidate's id:
  CLICK -> click(id);  original_op HOVER -> hover(id);  original_op ENTER -> press("Enter") (the
  element is focused by the step before it in the data);  TYPE -> type(id, value);
  SELECT -> select(id, value).
Skipped and reported: an action with no positive candidate, or whose positive candidate has no
box (or one outside the screenshot), or an unknown op. Mind2Web has no done action and no URLs.
"""
from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any, Optional

from webrl.actions import Action
from webrl.datasets.common import (ConversionReport, DatasetError, Unmappable, as_json, dataset_turn, image_from,
                                   read_rows, require)
from webrl.types import Image, Trajectory, TrajectoryInfo

FORMAT = "mind2web"
_NAME_KEYS = ("aria_label", "title", "placeholder", "value", "alt", "name")


def _candidate(raw: Any, where: str) -> dict:
    cand = as_json(raw, where)
    if not isinstance(cand, dict):
        raise DatasetError(f"{where}: a candidate must be an object, got {type(cand).__name__}")
    attributes = as_json(cand.get("attributes") or {}, f"{where}.attributes")
    return {**cand, "attributes": attributes if isinstance(attributes, dict) else {}}


def _bbox(cand: dict) -> Optional[list[float]]:
    rect = cand["attributes"].get("bounding_box_rect", cand.get("bounding_box_rect"))
    if isinstance(rect, str):
        try:
            rect = [float(v) for v in rect.split(",")]
        except ValueError:
            return None
    if not (isinstance(rect, (list, tuple)) and len(rect) == 4):
        return None
    try:
        x, y, w, h = map(float, rect)
    except (TypeError, ValueError):
        return None  # reported as a step without a usable box
    return [x, y, w, h] if w > 0 and h > 0 else None


def _node_id(cand: dict) -> str:
    return str(cand.get("backend_node_id", cand["attributes"].get("backend_node_id", "")))


def _intersects(box: list[float], size: tuple[int, int]) -> bool:
    x, y, w, h = box
    return x < size[0] and y < size[1] and x + w > 0 and y + h > 0


def _elements(candidates: list[dict], size: Optional[tuple[int, int]]) -> tuple[list[dict], dict[str, int]]:
    """Set-of-Mark elements and backend_node_id -> element id."""
    seen: "OrderedDict[str, dict]" = OrderedDict()
    for c in candidates:
        box, node = _bbox(c), _node_id(c)
        if box is None or node in seen:
            continue
        if size is not None and not _intersects(box, size):
            continue
        seen[node] = {**c, "bbox": box}
    ordered = sorted(seen.values(), key=lambda c: (c["bbox"][1], c["bbox"][0], _node_id(c)))
    elements, ids = [], {}
    for i, c in enumerate(ordered):
        x, y, w, h = c["bbox"]
        name = next((str(c["attributes"][k]) for k in _NAME_KEYS if c["attributes"].get(k)), "")
        inside = size is None or (x >= 0 and y >= 0 and x + w <= size[0] and y + h <= size[1])
        elements.append({"id": i, "bbox": [x, y, w, h], "tag": str(c.get("tag", "")),
                         "role": str(c.get("tag", "")), "name": name, "in_viewport": inside})
        ids[_node_id(c)] = i
    return elements, ids


def _elements_text(elements: list[dict]) -> str:
    return "\n".join(f'[{e["id"]}] {e["tag"] or "element"} "{e["name"]}"' for e in elements)


def _operation_action(operation: dict, element: int) -> Action:
    op = str(operation.get("op", "")).upper()
    original = str(operation.get("original_op", op)).upper()
    value = operation.get("value", "")
    if original == "HOVER":
        return Action("hover", element=element)
    if original == "ENTER":
        return Action("press", text="Enter")
    if op == "CLICK":
        return Action.click(element)
    if op == "TYPE":
        return Action.type_text(str(value), element=element)
    if op == "SELECT":
        return Action.select(element, str(value))
    raise Unmappable(f"unknown operation {operation!r}; known ops CLICK, TYPE, SELECT (HOVER, ENTER)")


def _turn(action: dict, index: int, base: Path, where: str):
    operation = as_json(action.get("operation"), f"{where}.operation")
    if not isinstance(operation, dict):
        raise DatasetError(f"{where}: 'operation' must be an object {{op, value}}")
    pos = [_candidate(c, f"{where}.pos_candidates") for c in as_json(action.get("pos_candidates") or [], where)]
    neg = [_candidate(c, f"{where}.neg_candidates") for c in as_json(action.get("neg_candidates") or [], where)]
    image: Optional[Image] = None
    if action.get("screenshot") is not None:
        try:
            image = image_from(action["screenshot"], base)
        except (ValueError, OSError) as e:
            raise Unmappable(f"unreadable screenshot: {e}") from e
    elements, ids = _elements(pos + neg, image.size if image is not None else None)
    target = next((ids[_node_id(c)] for c in pos if _node_id(c) in ids), None)
    if target is None:
        raise Unmappable("no positive candidate with a bounding box" +
                         (" inside the screenshot" if image is not None and pos else ""))
    act = _operation_action(operation, target)
    return dataset_turn(act, image, step=index, elements=elements, elements_text=_elements_text(elements),
                        action_bbox=list(elements[target]["bbox"]))


def _trajectory(task: dict, actions: list[tuple[int, dict]], path: Path, report: ConversionReport) -> Trajectory:
    traj = Trajectory(task_id=str(task.get("annotation_id", "")), goal=str(task.get("confirmed_task", "")),
                      info=TrajectoryInfo(source=FORMAT, site=str(task.get("website", "")),
                                          task_params={k: task[k] for k in ("domain", "subdomain") if k in task}))
    counts = report.of(FORMAT)
    for index, (row_no, action) in enumerate(actions):
        counts.steps += 1
        try:
            turn = _turn(action, index, path.parent, f"{path}:{row_no} action {index}")
        except Unmappable as e:
            report.skip(FORMAT, path, row_no, index, str(e))
            continue
        traj.turns.append(turn)
        counts.mapped += 1
    counts.trajectories += 1
    return traj


def load(path: Path, report: ConversionReport) -> list[Trajectory]:
    """Trajectories of a Mind2Web task file or a Multimodal-Mind2Web action-row file."""
    out, rows_by_task = [], OrderedDict()
    for row_no, row in read_rows(path):
        report.of(FORMAT).rows += 1
        if isinstance(row.get("actions"), list):  # a task with its actions
            out.append(_trajectory(row, [(row_no, a) for a in row["actions"]], path, report))
            continue
        require(row, ("annotation_id", "operation", "pos_candidates"), f"{path}:{row_no}")
        rows_by_task.setdefault(str(row["annotation_id"]), []).append((row_no, row))
    for rows in rows_by_task.values():
        rows.sort(key=lambda r: int(r[1].get("target_action_index", 0)))
        out.append(_trajectory(rows[0][1], rows, path, report))
    return out

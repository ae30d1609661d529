"""Online-Mind2Web v2 result format: export a run for the official WebJudge script, import back.

Layout (one folder per task; the official `src/run.py` reads exactly this)::

    <dir>/<task_id>/result.json          schema "online-mind2web-v2"
    <dir>/<task_id>/trajectory/<digest>.png|.jpeg   screenshots (each distinct one once)
    <dir>/<task_id>/webrl_trajectory.json          the full webrl Trajectory (our sidecar)

result.json::

    {"schema_version": "online-mind2web-v2", "task_id": ..., "task": ..., "reference_length": N,
     "agent_final_answer": "...",
     "action_history": [{"step": 0, "screenshot": "<file in trajectory/>", "url": "...",
                         "action": "click(12) -> Succeed: click on <button> 'Search'",
                         "action_status": "SUCCESS" | "FAILED" | null, "thought": "..."}, ...]}

The last step is the agent's done action, `TASK_COMPLETE -> ANSWER: <answer>`; the official
script drops the last step from the factual history, so an episode that ended without a done
action (step limit) gets a closing `TASK_INCOMPLETE -> NO ANSWER` step on its last screenshot
rather than losing its real last action.

Import reads the sidecar when present: the round trip is then lossless (token ids, log-probs,
rewards and every image compare equal). Without it (results written by another agent), a
Trajectory is rebuilt from the v2 fields: actions that are compact-grammar calls parse back
into `Action`s; every step's action string is kept in `observation.om2w_action`.

Choices where the format is silent: screenshot files are named by content digest (what the
`Trajectory` serialiser writes), so the sidecar and result.json share one copy of each image;
`action_status` is "FAILED" when the env feedback starts with "Fail"/"Error", "SUCCESS" when it
starts with "Succeed", else null; `reference_length` comes from `info.reference_length`,
else `info.task_params["reference_length"]`, else the number of steps; on import a
`reference_length` that is not an integer is left out (None).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterable, Optional

from webrl.actions import Action, parse_compact
from webrl.reward.base import called_done, final_answer, turn_screenshot
from webrl.types import Image, Trajectory, TrajectoryInfo, Turn, TurnObservation

SCHEMA = "online-mind2web-v2"
SIDECAR = "webrl_trajectory.json"
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.-]+$")


class ExportError(ValueError):
    """A trajectory that cannot be written in the v2 format (the message says why)."""


def _status(feedback: str) -> Optional[str]:
    head = feedback.strip().lower()
    if head.startswith(("fail", "error")):
        return "FAILED"
    if head.startswith("succeed"):
        return "SUCCESS"
    return None


def _reference_length(traj: Trajectory) -> int:
    for value in (traj.info.reference_length, traj.info.task_params.get("reference_length")):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return len(traj.turns)


def _step_action(turn: Turn) -> str:
    if turn.action is not None and turn.action.is_terminal:
        return f"TASK_COMPLETE -> ANSWER: {turn.action.text or ''}"
    if turn.action is None:
        return f"INVALID_OUTPUT -> {turn.parse_error or 'no action'}"
    feedback = " ".join(turn.feedback.split())
    return f"{turn.action.to_compact()} -> {feedback}" if feedback else turn.action.to_compact()


def result_json(traj: Trajectory, image_names: list[Optional[str]]) -> dict[str, Any]:
    """The v2 document; `image_names[i]` is turn i's screenshot file (None: reuse the previous)."""
    steps, last_name = [], None
    for i, turn in enumerate(traj.turns):
        last_name = image_names[i] or last_name
        if last_name is None:
            raise ExportError(f"trajectory {traj.task_id}: turn {i} has no screenshot and none precedes it")
        steps.append({"step": i, "screenshot": last_name, "url": turn.observation.url,
                      "action": _step_action(turn), "action_status": _status(turn.feedback),
                      "thought": turn.response_text or None})
    if not called_done(traj):
        steps.append({"step": len(steps), "screenshot": last_name, "url": steps[-1]["url"] if steps else "",
                      "action": "TASK_INCOMPLETE -> NO ANSWER", "action_status": None, "thought": None})
    return {"schema_version": SCHEMA, "task_id": traj.task_id, "task": traj.goal,
            "reference_length": _reference_length(traj), "agent_final_answer": final_answer(traj),
            "action_history": steps}


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value, ensure_ascii=False, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def export_trajectory(traj: Trajectory, out_dir: str | os.PathLike) -> Path:
    """Write one trajectory to `<out_dir>/<task_id>/`; returns that folder."""
    if not _SAFE_ID.match(traj.task_id) or traj.task_id in (".", ".."):
        raise ExportError(f"task_id {traj.task_id!r} is not a safe folder name (letters, digits, _ . -)")
    if not traj.turns:
        raise ExportError(f"trajectory {traj.task_id} has no turns")
    task_dir = Path(out_dir) / traj.task_id
    shots_dir = task_dir / "trajectory"
    sidecar = traj.to_json(shots_dir)  # writes every image once, named <digest>.<format>
    names = [f"{img.digest}.{img.format}" if (img := turn_screenshot(t)) else None for t in traj.turns]
    document = result_json(traj, names)
    _write_json(task_dir / SIDECAR, sidecar)
    _write_json(task_dir / "result.json", document)
    return task_dir


def export_run(trajectories: Iterable[Trajectory], out_dir: str | os.PathLike) -> list[Path]:
    """Export several trajectories; task ids must be distinct (the format has one per task)."""
    trajectories = list(trajectories)
    ids = [t.task_id for t in trajectories]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ExportError(f"the v2 format holds one trajectory per task; repeated task ids: {dupes[:5]}")
    return [export_trajectory(t, out_dir) for t in trajectories]


def _turn_from_step(step: dict[str, Any], shots_dir: Path) -> Optional[Turn]:
    action_text = str(step.get("action", ""))
    if action_text.startswith("TASK_INCOMPLETE"):
        return None
    shot = step.get("screenshot")
    images = []
    if shot:
        data = (shots_dir / shot).read_bytes()
        images = [Image(data, "jpeg" if data[:2] == b"\xff\xd8" else "png")]
    observation = TurnObservation(url=str(step.get("url") or ""), om2w_action=action_text)
    action, feedback = None, ""
    if action_text.startswith("TASK_COMPLETE"):
        action = Action.answer(action_text.split("ANSWER:", 1)[1].strip() if "ANSWER:" in action_text else "")
    else:
        call, _, feedback = action_text.partition(" -> ")
        parsed = parse_compact(call)
        action = parsed if isinstance(parsed, Action) else None
        feedback = feedback if action is not None else ""
    return Turn(images=images, response_text=step.get("thought") or "", action=action,
                parse_error=None if action is not None else "not a webrl action", feedback=feedback,
                observation=observation, decided_by="imported")


def import_trajectory(task_dir: str | os.PathLike) -> Trajectory:
    """Read one `<task_id>/` folder (sidecar if present, else the v2 fields)."""
    task_dir = Path(task_dir)
    if (task_dir / SIDECAR).exists():
        return Trajectory.from_json(json.loads((task_dir / SIDECAR).read_text(encoding="utf-8")),
                                    task_dir / "trajectory")
    result = json.loads((task_dir / "result.json").read_text(encoding="utf-8"))
    if result.get("schema_version") != SCHEMA:
        raise ValueError(f"{task_dir}/result.json: schema_version {result.get('schema_version')!r}, "
                         f"expected {SCHEMA!r}")
    turns = [t for s in result.get("action_history", []) if (t := _turn_from_step(s, task_dir / "trajectory"))]
    answer = result.get("agent_final_answer") or ""
    if turns and turns[-1].action is not None and turns[-1].action.kind == "answer":
        turns[-1].action = Action.answer(answer or turns[-1].action.text or "")
    length = result.get("reference_length")
    length = length if isinstance(length, int) and not isinstance(length, bool) else None
    return Trajectory(task_id=str(result["task_id"]), goal=str(result.get("task", "")), turns=turns,
                      info=TrajectoryInfo(reference_length=length, source=SCHEMA))


def import_run(out_dir: str | os.PathLike) -> list[Trajectory]:
    """Every `<task_id>/result.json` folder under `out_dir`, sorted by task id."""
    root = Path(out_dir)
    return [import_trajectory(p.parent) for p in sorted(root.glob("*/result.json"))]

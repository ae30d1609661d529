"""Online-Mind2Web v2 export / import: the format the official script reads, and a lossless round trip."""
import json

import pytest

from webrl.actions import Action
from webrl.reward.om2w import ExportError, export_run, import_run, import_trajectory, SIDECAR
from webrl.types import TrajectoryInfo

from .helpers import done_trajectory, screenshot, trajectory


def full_trajectory(task_id="a1b2", **kw):
    traj = done_trajectory(task_id=task_id, **kw)
    traj.turns[1].images = [screenshot(0), screenshot(90, fmt="jpeg")]  # history image + a JPEG current one
    traj.turns[1].feedback = "Fail: element 5 is not editable"
    traj.reward, traj.reward_details = 1.0, {"rule": "judged", "judge": "webjudge"}
    traj.info = TrajectoryInfo(reference_length=7, task_params={"website": "https://shop.example"})
    return traj


def test_round_trip_is_lossless(tmp_path):
    originals = [full_trajectory("a1b2"), trajectory([Action.click(2), None], task_id="c3d4")]
    export_run(originals, tmp_path)
    assert import_run(tmp_path) == originals  # dataclass equality: every field, token, log-prob and image byte


def test_result_json_is_the_v2_schema(tmp_path):
    [task_dir] = export_run([full_trajectory()], tmp_path)
    doc = json.loads((task_dir / "result.json").read_text())
    assert set(doc) == {"schema_version", "task_id", "task", "reference_length", "agent_final_answer", "action_history"}
    assert doc["schema_version"] == "online-mind2web-v2" and doc["task_id"] == "a1b2"
    assert doc["task"] == "Find a blue mug under 10 euros" and doc["reference_length"] == 7
    assert doc["agent_final_answer"] == "The blue mug costs 8 euros"
    steps = doc["action_history"]
    assert [s["step"] for s in steps] == [0, 1, 2]
    assert steps[0]["action"] == "click(3) -> Succeed: click on <button> 'Search'" and steps[0]["action_status"] == "SUCCESS"
    assert steps[1]["action_status"] == "FAILED"
    assert steps[-1]["action"] == "TASK_COMPLETE -> ANSWER: The blue mug costs 8 euros"
    assert steps[0]["thought"] == "click(3)" and steps[0]["url"] == "http://127.0.0.1:8000/"
    # every step's screenshot is a file in trajectory/ holding that turn's current screenshot
    assert (task_dir / "trajectory" / steps[1]["screenshot"]).read_bytes() == screenshot(90, fmt="jpeg").data
    assert steps[1]["screenshot"].endswith(".jpeg") and steps[0]["screenshot"].endswith(".png")
    # the official script drops the last step (the done action) and keeps these as factual actions
    assert [s["action"] for s in steps[:-1]][0].startswith("click(3)")


def test_episode_without_done_gets_a_closing_step(tmp_path):
    [task_dir] = export_run([trajectory([Action.click(1), Action.click(2)], task_id="x")], tmp_path)
    steps = json.loads((task_dir / "result.json").read_text())["action_history"]
    assert len(steps) == 3 and steps[-1]["action"] == "TASK_INCOMPLETE -> NO ANSWER"
    assert steps[-1]["screenshot"] == steps[1]["screenshot"]
    # both real actions stay in the factual history the official script reads (all but the last step)
    assert [s["action"].split(" ->")[0] for s in steps[:-1]] == ["click(1)", "click(2)"]


def test_import_without_the_sidecar_keeps_what_v2_carries(tmp_path):
    original = full_trajectory()
    [task_dir] = export_run([original], tmp_path)
    (task_dir / SIDECAR).unlink()
    back = import_trajectory(task_dir)
    assert back.task_id == original.task_id and back.goal == original.goal
    assert [t.action for t in back.turns] == [t.action for t in original.turns]
    assert [t.feedback for t in back.turns[:2]] == [t.feedback for t in original.turns[:2]]
    assert [t.images[-1] for t in back.turns] == [t.images[-1] for t in original.turns]
    assert [t.response_text for t in back.turns] == [t.response_text for t in original.turns]
    assert back.info.reference_length == 7 and back.info.source == "online-mind2web-v2"


def test_foreign_action_strings_are_kept(tmp_path):
    task = tmp_path / "t9"
    (task / "trajectory").mkdir(parents=True)
    (task / "trajectory" / "0000.png").write_bytes(screenshot(5).data)
    doc = {"schema_version": "online-mind2web-v2", "task_id": "t9", "task": "Book a table", "reference_length": 3,
           "agent_final_answer": "done", "action_history": [
               {"step": 0, "screenshot": "0000.png", "url": "u", "action": "button 'Search' -> CLICK", "thought": None},
               {"step": 1, "screenshot": "0000.png", "url": "u", "action": "TASK_COMPLETE -> ANSWER: done",
                "thought": "finished"}]}
    (task / "result.json").write_text(json.dumps(doc))
    [back] = import_run(tmp_path)
    assert back.turns[0].action is None and back.turns[0].observation.om2w_action == "button 'Search' -> CLICK"
    assert back.turns[1].action == Action.answer("done") and back.turns[1].images[0].format == "png"


def test_export_refuses_unsafe_ids_duplicates_and_empty_trajectories(tmp_path):
    with pytest.raises(ExportError, match="safe folder name"):
        export_run([done_trajectory(task_id="../escape")], tmp_path)
    with pytest.raises(ExportError, match="repeated task ids"):
        export_run([done_trajectory(task_id="a"), done_trajectory(task_id="a")], tmp_path)
    with pytest.raises(ExportError, match="no turns"):
        export_run([trajectory([], task_id="empty")], tmp_path)

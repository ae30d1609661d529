"""GUI-360 rows written here in the released layouts (raw step rows, processed rows), converted."""
import json

import pytest

from tests.datasets import png
from webrl.actions import Action
from webrl.datasets import DatasetError, load_offline
from webrl.policy.formats import make_format


def _step(execution_id, step_id, function, args, action_type="GUI", thought="", **extra):
    return {"execution_id": execution_id, "app_domain": "word", "request": f"Task {execution_id}",
            "template": "blank.docx", "step_id": step_id, "total_steps": 4,
            "evaluation": {"complete": "yes" if execution_id == "word_a" else "no"},
            "step": {"screenshot_clean": f"{execution_id}/action_step{step_id}.png", "thought": thought,
                     "subtask": "", "status": "CONTINUE",
                     "action": {"action_type": action_type, "function": function, "args": args, **extra},
                     "control_infos": {"uia_controls_info": [
                         {"label": 2, "control_text": "Bold", "control_type": "Button", "control_rect": [40, 30, 60, 50]},
                         {"label": 1, "control_text": "Home", "control_type": "TabItem", "control_rect": [0, 0, 30, 10]}]}}}


def write_raw(tmp_path):
    for name in ("word_a", "word_b"):
        (tmp_path / name).mkdir()
        for i in range(1, 5):
            (tmp_path / name / f"action_step{i}.png").write_bytes(png(200, 100))
    rows = [  # interleaved and out of order: grouping by execution_id, ordering by step_id
        _step("word_a", 1, "click", {"coordinate": [50, 40], "button": "left", "double": False},
              thought="Click Bold.", rectangle={"left": 40, "top": 30, "right": 60, "bottom": 50}),
        _step("word_b", 2, "click", {"coordinate": [10, 20], "double": True}),
        _step("word_a", 3, "set_cell_value", {"sheet_name": "Sheet1", "row": 1, "col": 1, "value": 3},
              action_type="API"),
        _step("word_a", 2, "type", {"coordinate": [20, 30], "keys": "hello", "clear_current_text": True}),
        _step("word_b", 1, "type", {"coordinate": [10, 20], "keys": "{ENTER}"}),
        _step("word_a", 4, "wheel_mouse_input", {"coordinate": [100, 50], "wheel_dist": -5}),
        _step("word_b", 3, "type", {"coordinate": [10, 20], "keys": "=A1+B1"}),
    ]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_raw_rows_map_to_actions_and_report_the_rest(tmp_path):
    result = load_offline(f"gui360:{write_raw(tmp_path)}")
    a, b = result.trajectories
    assert (a.task_id, a.goal, a.info.task_reward, b.info.task_reward) == ("word_a", "Task word_a", 1.0, 0.0)
    # pixels of the 200x100 screenshot as they are; wheel -5 notches = 5 * 0.1 of the viewport down
    assert [t.action for t in a.turns] == [
        Action.click_at(50, 40), Action.type_text("hello", clear=True),
        Action("scroll_at", direction="down", amount=0.5, x=100, y=50)]
    assert [t.action for t in b.turns] == [Action("press", text="Enter"), Action.click_at(10, 20, clicks=2)]
    first = a.turns[0]
    assert (first.decided_by, first.observation.screenshot_size, first.observation.action_bbox) == (
        "dataset", [200, 100], [40.0, 30.0, 20.0, 20.0])
    assert first.response_text == "<think>\nClick Bold.\n</think>\n<tool_call>click_at(50, 40)</tool_call>"
    assert make_format("compact").parse(first.response_text) == first.action
    assert first.observation.elements_text == '[2] Button "Bold"\n[1] TabItem "Home"'
    assert [e["id"] for e in first.observation.elements] == [2, 1]
    assert a.turns[1].observation.action_point == [20.0, 30.0]  # where the type focused
    summary = result.report.summary()
    assert summary["formats"]["gui360"] == {"rows": 7, "trajectories": 2, "steps": 7, "mapped": 5, "skipped": 2}
    skipped = [(s["row"], s["step"], s["reason"]) for s in summary["skipped"]]
    assert skipped[0] == (3, 3, "API action 'set_cell_value' has no browser equivalent")
    assert skipped[1][:2] == (7, 3) and "mix text with pywinauto key codes" in skipped[1][2]
    json.dumps(summary)


def test_processed_parquet_rows_use_normalised_points(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    prompt = "<image>\nYou are a helpful assistant.\n\nThe instruction is:\nMake the title bold.\n\nThe history..."
    rows = [{"id": "word_x_1", "images": [{"bytes": png(200, 100)}],
             "messages": [{"role": "user", "content": prompt},
                          {"role": "assistant", "content": 'Bold is at the top. <tool_call>\n{"function": "click", '
                           '"args": {"coordinate": [500, 250]}, "status": "CONTINUE"}\n</tool_call>'}],
             "metadata": {"platform": "desktop", "task_type": "action", "split": "train"}},
            {"id": "word_x_2", "images": [{"bytes": png(200, 100)}],
             "messages": [{"role": "user", "content": prompt},
                          {"role": "assistant", "content": '<tool_call>{"function": "select_text", '
                           '"args": {"text": "Title"}}</tool_call>'}],
             "metadata": {"platform": "desktop", "task_type": "action", "split": "train"}}]
    path = tmp_path / "action.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    result = load_offline(str(path))  # format guessed from the metadata's task_type
    first, second = result.trajectories
    # [500, 250] of 0..1000 on a 200x100 screenshot -> (100, 25) pixels
    assert first.goal == "Make the title bold." and first.turns[0].action == Action.click_at(100, 25)
    assert first.turns[0].response_text.startswith("<think>\nBold is at the top.\n</think>")
    assert second.turns == []
    (skip,) = result.report.skipped
    assert (skip.row, skip.step) == (1, 0) and "'select_text' is not one of the GUI functions" in skip.reason


def test_corrupt_line_raises_naming_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_step("word_a", 1, "click", {"coordinate": [1, 1]})) + "\n{not json\n")
    with pytest.raises(DatasetError, match=r"bad\.jsonl:2: not valid JSON"):
        load_offline(f"gui360:{path}")
    path.write_text(json.dumps({"execution_id": "x", "step": {}}) + "\n")
    with pytest.raises(DatasetError, match=r"bad\.jsonl:1: missing key\(s\) \['request'\]"):
        load_offline(f"gui360:{path}")
    path.write_text(json.dumps({**_step("word_a", 1, "click", {"coordinate": [1, 1]}), "step_id": "a"}) + "\n")
    with pytest.raises(DatasetError, match=r"bad\.jsonl:1: step_id must be an integer, got 'a'"):
        load_offline(f"gui360:{path}")


def test_missing_screenshot_is_reported_not_raised(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(_step("word_a", 1, "click", {"coordinate": [1, 1]})) + "\n")
    result = load_offline(f"gui360:{path}")
    (skip,) = result.report.skipped
    assert (skip.row, skip.step) == (1, 1) and skip.reason.startswith("screenshot word_a/action_step1.png not found")

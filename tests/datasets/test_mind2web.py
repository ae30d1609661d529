"""Mind2Web task JSON and Multimodal-Mind2Web action rows written here, converted to SoM turns."""
import json

from tests.datasets import png
from webrl.actions import Action
from webrl.datasets import load_offline


def _cand(node, x, y, w, h, tag="button", **attrs):
    attributes = {"backend_node_id": str(node), "bounding_box_rect": f"{x},{y},{w},{h}", **attrs}
    return json.dumps({"tag": tag, "backend_node_id": str(node), "attributes": json.dumps(attributes)})


def _action(op, pos, neg, value="", original_op=None, **extra):
    return {"action_uid": f"uid-{op}-{len(neg)}", "operation": {"op": op, "original_op": original_op or op,
                                                                 "value": value},
            "pos_candidates": pos, "neg_candidates": neg, **extra}


def write_task_json(tmp_path):
    """Two Mind2Web tasks (6 actions, one without a positive candidate); returns the file."""
    (tmp_path / "shot.png").write_bytes(png(200, 100))
    search = _cand(11, 10, 60, 50, 20, tag="input", placeholder="Search flights")
    go = _cand(12, 120, 60, 40, 20, aria_label="Go")
    logo = _cand(13, 5, 5, 30, 10, tag="a", title="Home")
    tasks = [
        {"annotation_id": "t1", "confirmed_task": "Find flights to Oslo", "website": "kayak", "domain": "Travel",
         "subdomain": "Airlines", "actions": [
             _action("TYPE", [search], [go, logo], value="Oslo", screenshot="shot.png"),
             _action("CLICK", [go], [search, logo]),
             _action("CLICK", [], [search, go])]},          # no positive candidate: reported
        {"annotation_id": "t2", "confirmed_task": "Pick economy", "website": "kayak", "actions": [
            _action("SELECT", [_cand(21, 0, 40, 80, 20, tag="select")], [], value="Economy"),
            _action("CLICK", [logo], [], original_op="HOVER"),
            _action("CLICK", [go], [], original_op="ENTER")]},
    ]
    path = tmp_path / "train_0.json"
    path.write_text(json.dumps(tasks))
    return path


def test_task_json_resolves_candidates_to_set_of_mark_ids(tmp_path):
    result = load_offline(f"mind2web:{write_task_json(tmp_path)}")
    t1, t2 = result.trajectories
    # ids by position (top, then left): logo (y=5) 0, search (y=60, x=10) 1, go (y=60, x=120) 2
    assert [t.action for t in t1.turns] == [Action.type_text("Oslo", element=1), Action.click(2)]
    first = t1.turns[0]
    assert first.observation.elements_text == '[0] a "Home"\n[1] input "Search flights"\n[2] button "Go"'
    assert first.observation.action_bbox == [10.0, 60.0, 50.0, 20.0]
    assert (first.observation.screenshot_size, len(first.images), t1.turns[1].images) == ([200, 100], 1, [])
    assert first.response_text == '<tool_call>type(1, "Oslo")</tool_call>'
    assert (t1.goal, t1.info.site, t1.info.task_params) == (
        "Find flights to Oslo", "kayak", {"domain": "Travel", "subdomain": "Airlines"})
    assert [t.action for t in t2.turns] == [Action.select(0, "Economy"), Action("hover", element=0),
                                            Action("press", text="Enter")]
    assert result.report.summary()["formats"]["mind2web"] == {
        "rows": 2, "trajectories": 2, "steps": 6, "mapped": 5, "skipped": 1}
    (skip,) = result.report.skipped
    assert (skip.row, skip.step, skip.reason) == (0, 2, "no positive candidate with a bounding box")


def test_multimodal_rows_group_by_task_and_drop_boxes_off_the_screenshot(tmp_path):
    (tmp_path / "a0.png").write_bytes(png(200, 100))
    (tmp_path / "a1.png").write_bytes(png(200, 100))
    inside, below = _cand(1, 20, 20, 40, 20), _cand(2, 20, 150, 40, 20)   # y=150 is below a 100-px-high shot
    rows = [
        {"annotation_id": "m1", "action_uid": "u1", "target_action_index": "1", "confirmed_task": "Open deals",
         "operation": json.dumps({"op": "CLICK", "original_op": "CLICK", "value": ""}),
         "pos_candidates": [below], "neg_candidates": [inside], "screenshot": "a1.png"},
        {"annotation_id": "m1", "action_uid": "u0", "target_action_index": "0", "confirmed_task": "Open deals",
         "operation": json.dumps({"op": "CLICK", "original_op": "CLICK", "value": ""}),
         "pos_candidates": [inside], "neg_candidates": [below], "screenshot": "a0.png"},
        {"annotation_id": "m2", "action_uid": "u2", "target_action_index": "0", "confirmed_task": "Type",
         "operation": {"op": "TYPE", "value": "abc"}, "pos_candidates": [inside], "neg_candidates": []},
    ]
    path = tmp_path / "mm.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = load_offline(str(path))  # guessed: annotation_id + operation
    m1, m2 = result.trajectories
    assert [t.action for t in m1.turns] == [Action.click(0)] and m1.turns[0].observation.step == 0
    assert [e["id"] for e in m1.turns[0].observation.elements] == [0]  # the box below the shot is not listed
    assert m2.turns[0].action == Action.type_text("abc", element=0)
    (skip,) = result.report.skipped
    assert (skip.row, skip.step) == (1, 1)  # line 1 holds target_action_index 1
    assert skip.reason == "no positive candidate with a bounding box inside the screenshot"

"""The OpenWebRL recipe's SFT trajectories (released per-turn rows, canonical episodes) and
ShareGPT records, written here and converted."""
import json

from tests.datasets import data_url, png
from webrl.actions import Action
from webrl.datasets import load_offline

VISION = "<|vision_start|><|image_pad|><|vision_end|>"


def _call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def _released_rows():
    """Episode e1 (2 turns) and e2 (2 turns, the second a call_user), one row per turn, shuffled."""
    skeleton = [
        {"role": "system", "content": "<policy>"},
        {"role": "user", "content": f"Task: find the price\n{VISION}"},
        {"role": "assistant", "content": "<think>The search box is at the top.</think>\n\n"
                                         + _call("click", point_2d=[500, 250])},
        {"role": "tool", "content": f"Succeed: `click` at (100, 25) executed.\n{VISION}"},
        {"role": "assistant", "content": "<think>Type the query.</think>\n\n" + _call("write", message="mug")},
    ]
    skeleton2 = skeleton[:2] + [
        {"role": "assistant", "content": _call("done", response="12 euros")},
        {"role": "tool", "content": f"Succeed.\n{VISION}"},
        {"role": "assistant", "content": _call("call_user", question="Which size?")}]

    def row(task, turn, messages):
        return {"rollout_idx": 0, "prompt": "...", "metadata": {
            "task_id": task, "turn_index": turn, "intent": f"intent {task}", "start_url": "http://shop.test/",
            "reward": 1, "images": [data_url(png(200, 100, (turn * 40, 0, 0)))], "messages": messages}}

    return [row("e1", 1, skeleton), row("e2", 0, skeleton2[:2]), row("e1", 0, skeleton[:2]), row("e2", 1, skeleton2)]


def write_released(tmp_path):
    path = tmp_path / "OpenWebRL_SFT_trajectories.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _released_rows()))
    return path


def test_released_rows_become_episodes(tmp_path):
    path = write_released(tmp_path)
    result = load_offline(str(path))  # guessed from metadata.messages
    e1, e2 = result.trajectories
    assert (e1.task_id, e1.goal, e1.info.start_url, e1.info.task_reward) == (
        "e1#0", "intent e1", "http://shop.test/", 1.0)
    # [500, 250] of 0..1000 on the 200x100 screenshot -> (100, 25) pixels
    assert [t.action for t in e1.turns] == [Action.click_at(100, 25), Action.type_text("mug")]
    assert e1.turns[0].response_text == (
        "<think>\nThe search box is at the top.\n</think>\n<tool_call>click_at(100, 25)</tool_call>")
    assert e1.turns[1].observation.feedback == "Succeed: `click` at (100, 25) executed."
    assert e1.turns[1].images[0].to_pil().getpixel((0, 0)) == (40, 0, 0)  # turn 1's own screenshot
    assert [t.action for t in e2.turns] == [Action.answer("12 euros")]
    assert result.report.summary()["formats"]["openwebrl"] == {
        "rows": 4, "trajectories": 2, "steps": 4, "mapped": 3, "skipped": 1}
    (skip,) = result.report.skipped
    assert (skip.row, skip.step, skip.reason) == (4, 1, "call_user asks a human: no webrl action")


def test_canonical_episode_with_structured_tool_calls(tmp_path):
    shot = {"type": "image_url", "image_url": {"url": data_url(png(200, 100))}}
    episode = {"tools": [], "metadata": {"task_id": "c1", "rollout_idx": 2}, "messages": [
        {"role": "system", "content": "<policy>"},
        {"role": "user", "content": [{"type": "text", "text": "Task: scroll"}, shot]},
        {"role": "assistant", "content": "<think>Scroll within the list.</think>", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "scroll", "arguments": json.dumps(
                {"direction": "down", "amount": 0.25, "point_2d": [100, 900]})}}]},
        {"role": "tool", "content": [{"type": "text", "text": "Succeed: scrolled."}, shot]},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "b", "type": "function", "function": {"name": "press_keys", "arguments": {"keys": ["a", "b"]}}}]},
        {"role": "tool", "content": [shot]},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "press_keys",
                                                         "arguments": {"keys": ["Control", "l"], "is_hotkey": True}}}]},
    ]}
    path = tmp_path / "canonical.jsonl"
    path.write_text(json.dumps(episode) + "\n")
    result = load_offline(f"openwebrl:{path}")
    (traj,) = result.trajectories
    # [100, 900] -> (20, 90); the two-key sequence is not one chord: reported
    assert [t.action for t in traj.turns] == [
        Action("scroll_at", direction="down", amount=0.25, x=20, y=90), Action("press", text="Control+l")]
    assert traj.goal == "Task: scroll" and traj.task_id == "c1#2"
    (skip,) = result.report.skipped
    assert (skip.row, skip.step) == (1, 1) and "is not one chord" in skip.reason


def write_sharegpt(tmp_path):
    """Two ShareGPT records: an OpenWebRL call then a Set-of-Mark call; a reply with no call."""
    (tmp_path / "s0.png").write_bytes(png(200, 100))
    (tmp_path / "s1.png").write_bytes(png(200, 100))
    records = [
        {"messages": [
            {"role": "system", "content": "..."},
            {"role": "user", "content": "<image>Buy a mug"},
            {"role": "assistant", "content": "<think>Click it.</think>\n\n" + _call("click", point_2d=[250, 500])},
            {"role": "user", "content": "<tool_response>\nSucceed: clicked.<image>\n</tool_response>"},
            {"role": "assistant", "content": '<tool_call>{"name": "browser", "arguments": '
                                             '{"action": "click", "element": 4}}</tool_call>'}],
         "images": ["s0.png", "s1.png"]},
        {"conversations": [{"from": "human", "value": "Say hi"}, {"from": "gpt", "value": "hi there"}]},
    ]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(records))
    return path


def test_sharegpt_records_read_openwebrl_and_webrl_calls(tmp_path):
    result = load_offline(f"sharegpt:{write_sharegpt(tmp_path)}")
    first, second = result.trajectories
    assert first.goal == "Buy a mug"
    assert [t.action for t in first.turns] == [Action.click_at(50, 50), Action.click(4)]
    assert first.turns[1].observation.feedback == "Succeed: clicked."
    assert second.turns == []
    (skip,) = result.report.skipped
    assert (skip.row, skip.step) == (1, 0) and skip.reason.startswith("no known action in the reply")

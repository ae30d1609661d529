"""Trajectory serialisation is lossless and reads older logs; containers reject inconsistent content."""
import json

import numpy as np
import pytest

from webrl.actions import Action
from webrl.types import (Image, Trajectory, TrajectoryInfo, Turn, TurnObservation, check_info_field,
                         load_trajectories, save_trajectories)


def _image(seed: int, fmt: str = "png") -> Image:
    rng = np.random.default_rng(seed)
    return Image.from_array(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8), fmt)


def _trajectory(i: int) -> Trajectory:
    turns = [
        Turn(prompt_ids=[1, 2, 3], response_ids=[4, 5], logprobs=[-0.25, -1.5], images=[_image(i)],
             response_text='click(3)', action=Action.click(3), feedback="Clicked <button> 'Go'",
             policy_version=7, timings={"env_s": 0.05},
             observation=TurnObservation(url="http://127.0.0.1/", step=0, screenshot_size=[32, 24],
                                         elements=[{"id": 3, "bbox": (1.0, 2.0, 3.0, 4.0), "options": ("S",)}],
                                         action_bbox=[1.0, 2.0, 3.0, 4.0])),
        Turn(prompt_ids=[1, 2, 3, 4, 5, 9], response_ids=[6], logprobs=[-0.1],
             images=[_image(i + 100, "jpeg"), _image(i)], response_text="oops", action=None,
             parse_error="expected one call", policy_version=7),
    ]
    return Trajectory(task_id=f"t{i}", group_id="g0", goal="buy a mug", turns=turns, reward=1.0,
                      reward_details={"checker": "cart ok"},
                      info=TrajectoryInfo(site="shop", level=1, split="train", task_params={"sku": 3},
                                          started_at=1.5, finished_at=2.25, attempts=1, terminated=True,
                                          task_reward=1.0))


def test_save_load_round_trip_is_lossless(tmp_path):
    trajs = [_trajectory(0), _trajectory(1)]
    trajs[1].drop("judge timed out")
    save_trajectories(tmp_path / "t.jsonl", trajs[:1])
    save_trajectories(tmp_path / "t.jsonl", trajs[1:])  # appends
    back = load_trajectories(tmp_path / "t.jsonl")
    assert back == trajs
    # The same image used twice is stored once (content-addressed): 2 trajectories x 2 distinct.
    assert len(list((tmp_path / "images").iterdir())) == 4


def test_image_bytes_survive_exactly(tmp_path):
    img = _image(3)
    save_trajectories(tmp_path / "t.jsonl", [Trajectory("t", turns=[Turn(images=[img])])])
    assert load_trajectories(tmp_path / "t.jsonl")[0].turns[0].images[0].data == img.data
    assert img.size == (32, 24)


def test_bad_line_names_file_and_line(tmp_path):
    path = tmp_path / "t.jsonl"
    save_trajectories(path, [_trajectory(0)])
    with open(path, "a") as f:
        f.write(json.dumps({"task_id": "x", "turns": [{"images": [], "action": {"kind": "fly"}}]}) + "\n")
    with pytest.raises(ValueError, match=r"t\.jsonl:2: not a valid trajectory"):
        load_trajectories(path)


def test_inconsistent_containers_are_rejected():
    with pytest.raises(ValueError, match="logprobs has 1 entries for 2 response ids"):
        Turn(response_ids=[1, 2], logprobs=[0.0])
    with pytest.raises(ValueError, match="drop_reason"):
        Trajectory("t", status="dropped")
    with pytest.raises(ValueError, match="status must be one of"):
        Trajectory("t", status="lost")
    with pytest.raises(ValueError, match="format"):
        Image(b"", "gif")


# One line per writer as `save_trajectories` wrote them while `info` and `observation` were plain
# dicts: a rollout turn (coordinator: Observation.to_record keys + Set-of-Mark boxes + the target),
# an oracle demo (webrl/recipes/demos.py: start_url, compact elements) and an Online-Mind2Web import.
_ROLLOUT_LINE = {
    "task_id": "shop/l0/train/00001", "group_id": "0:0:shop/l0/train/00001", "goal": "Buy a mug",
    "turns": [{"prompt_ids": [1, 2], "response_ids": [3], "logprobs": [-0.5], "images": ["shot.png"],
               "response_text": "click(0)", "action": {"kind": "click", "element": 0}, "parse_error": None,
               "feedback": "Clicked <button> 'Go'", "policy_version": 3, "decided_by": "generator",
               "timings": {"policy_s": 0.1},
               "observation": {"url": "http://sandbox.test/shop/", "title": "Shop", "elements_text": '[0] button "Go"',
                               "feedback": "", "last_action_error": "", "tabs": "", "step": 0,
                               "screenshot_size": [32, 24],
                               "elements": [{"id": 0, "bbox": [1.0, 2.0, 3.0, 4.0], "options": [], "role": "button",
                                             "name": "Go"}],
                               "action_bbox": [1.0, 2.0, 3.0, 4.0]}}],
    "reward": 1.0, "reward_details": {}, "status": "ok", "drop_reason": None,
    "info": {"site": "shop", "level": 0, "split": "train", "task_params": {"sku": 3}, "started_at": 1700000000.5,
             "attempts": 1, "terminated": True, "truncated": False, "task_reward": 1.0, "needs_judge": False,
             "finished_at": 1700000003.25}}
_DEMO_LINE = {
    "task_id": "widgets/l0/train/00002", "group_id": "", "goal": "Press Go",
    "turns": [{"prompt_ids": [], "response_ids": [], "logprobs": [], "images": ["shot.png"],
               "response_text": "click(0)", "action": {"kind": "click", "element": 0}, "parse_error": None,
               "feedback": "", "policy_version": -1, "decided_by": "oracle", "timings": {},
               "observation": {"url": "http://sandbox.test/widgets/", "title": "Form", "elements_text": "",
                               "last_action_error": "", "step": 0, "screenshot_size": [32, 24],
                               "elements": [{"id": 0, "bbox": [1, 2, 3, 4], "role": "button", "tag": "button",
                                             "name": "Go", "in_viewport": True}]}}],
    "reward": 1.0, "reward_details": {}, "status": "ok", "drop_reason": None,
    "info": {"site": "widgets", "level": 0, "split": "train", "start_url": "http://sandbox.test/widgets/"}}
_IMPORT_LINE = {
    "task_id": "t9", "group_id": "", "goal": "Book a table",
    "turns": [{"prompt_ids": [], "response_ids": [], "logprobs": [], "images": [], "response_text": "",
               "action": None, "parse_error": "not a webrl action", "feedback": "", "policy_version": -1,
               "decided_by": "imported", "timings": {},
               "observation": {"url": "u", "om2w_action": "button 'Search' -> CLICK"}}],
    "reward": None, "reward_details": {}, "status": "ok", "drop_reason": None,
    "info": {"reference_length": 3, "source": "online-mind2web-v2"}}


def _write_lines(tmp_path, *lines):
    (tmp_path / "images").mkdir(exist_ok=True)
    (tmp_path / "images" / "shot.png").write_bytes(_image(0).data)
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_logs_written_with_plain_dicts_load_into_the_records(tmp_path):
    rollout, demo, imported = load_trajectories(_write_lines(tmp_path, _ROLLOUT_LINE, _DEMO_LINE, _IMPORT_LINE))
    assert rollout.info == TrajectoryInfo(site="shop", level=0, split="train", task_params={"sku": 3},
                                          started_at=1700000000.5, finished_at=1700000003.25, attempts=1,
                                          terminated=True, task_reward=1.0)
    obs = rollout.turns[0].observation
    assert (obs.url, obs.step, obs.screenshot_size, obs.action_bbox) == (
        "http://sandbox.test/shop/", 0, [32, 24], [1.0, 2.0, 3.0, 4.0])
    assert obs.elements[0]["name"] == "Go" and obs.action_point is None and obs.om2w_action == ""
    assert demo.info.start_url == "http://sandbox.test/widgets/" and demo.info.task_reward is None
    assert demo.turns[0].observation.elements[0]["tag"] == "button" and demo.turns[0].observation.feedback == ""
    assert imported.info.reference_length == 3 and imported.info.source == "online-mind2web-v2"
    assert imported.turns[0].observation.om2w_action == "button 'Search' -> CLICK"
    # saved again (every field now written) and read back: the same trajectories
    save_trajectories(tmp_path / "again.jsonl", [rollout, demo, imported])
    assert load_trajectories(tmp_path / "again.jsonl") == [rollout, demo, imported]


@pytest.mark.parametrize("where,patch,message", [
    ("info", {"steps": 2}, r"TrajectoryInfo: unknown field\(s\) \['steps'\]; allowed: \['site', 'level'"),
    ("info", {"task_reward": "1.0"}, r"TrajectoryInfo.task_reward must be None or a number, got '1.0'"),
    ("info", {"terminated": 1}, r"TrajectoryInfo.terminated must be true or false, got 1"),
    ("observation", {"step": "0"}, r"turn 0: TurnObservation.step must be an integer, got '0'"),
    ("observation", {"action_bbox": [1, 2]}, r"turn 0: TurnObservation.action_bbox must be None or \[x, y, w, h\]"),
    ("observation", {"elements": [{"id": "0", "bbox": [1, 2, 3, 4]}]},
     r'turn 0: TurnObservation.elements\[0\] must be a dict with an integer "id"'),
    ("observation", {"screenshot": "x"}, r"turn 0: TurnObservation: unknown field\(s\) \['screenshot'\]"),
])
def test_a_bad_record_field_names_file_line_and_field(tmp_path, where, patch, message):
    bad = json.loads(json.dumps(_ROLLOUT_LINE))
    record = bad["info"] if where == "info" else bad["turns"][0]["observation"]
    record.update(patch)
    path = _write_lines(tmp_path, _ROLLOUT_LINE, bad)
    with pytest.raises(ValueError, match=r"t\.jsonl:2: not a valid trajectory: " + message):
        load_trajectories(path)


def test_records_built_in_code_are_checked_too():
    assert Trajectory("t", info={"site": "shop"}).info == TrajectoryInfo(site="shop")
    assert Turn(observation={"url": "u"}).observation == TurnObservation(url="u")
    with pytest.raises(ValueError, match="TrajectoryInfo.level must be an integer, got '1'"):
        TrajectoryInfo(level="1")
    with pytest.raises(ValueError, match="TurnObservation: unknown field"):
        Turn(observation={"action_box": [1, 2, 3, 4]})


def test_config_keys_naming_info_fields_are_checked():
    check_info_field("ProgrammaticRewardConfig.info_key", "task_reward")
    with pytest.raises(ValueError, match=r"ProgrammaticRewardConfig.info_key must name a Trajectory.info field, "
                                         r"got 'checker'; allowed: \['site', 'level'"):
        check_info_field("ProgrammaticRewardConfig.info_key", "checker")

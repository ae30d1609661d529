"""Trajectory serialisation is lossless; containers reject inconsistent content."""
import json

import numpy as np
import pytest

from webrl.actions import Action
from webrl.types import Image, Trajectory, Turn, load_trajectories, save_trajectories


def _image(seed: int, fmt: str = "png") -> Image:
    rng = np.random.default_rng(seed)
    return Image.from_array(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8), fmt)


def _trajectory(i: int) -> Trajectory:
    turns = [
        Turn(prompt_ids=[1, 2, 3], response_ids=[4, 5], logprobs=[-0.25, -1.5], images=[_image(i)],
             response_text='click(3)', action=Action.click(3), feedback="Clicked <button> 'Go'",
             policy_version=7, timings={"env_s": 0.05}, observation={"url": "http://127.0.0.1/"}),
        Turn(prompt_ids=[1, 2, 3, 4, 5, 9], response_ids=[6], logprobs=[-0.1],
             images=[_image(i + 100, "jpeg"), _image(i)], response_text="oops", action=None,
             parse_error="expected one call", policy_version=7),
    ]
    return Trajectory(task_id=f"t{i}", group_id="g0", goal="buy a mug", turns=turns, reward=1.0,
                      reward_details={"checker": "cart ok"}, info={"steps": 2})


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

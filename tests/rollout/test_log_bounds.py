"""A bounded trajectory log (sampled groups, JPEG images, bytes counted) and a trajectory timeout that
scales with the turn limit."""
from __future__ import annotations

import io
import json

import numpy as np
import pytest

from webrl.actions import Action
from webrl.rollout import RolloutConfig, TrajectoryLog
from webrl.rollout.progress import keep_group, log_fraction
from webrl.types import Image, Trajectory, Turn, load_trajectories

from tests.rollout.test_coordinator_logic import CountEnv, _coordinator, _tasks


def screenshot(seed: int) -> Image:
    """A 320x240 page-like PNG: flat background, a few text-ish bars (what the env sends, zlib level 1)."""
    from PIL import Image as PILImage

    rng = np.random.default_rng(seed)
    pixels = np.full((240, 320, 3), 245, np.uint8)
    for row in range(10, 230, 14):
        width = int(rng.integers(40, 300))
        pixels[row:row + 6, 10:10 + width] = rng.integers(0, 90, (6, width, 3), dtype=np.uint8)
    buf = io.BytesIO()
    PILImage.fromarray(pixels).save(buf, format="PNG", compress_level=1)
    return Image(buf.getvalue(), "png")


def trajectory(group_id: str, shots: list[Image]) -> Trajectory:
    turns = [Turn(prompt_ids=[1, 2], response_ids=[3], logprobs=[-0.1], images=[s], response_text="click(1)",
                  action=Action.click(1)) for s in shots]
    return Trajectory(task_id="t", group_id=group_id, goal="g", turns=turns)


def on_disk(log: TrajectoryLog) -> int:
    images = log.path.parent / "images"
    files = list(images.iterdir()) if images.exists() else []
    return log.path.stat().st_size + sum(p.stat().st_size for p in files)


def test_log_fraction_values_and_refusals():
    assert (log_fraction("all"), log_fraction("none"), log_fraction("0.25"), log_fraction(1)) == (1.0, 0.0, 0.25, 1.0)
    for bad in ("some", "0", "1.5", "-0.1"):
        with pytest.raises(ValueError, match=r"rollout.log_trajectories must be all \| none \| a fraction in \(0, 1\]"):
            log_fraction(bad)
    with pytest.raises(ValueError, match="rollout.log_trajectories"):
        RolloutConfig(log_trajectories="half")
    from webrl.config import load_config  # a number on the command line arrives as the string key

    assert load_config(RolloutConfig, None, ["log_trajectories=0.25"]).log_trajectories == "0.25"
    with pytest.raises(ValueError, match=r"rollout.log_images must be one of auto \| jpeg \| png \| none, got 'gif'"):
        RolloutConfig(log_images="gif")
    with pytest.raises(ValueError, match=r"rollout.log_images='jpeg' has no effect with rollout.log_trajectories=none"):
        RolloutConfig(log_trajectories="none", log_images="jpeg")


def test_sampling_is_deterministic_per_seed_and_group():
    groups = [f"{it}:{i}:task{i}" for it in range(20) for i in range(10)]  # 200 groups
    kept = [g for g in groups if keep_group(7, g, 0.25)]
    assert kept == [g for g in groups if keep_group(7, g, 0.25)]  # same seed: same choice
    assert kept != [g for g in groups if keep_group(8, g, 0.25)]  # another seed: another sample
    assert 25 <= len(kept) <= 75  # Binomial(200, 0.25): mean 50, sd 6.1; this is +-4 sd
    assert set(g for g in groups if keep_group(7, g, 0.1)) <= set(kept)  # nested: same hash, lower cut
    assert all(keep_group(7, g, 1.0) for g in groups) and not any(keep_group(7, g, 0.0) for g in groups)


def test_jpeg_log_is_smaller_counts_its_bytes_and_leaves_the_trajectory_alone(tmp_path):
    shots = [screenshot(0), screenshot(1)]
    traj = trajectory("0:0:t", [shots[0], shots[1], shots[1]])  # turn 2 repeats turn 1's screenshot
    png_log, jpeg_log = TrajectoryLog(tmp_path / "png", images="png"), TrajectoryLog(tmp_path / "jpeg", images="jpeg")
    png_bytes, jpeg_bytes = png_log(traj), jpeg_log(traj)
    assert png_bytes == on_disk(png_log) and jpeg_bytes == on_disk(jpeg_log)  # counted = written
    assert len(list((tmp_path / "jpeg" / "trajectories" / "images").iterdir())) == 2  # deduplicated
    assert jpeg_bytes < png_bytes
    assert [i.format for t in traj.turns for i in t.images] == ["png"] * 3  # the trainer's copy untouched
    loaded = load_trajectories(jpeg_log.path)[0]
    assert [i.format for t in loaded.turns for i in t.images] == ["jpeg"] * 3
    # lossy but close: mean absolute pixel error of the JPEG under 8 of 255
    original, decoded = np.asarray(shots[0].to_pil(), float), np.asarray(loaded.turns[0].images[0].to_pil(), float)
    assert decoded.shape == original.shape and np.abs(decoded - original).mean() < 8
    # a second trajectory with the same screenshots writes only its JSON line
    again = jpeg_log(trajectory("0:1:t", shots))
    last_line = jpeg_log.path.read_bytes().splitlines(keepends=True)[-1]
    assert again == len(last_line) and jpeg_bytes + again == on_disk(jpeg_log)


def test_auto_keeps_the_smaller_encoding(tmp_path):
    from PIL import Image as PILImage

    flat = Image.from_pil(PILImage.new("RGB", (320, 240), (250, 250, 250)))  # a blank page: PNG wins
    busy = screenshot(5)  # noisy bars: JPEG wins
    log = TrajectoryLog(tmp_path)  # images="auto"
    log(trajectory("0:0:t", [flat, busy]))
    row = json.loads(log.path.read_text())
    assert [name.rsplit(".", 1)[1] for t in row["turns"] for name in t["images"]] == ["png", "jpeg"]
    assert row["turns"][0]["images"] == [f"{flat.digest}.png"]  # the env's bytes, unchanged


def test_no_images_and_sampled_groups(tmp_path):
    log = TrajectoryLog(tmp_path / "none", images="none")
    log(trajectory("0:0:t", [screenshot(0)]))
    row = json.loads(log.path.read_text())
    assert row["turns"][0]["images"] == [] and not list((log.path.parent / "images").iterdir())
    sampled = TrajectoryLog(tmp_path / "sampled", sample="0.5", seed=3)
    ids = [f"0:{i}:t" for i in range(8)]
    written = [sampled(trajectory(g, [])) for g in ids]
    logged = [json.loads(line)["group_id"] for line in sampled.path.read_text().splitlines()]
    assert logged == [g for g in ids if keep_group(3, g, 0.5)] and 0 < len(logged) < 8
    assert [w > 0 for w in written] == [g in logged for g in ids] and sum(written) == on_disk(sampled)
    assert TrajectoryLog(tmp_path / "off", sample="none")(trajectory("0:0:t", [screenshot(0)])) == 0


def test_collect_reports_the_bytes_the_log_wrote(tmp_path):
    env = CountEnv()
    coord, _ = _coordinator(env)
    log = TrajectoryLog(tmp_path)
    coord.on_trajectory = log
    trajs, stats = coord.collect(_tasks(2))
    assert len(trajs) == 8 and stats.log_bytes == log.path.stat().st_size > 0
    assert len(log.path.read_text().splitlines()) == 8


def test_trajectory_timeout_scales_with_the_turn_limit():
    # auto: one reset + max_turns x (step + inference) at their limits
    config = RolloutConfig(step_timeout_s=10, inference_timeout_s=20, max_turns=3, horizon_schedule=[[0, 3], [5, 6]])
    assert config.trajectory_timeout_s == 0 and config.trajectory_timeout(config.horizon(0)) == 10 + 3 * 30 == 100
    assert config.trajectory_timeout(config.horizon(5)) == 10 + 6 * 30 == 190
    defaults = RolloutConfig()  # 60 s steps, 300 s inference, 15 turns: 60 + 15 x 360 = 5460 s
    assert defaults.trajectory_timeout(defaults.max_turns) == 5460
    assert RolloutConfig(trajectory_timeout_s=900).trajectory_timeout(30) == 900  # explicit: honoured
    with pytest.raises(ValueError, match=r"rollout.trajectory_timeout_s must be > 0 \(seconds\) or 0 \(auto\)"):
        RolloutConfig(trajectory_timeout_s=-1)
    with pytest.raises(ValueError, match=r"inference_timeout_s \(900.0\) must be below rollout.trajectory_timeout_s"):
        RolloutConfig(inference_timeout_s=900.0, trajectory_timeout_s=600)


def test_an_explicit_trajectory_timeout_still_ends_the_trajectory():
    env = CountEnv(delay=0.3)  # click, click, stop: at least 0.9 s of env time
    coord, _ = _coordinator(env, slots=4, trajectory_timeout_s=0.3, inference_timeout_s=0.25, max_retries=0)
    trajs, stats = coord.collect(_tasks(1))
    assert stats.dropped == 4 and all("trajectory over 0.3s" in t.drop_reason for t in trajs)

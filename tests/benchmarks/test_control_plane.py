"""benchmarks/control_plane.py: its statistics by hand, the stand-ins, and one small real run on Ray."""
import json
import math
import tempfile

import pytest

from tests.benchmarks.helpers import load_benchmark

bench = load_benchmark("control_plane")
EnvCall = bench.EnvCall


def test_percentile_interpolates_between_closest_ranks():
    values = [4.0, 1.0, 3.0, 2.0]  # sorted 1, 2, 3, 4: rank = 3 * q / 100
    assert bench.percentile(values, 0) == 1.0 and bench.percentile(values, 100) == 4.0
    assert bench.percentile(values, 50) == 2.5  # rank 1.5: halfway between 2 and 3
    assert bench.percentile(values, 99) == pytest.approx(3.97)  # rank 2.97: 3 + 0.97 * (4 - 3)
    assert bench.percentile([7.0], 99) == 7.0
    assert math.isnan(bench.percentile([], 50))


def test_lognormal_from_median_and_p99():
    sigma = bench.lognormal_sigma(0.1, 0.3)
    assert sigma == pytest.approx(math.log(3) / 2.3263478740)  # 1.0986 / 2.3263 = 0.4723
    assert bench.lognormal_mean(0.1, sigma) == pytest.approx(0.1 * math.exp(0.4723 ** 2 / 2), rel=1e-3)  # 0.1118
    assert bench.lognormal_sigma(0.2, 0.2) == 0.0  # p99 = median: every sleep is the median
    with pytest.raises(ValueError):
        bench.lognormal_sigma(0.3, 0.1)


def test_added_latency_is_the_gap_after_the_slots_previous_call():
    calls = [  # slot (0, 0): reset 0-1, step 1.25-2, step 2.5-3, reset 3.1-4 (no step after it)
        EnvCall(0, 0, "step", 1.25, 2.0), EnvCall(0, 0, "reset", 0.0, 1.0), EnvCall(0, 0, "step", 2.5, 3.0),
        EnvCall(0, 0, "reset", 3.1, 4.0),
        # slot 0 of another worker: reset 0-0.5, step 0.6-1.0; its gap must not be taken from worker 0's calls
        EnvCall(1, 0, "reset", 0.0, 0.5), EnvCall(1, 0, "step", 0.6, 1.0),
    ]
    assert sorted(bench.added_latencies(calls)) == pytest.approx([0.1, 0.25, 0.5])  # resets are never a step's gap
    assert bench.added_latencies(calls, window=(1.0, 2.0)) == pytest.approx([0.25])  # steps starting in [1, 2)
    assert bench.steps_in_window(calls, 1.0, 3.0) == 2  # the steps ending at 1.0 and 2.0; 3.0 is outside


def test_ideal_rate_counts_the_reset_of_each_episode():
    # 10 slots, 0.1 s per call, 4 steps + 1 reset per episode: 10 / 0.1 * 4 / 5 = 80 steps/s
    assert bench.ideal_steps_per_s(10, 0.1, 4) == pytest.approx(80.0)


def test_stand_ins_click_then_stop_and_stamp_every_call():
    from webrl.actions import Action
    from webrl.policy.types import Observation, PolicyRequest

    calls = []
    env = bench.SleepEnv(0, 3, median_s=0.001, sigma=0.0, seed=0, calls=calls)
    obs, info = env.reset()
    assert obs["elements_text"] == "[0] button 'Go'" and info["elements"][0]["id"] == 0
    assert env.step(Action.click(0))[2] is False and env.step(Action.stop())[1:3] == (1.0, True)
    assert [c[2] for c in calls] == ["reset", "step", "step"] and all(c[1] == 3 and c[4] >= c[3] for c in calls)
    engine = bench.InstantEngine(turns=2)
    observation = Observation(goal="g", elements_text=obs["elements_text"])
    first, second = engine.act([PolicyRequest(observation, []), PolicyRequest(observation, [None])])
    assert (first.parsed.kind, first.parsed.element, second.parsed.kind) == ("click", 0, "stop")


@pytest.mark.ray
@pytest.mark.slow
def test_a_small_real_run_counts_every_step_once(run_dir):
    import ray

    from webrl.run.ray_local import start_local_ray

    start_local_ray(2, tempfile.mkdtemp(prefix="cp", dir=run_dir), {"RAY_USAGE_STATS_ENABLED": "0"})
    try:  # 8 slots over 2 workers, 3 turns per episode, 2 s measured after 1 s
        point = bench.PointConfig(slots=8, slots_per_worker=4, turns=3, group_size=2, seconds=2.0, warmup_s=1.0,
                                  step_median_s=0.02, step_p99_s=0.05)
        row = bench.run_point(point)
    finally:
        ray.shutdown()
    assert row["env_workers"] == 2 and row["dropped"] == 0 and row["retries"] == 0
    # every step the env slept through is one turn of one returned trajectory, and each episode has 3
    assert row["steps_recorded"] == row["total_steps"] == row["turns_counted"] == 3 * row["trajectories"]
    assert row["resets_recorded"] == row["trajectories"] > 0 and row["episodes_of_other_length"] == 0
    assert 0 < row["steps_in_window"] <= row["total_steps"] and row["steps_per_s"] > 0
    assert row["added_p50_ms"] >= 0 and row["added_p99_ms"] >= row["added_p50_ms"]
    assert row["mean_batch"] >= 1 and row["tree_cpu_cores"] > 0 and row["driver_rss_mb"] > 0


def test_points_are_saved_as_they_finish_and_a_rerun_runs_only_the_missing(tmp_path, monkeypatch):
    import webrl.run.ray_local as ray_local

    ran, stop_at = [], {32}

    def fake_point(point):
        ran.append(point.slots)
        if point.slots in stop_at:
            raise KeyboardInterrupt  # the session stops during this point
        return {key: (1 if fmt == "{:d}" else 1.0) for key, _, fmt in bench.COLUMNS} | {"slots": point.slots,
                                                                                       "steps_per_s": 1.0}

    monkeypatch.setattr(bench, "run_point", fake_point)
    monkeypatch.setattr(ray_local, "start_local_ray", lambda *a, **k: None)
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--slots", "8", "32", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "result.json").read_text())
    assert [row["slots"] for row in saved["rows"]] == [8] and saved["partial"] is True
    ran.clear()
    stop_at.clear()
    assert bench.main(["--slots", "8", "32", "--out", str(tmp_path)]) == 0
    assert ran == [32]  # 8 was kept
    final = json.loads((tmp_path / "result.json").read_text())
    assert [row["slots"] for row in final["rows"]] == [8, 32] and "partial" not in final
    ran.clear()
    bench.main(["--slots", "8", "--turns", "3", "--out", str(tmp_path)])  # other settings: measured again
    assert ran == [8]

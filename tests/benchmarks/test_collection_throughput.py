"""benchmarks/collection_throughput.py: the instant policy's decisions and a tiny raw-floor run."""
from types import SimpleNamespace

import pytest

from tests.benchmarks.helpers import load_benchmark

bench = load_benchmark("collection_throughput")


def request(elements_text: str, turns: int, request_id: str = "g/0/0"):
    observation = SimpleNamespace(elements_text=elements_text)
    return SimpleNamespace(observation=observation, history=[None] * turns, request_id=request_id)


def test_instant_policy_clicks_listed_ids_then_stops():
    engine = bench.InstantEngine(lengths=(3,), seed=0)
    listed = "[3] button 'Go'\n[7] link 'Home'\n  [9] is not at a line start"
    first, second, third = engine.act([request(listed, 0), request(listed, 1), request(listed, 2)])
    assert first.parsed.kind == second.parsed.kind == "click"
    assert {first.parsed.element, second.parsed.element} <= {3, 7}
    assert third.parsed.kind == "stop"
    (nothing,) = engine.act([request("", 0)])  # no element listed: stop at once
    assert nothing.parsed.kind == "stop"
    # seeded by request id: the same request, the same click
    assert engine.act([request(listed, 0, "g/1/0")])[0].parsed == engine.act([request(listed, 0, "g/1/0")])[0].parsed


def test_instant_episodes_take_their_length_from_the_jobs_lengths():
    """Each episode (group/member) draws one length L from the list: L - 1 clicks, then stop()."""
    engine = bench.InstantEngine(lengths=(1, 4), seed=0)
    listed = "[3] button 'Go'"
    seen = set()
    for member in range(12):
        kinds = [engine.act([request(listed, t, f"g/{member}/{t}")])[0].parsed.kind for t in range(4)]
        length = kinds.index("stop") + 1
        assert length in (1, 4) and kinds[:length - 1] == ["click"] * (length - 1)
        seen.add(length)
    assert seen == {1, 4}  # both lengths drawn over 12 episodes


@pytest.mark.browser
def test_raw_floor_replays_the_episode_lengths():
    out = bench.bench_raw(slots=2, browsers=1, episodes=4, lengths=[3, 1], seed=0)
    # slot 0 gets episodes 0 and 2 with lengths[0::2] = [3]; slot 1 episodes 1 and 3 with [1]:
    # 3 + 3 + 1 + 1 = 8 steps (each L - 1 clicks and the stop), 4 resets
    assert out["steps"] == 8 and out["resets"] == 4 and out["wall_s"] > 0


def test_rows_are_saved_as_they_are_measured_and_a_rerun_measures_only_the_missing(tmp_path, monkeypatch):
    calls = []

    def job(threads, run_dir):
        calls.append(("job", threads))
        return {"per_iteration": [1.0, 2.0], "episode_lengths": [2, 3]}

    def raw(slots, browsers, episodes, lengths, seed):
        calls.append(("raw", browsers, tuple(lengths)))
        if browsers == 2:
            raise KeyboardInterrupt  # the session stops during the second floor
        return {"steps": 10, "resets": 4, "wall_s": 2.0}

    def instant(slots, threads, episodes, lengths, seed, run_dir):
        calls.append(("instant", threads))
        return {"steps": 8, "resets": 4, "wall_s": 2.0}

    monkeypatch.setattr(bench, "bench_job", job)
    monkeypatch.setattr(bench, "bench_raw", raw)
    monkeypatch.setattr(bench, "bench_instant", instant)
    argv = ["--slots", "2", "--threads", "0", "--out", str(tmp_path)]
    with pytest.raises(KeyboardInterrupt):
        bench.main(argv)
    import json

    saved = json.loads((tmp_path / "result.json").read_text())
    assert list(saved["rows"]) == ["main job, env.threads=0", "raw Playwright, 1 browser(s)"] and saved["partial"]
    assert calls == [("job", 0), ("raw", 1, (2, 3)), ("raw", 2, (2, 3))]  # the floors replay the job's lengths
    calls.clear()
    monkeypatch.setattr(bench, "bench_raw", lambda *a: calls.append(("raw", a[1])) or {"steps": 12, "resets": 4,
                                                                                          "wall_s": 2.0})
    assert bench.main(argv) == 0
    assert calls == [("raw", 2), ("instant", 0)]  # the job and the first floor were kept
    final = json.loads((tmp_path / "result.json").read_text())
    assert final["rows"]["raw Playwright, 2 browser(s)"]["steps_per_s"] == 6.0 and "partial" not in final
    assert final["rows"]["main job, env.threads=0"]["steps_per_reset"] == 2.5  # (2 + 3) / 2 episodes


# -- the real-Chromium sweep (benchmarks/chromium_slots.py): its pure parts ------------------------
slots_bench = bench.chromium_slots


def test_projection_is_the_previous_points_mib_per_slot_times_slots_plus_the_margin():
    previous = {"env_mb_per_slot": 250.0}
    assert slots_bench.projected_mb(previous, 16) == 250.0 * 16 + 2048.0 == 6048.0
    assert slots_bench.projected_mb(None, 16) == 2048.0  # before the first point: the margin alone
    # 6048 MiB needed: 6048 available goes on (not over), 6047 stops
    assert slots_bench.stop_reason(previous, 16, 6048.0) == ""
    reason = slots_bench.stop_reason(previous, 16, 6047.0)
    assert reason == "16 slots: projected 6048 MiB (250 MiB/slot x 16 + 2048 margin) > 6047 MiB available"
    assert slots_bench.stop_reason(None, 4, 2000.0).startswith("4 slots: projected 2048 MiB (2048 margin)")


def test_point_row_divides_the_env_memory_by_slots_and_counts_by_the_window():
    mib = 2**20
    row = slots_bench.point_row(slots=8, steps=120, resets=40, window_s=30.0, env_bytes=2000 * mib,
                                memory_kind="pss", driver_rss=600 * mib, available_before=10_000 * mib,
                                available_at_end=7_500 * mib)
    # 120 steps / 30 s = 4 steps/s; 120 / 40 resets = 3 steps per reset; 2000 MiB / 8 slots = 250 MiB
    assert row["steps_per_s"] == 4.0 and row["steps_per_reset"] == 3.0
    assert row["env_mb"] == 2000.0 and row["env_mb_per_slot"] == 250.0
    assert row["driver_rss_mb"] == 600.0 and row["available_before_mb"] == 10_000.0
    assert row["available_at_end_mb"] == 7_500.0
    assert slots_bench.point_row(1, 0, 0, 10.0, 0, "pss", 0, 0, 0)["steps_per_reset"] == 0.0  # no reset: no 0-division


def test_calls_are_counted_by_when_they_were_sent():
    stamps = [("reset", 0.5), ("step", 1.0), ("step", 2.0), ("reset", 2.5), ("step", 3.0), ("ping", 2.2)]
    assert slots_bench.calls_in_window(stamps, 1.0, 3.0) == (2, 1)  # [1, 3): the step at 3.0 is out


def test_stamped_worker_stamps_each_call_and_forwards_it():
    sent = []

    class Method:
        def __init__(self, name):
            self.name = name

        def remote(self, *args):
            sent.append((self.name, args))
            return f"ref-{self.name}"

    handle = SimpleNamespace(reset=Method("reset"), step=Method("step"))
    stamps = []
    worker = slots_bench.StampedWorker(handle, stamps)
    assert worker.step.remote(3, "click(1)") == "ref-step" and worker.reset.remote(0, None, {}) == "ref-reset"
    assert sent == [("step", (3, "click(1)")), ("reset", (0, None, {}))]
    assert [kind for kind, _ in stamps] == ["step", "reset"] and stamps[0][1] <= stamps[1][1]


def test_summed_memory_is_pss_and_falls_back_to_rss_for_every_process():
    import psutil

    class Process:
        def __init__(self, pss, rss):
            self.pss, self.rss = pss, rss

        def memory_full_info(self):
            if self.pss is None:
                raise psutil.AccessDenied()
            return SimpleNamespace(pss=self.pss, rss=self.rss)

        def memory_info(self):
            return SimpleNamespace(rss=self.rss)

    class Gone:
        def memory_full_info(self):
            raise psutil.NoSuchProcess(1)

        memory_info = memory_full_info

    assert slots_bench.summed_memory([Process(100, 300), Process(50, 200), Gone()]) == (150, "pss")
    # one unreadable PSS: RSS of all three (never PSS of some plus RSS of others)
    assert slots_bench.summed_memory([Process(100, 300), Process(None, 200), Process(10, 40)]) == (540, "rss")


def fake_point(slots):
    return {"slots": slots, "env_mb_per_slot": 300.0}


def test_sweep_stops_before_a_point_the_memory_cannot_hold():
    measured, saves = [], []

    def measure(slots):
        measured.append(slots)
        return fake_point(slots)

    # 4 slots: 2048 needed; 8: 300 x 8 + 2048 = 4448; 16: 300 x 16 + 2048 = 6848 > 5000 available
    reason = slots_bench.sweep([4, 8, 16, 24], [], measure, lambda: 5000.0,
                               lambda points, stopped: saves.append(([p["slots"] for p in points], stopped)))
    assert measured == [4, 8]
    assert reason == "16 slots: projected 6848 MiB (300 MiB/slot x 16 + 2048 margin) > 5000 MiB available"
    assert saves == [([4], ""), ([4, 8], ""), ([4, 8], reason)]  # saved after each point, and the stop


def test_sweep_rerun_skips_the_points_already_measured_and_projects_from_them():
    measured = []
    points = [fake_point(4), fake_point(16)]
    available = iter([3300.0, 1e9, 1e9])  # asked once per point to run: 8; then 8 and 24

    def measure(slots):
        measured.append(slots)
        return fake_point(slots)

    # 8 projects from 4 (the largest measured below it): 300 x 8 + 2048 = 4448 > 3300
    reason = slots_bench.sweep([4, 8, 16, 24], points, measure, lambda: next(available), lambda *a: None)
    assert measured == [] and reason.startswith("8 slots: projected 4448 MiB")
    reason = slots_bench.sweep([4, 8, 16, 24], points, measure, lambda: next(available), lambda *a: None)
    assert measured == [8, 24] and reason == ""  # 4 and 16 were kept, not measured
    assert [p["slots"] for p in points] == [4, 8, 16, 24]


def point(slots, seconds):
    """A measured point: 30 steps, 10 resets, 100 MiB per slot."""
    return {**slots_bench.point_row(slots, 30, 10, seconds, slots * 100 * 2**20, "pss", 0, 0, 0), "browsers": 4}


def test_chromium_sweep_resumes_from_result_json_and_keeps_the_files_other_rows(tmp_path, monkeypatch):
    import json

    settings = {"lengths": [3], "seed": 0, "seconds": 30.0, "warmup_s": 10.0}
    (tmp_path / "result.json").write_text(json.dumps({"rows": {"raw Playwright, 1 browser(s)": {"steps_per_s": 9.0}},
                                                      "chromium_settings": settings,
                                                      "chromium_points": [point(4, 30.0)]}))
    runs = []

    def run_point(slots, engine_factory, make_tasks, max_turns, seed, seconds, warmup_s, run_dir):
        runs.append((slots, max_turns, seconds))
        return point(slots, seconds)

    monkeypatch.setattr(slots_bench, "run_point", run_point)
    monkeypatch.setattr(bench, "bench_raw", lambda *a: pytest.fail("the sweep runs alone"))
    assert bench.main(["--chromium-slots", "4", "8", "--out", str(tmp_path)]) == 0
    assert runs == [(8, 3, 30.0)]  # 4 was in result.json with the same settings
    saved = json.loads((tmp_path / "result.json").read_text())
    assert [p["slots"] for p in saved["chromium_points"]] == [4, 8] and saved["chromium_stopped"] == ""
    assert saved["chromium_points"][1]["env_mb_per_slot"] == 100.0
    assert saved["rows"] == {"raw Playwright, 1 browser(s)": {"steps_per_s": 9.0}}  # untouched
    assert "| 8 | 4 | 1.00 | 3.00 | 100 |" in (tmp_path / "chromium_slots.md").read_text()
    runs.clear()
    bench.main(["--chromium-slots", "4", "8", "--chromium-seconds", "20", "--out", str(tmp_path)])
    assert runs == [(4, 3, 20.0), (8, 3, 20.0)]  # other settings: measured again

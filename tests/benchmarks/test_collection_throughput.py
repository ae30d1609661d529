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

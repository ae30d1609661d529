"""benchmarks/collection_throughput.py: the instant policy's decisions and a tiny raw-floor run."""
from types import SimpleNamespace

import pytest

from tests.benchmarks.helpers import load_benchmark

bench = load_benchmark("collection_throughput")


def request(elements_text: str, turns: int, request_id: str = "g/0/0"):
    observation = SimpleNamespace(elements_text=elements_text)
    return SimpleNamespace(observation=observation, history=[None] * turns, request_id=request_id)


def test_instant_policy_clicks_listed_ids_then_stops():
    engine = bench.InstantEngine(clicks=2, seed=0)
    listed = "[3] button 'Go'\n[7] link 'Home'\n  [9] is not at a line start"
    first, second, third = engine.act([request(listed, 0), request(listed, 1), request(listed, 2)])
    assert first.parsed.kind == second.parsed.kind == "click"
    assert {first.parsed.element, second.parsed.element} <= {3, 7}
    assert third.parsed.kind == "stop"
    (nothing,) = engine.act([request("", 0)])  # no element listed: stop at once
    assert nothing.parsed.kind == "stop"
    # seeded by request id: the same request, the same click
    assert engine.act([request(listed, 0, "g/1/0")])[0].parsed == engine.act([request(listed, 0, "g/1/0")])[0].parsed


@pytest.mark.browser
def test_raw_floor_counts_each_click_and_the_stop():
    out = bench.bench_raw(slots=2, browsers=1, episodes=2, clicks=2, seed=0)
    assert out["steps"] == 6 and out["wall_s"] > 0  # 2 episodes x (2 clicks + stop): widgets pages list controls

"""benchmarks/env_soak.py: its episode bookkeeping, its arguments, and a 3-episode soak in Chromium."""
from types import SimpleNamespace

import pytest

from tests.benchmarks.helpers import load_benchmark

bench = load_benchmark("env_soak")


def result(terminated=False, truncated=False, **info):
    return SimpleNamespace(terminated=terminated, truncated=truncated, info=info)


def test_outcome_of_each_end():
    assert bench.outcome(result(terminated=True)) == "done"
    assert bench.outcome(result(truncated=True, infra_error="page_crashed: renderer")) == "infra_error"
    assert bench.outcome(result(truncated=True)) == "truncated"  # the step limit
    assert bench.outcome(result()) is None  # still running


def test_bad_pages_argument_names_the_allowed_ones(capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(["--pages", "ok,boom"])
    assert "unknown ['boom']; allowed: ['ok', 'hang_js', 'hang_server', 'crash', 'popups']" in capsys.readouterr().err


@pytest.mark.browser
@pytest.mark.slow
def test_three_episodes_end_and_leave_no_browser(tmp_path):
    from webrl.envs import BrowserSession

    # seed 2 over pages ok+crash draws crash, crash, ok (random.Random(2).choices, weights 0.6 / 0.1)
    args = bench.parse_args(["--episodes", "3", "--slots", "1", "--threads", "1", "--pages", "ok,crash",
                             "--seed", "2", "--probe-every", "0", "--quiet"])
    other = BrowserSession()  # a browser of this process that is not the soak's (a suite's fixture)
    other.start()
    try:
        out = bench.run(args)
        assert other.is_alive()
    finally:
        other.close()
    assert out["episodes_finished"] == 3 and out["lost"] == 0 and out["stuck_slots"] == []
    # the renderer died twice: infra_error, never an exception; the next episode is a normal one
    assert out["outcomes_by_page"] == {"crash": {"infra_error": 2}, "ok": {"done": 1}}
    assert out["infra_error_reasons"] == {"crash: page_crashed": 2}
    assert [m["episode"] for m in out["memory"]][:2] == [0, 1]
    assert out["orphans"]["chromium_descendants_after_close"] == 0
    assert out["orphans"]["seen_chromium_pids_alive_after_close"] == 0

"""benchmarks/learning.py: a run's summary from its files (values worked out by hand), the
verdict's thresholds, the CPU meter counting a grandchild, the recipe resolving to a valid
config with the objective and seed last, and the table / plot / --from-json."""
import json
import resource
import subprocess
import sys

import pytest

from tests.benchmarks.helpers import load_benchmark


@pytest.fixture(scope="module")
def lb():
    return load_benchmark("learning")


def _run_folder(path, before, after, greedy=(0.5, 0.75)):
    path.mkdir(parents=True)
    rows = [{"label": "before", "iteration": 0, "outcomes": [[t, 0.0] for t, _ in before], "sampled": before},
            {"label": "iteration 16", "iteration": 16, "outcomes": [[t, 0.0] for t, _ in after], "sampled": after}]
    (path / "eval_outcomes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    metrics = [{"stage": "eval", "label": "before", "success": greedy[0], "time": 10.0},
               {"stage": "rl", "iteration": 1, "time": 20.0},
               {"stage": "eval", "label": "iteration 16", "success": greedy[1], "time": 90.0}]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    return path


def test_summary_by_hand(lb, tmp_path):
    # 13 tasks: 11 rise by 0.25, 1 falls by 0.25, 1 ties; one task all dropped before RL leaves
    # the pairs (it would add 1.0 to an unpaired "after" mean, as the curve's point shows)
    before = [[f"t{i}", 0.25] for i in range(13)] + [["gone", None]]
    after = [[f"t{i}", 0.5] for i in range(11)] + [["t11", 0.0], ["t12", 0.25], ["gone", 1.0]]
    s = lb.summarize("grpo", 3, _run_folder(tmp_path / "r", before, after), cpu_s=900.0, wall_s=600.0)
    assert s["sampled"] == [(0, 0.25), (16, pytest.approx((11 * 0.5 + 0.0 + 0.25 + 1.0) / 14))]
    assert (s["up"], s["down"]) == (11, 1)
    # twelve changes of equal size: the sign-flip test equals the sign test,
    # P(X >= 11 | n=12) x 2 = 2 (12 + 1) / 4096: 0.0063
    assert s["p"] == pytest.approx(2 * 13 / 2 ** 12) and s["sign_p"] == pytest.approx(2 * 13 / 2 ** 12)
    assert s["rise"] == pytest.approx((11 * 0.25 - 0.25) / 13)  # paired: 0.192 >= 0.15 (unpaired means: 0.232)
    assert s["greedy"] == [(0, 0.5), (16, 0.75)]
    assert s["passed"]


@pytest.mark.parametrize("change, why", [({"cpu_s": 1801.0}, "CPU over the budget"),
                                         ({"after": 0.375}, "rise 0.125 < 0.15"),
                                         ({"few": True}, "p = 0.065 >= 0.01")])
def test_verdict_fails_on_each_threshold(lb, tmp_path, change, why):
    n = 5 if change.get("few") else 12  # 5 of 5 up: p = 2/32
    before = [[f"t{i}", 0.25] for i in range(n)]
    after = [[f"t{i}", change.get("after", 0.5)] for i in range(n)]
    s = lb.summarize("ppo", 0, _run_folder(tmp_path / "r", before, after), cpu_s=change.get("cpu_s", 10.0), wall_s=1.0)
    assert not s["passed"], why


def test_rise_and_test_weigh_each_tasks_change(lb, tmp_path):
    # changes +0.75 (x4) and -0.25: mean +0.55. In quarters the observed sum is 3+3+3+3-1 = 11;
    # of the 32 sign flips, |sum| >= 11 only when the four 3s share a sign (12 +- 1): 2 x 2 = 4,
    # so p = 4/32. The sign test over 4 up, 1 down gives 2 (5 + 1) / 32 = 12/32
    before = [[f"t{i}", 0.0] for i in range(4)] + [["t4", 0.5]]
    after = [[f"t{i}", 0.75] for i in range(4)] + [["t4", 0.25]]
    s = lb.summarize("grpo", 1, _run_folder(tmp_path / "r", before, after), cpu_s=1.0, wall_s=1.0)
    assert s["rise"] == pytest.approx(0.55) and (s["up"], s["down"]) == (4, 1)
    assert s["p"] == pytest.approx(4 / 32) and s["sign_p"] == pytest.approx(12 / 32)


def test_cpu_meter_counts_a_grandchild(lb):
    burn = "x = 0\nfor i in range(4 * 10 ** 6): x += i * i"
    child = subprocess.Popen([sys.executable, "-c",
                              f"import subprocess, sys, time; time.sleep(0.3); subprocess.run([sys.executable, '-c', {burn!r}])"])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    meter = lb.CpuMeter(child.pid, interval_s=0.02)
    child.wait()
    seen = meter.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the child and, reaped by it, the grandchild
    reaped = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert reaped > 0.1
    assert 0.5 * reaped <= seen <= reaped + 0.05  # the grandchild's burn is most of it; at most one interval lost


def test_recipe_resolves_with_the_run_keys_last(lb, tmp_path):
    from webrl.config import load_config
    from webrl.run.config import WebRLConfig

    keys = lb.run_overrides("ppo", 2, tmp_path / "run", ["learner.objective=grpo", "run.seed=9"])
    assert keys[-3:] == ["learner.objective=ppo", "run.seed=2", f"run.run_dir={tmp_path / 'run'}"]
    config = load_config(WebRLConfig, "default", keys)
    assert (config.learner.objective, config.run.seed) == ("ppo", 2)
    assert config.eval.samples_per_task > 0 and config.trainer.eval_every > 0
    with pytest.raises(ValueError, match="objective must be one of"):
        lb.run_overrides("dpo", 0, tmp_path, [])


def test_table_plot_and_from_json(lb, tmp_path):
    runs = [{"objective": "grpo", "seed": 0, "sampled": [(0, 0.25), (8, 0.375), (16, 0.5)], "greedy": [(0, 0.5), (16, 0.75)],
             "rise": 0.25, "up": 10, "down": 1, "p": 0.0117, "sign_p": 0.0117, "cpu_s": 900.0, "wall_s": 600.0, "passed": False},
            {"objective": "ppo", "seed": 0, "sampled": [(0, 0.25), (16, 0.5)], "greedy": [(0, 0.5), (16, 0.5)],
             "rise": 0.25, "up": 12, "down": 0, "p": 0.00049, "cpu_s": 1000.0, "wall_s": 700.0, "passed": True},
            {"objective": "ppo", "seed": 1, "sampled": [(0, 0.5), (16, 0.75)], "greedy": [(0, 0.5), (16, 0.5)],
             "rise": 0.25, "up": 12, "down": 0, "p": 0.00049, "cpu_s": 1000.0, "wall_s": 700.0, "passed": True}]
    text = lb.write(tmp_path, runs)
    assert "| grpo | 0 | 0.250 | 0.500 | +0.250 | 10 / 1 | 0.012 | 0.012 | 0.500 -> 0.750 | 900 | 600 | no |" in text
    assert "| before RL | 0.250 (1 seeds) | 0.375 (2 seeds) |" in text
    assert "| 8 | 0.375 (1 seeds) | - |" in text
    assert (tmp_path / "learning.png").stat().st_size > 0
    (tmp_path / "learning.md").unlink()
    assert lb.main(["--from-json", str(tmp_path / "learning.json")]) == 0
    assert (tmp_path / "learning.md").read_text().strip() == text

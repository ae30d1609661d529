"""benchmarks/learning_curve.py: paired task flips from a run's eval_outcomes.jsonl, the sign
test, and the table's pooled line (values worked out by hand)."""
import json

import pytest

from tests.benchmarks.helpers import load_benchmark



@pytest.fixture(scope="module")
def lc():
    return load_benchmark("learning_curve")


def test_flips_pair_tasks_in_order_and_skip_dropped(lc, tmp_path):
    f = tmp_path / "eval_outcomes.jsonl"
    rows = [{"label": "before", "iteration": 0, "outcomes": [["a", 0.0], ["b", 1.0], ["c", 0.0], ["d", None]]},
            {"label": "iteration 4", "iteration": 4, "outcomes": [["a", 1.0], ["b", 0.0], ["c", 1.0], ["d", 1.0]]},
            {"label": "iteration 8", "iteration": 8, "outcomes": [["a", 1.0], ["b", 1.0], ["c", None], ["d", 0.0]]}]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # iteration 4: a and c up, b down, d dropped before; iteration 8: a up, b same, c dropped now
    assert lc.flips(f) == [(4, 2, 1), (8, 1, 0)]
    assert lc.flips(tmp_path / "missing.jsonl") == []


def test_sign_test_by_hand(lc):
    assert lc.sign_test(0, 0) == 1.0
    assert lc.sign_test(1, 1) == 1.0  # 2 * P(X >= 1 | n=2) = 2 * 3/4, capped
    assert lc.sign_test(5, 0) == pytest.approx(2 / 32)  # 2 * (1/2)^5
    assert lc.sign_test(6, 2) == pytest.approx(2 * (28 + 8 + 1) / 256)  # P(X >= 6 | n=8) = 37/256
    assert lc.sign_test(2, 6) == lc.sign_test(6, 2)


def test_table_pools_flips_over_seeds(lc):
    runs = [{"seed": 0, "points": [(0, 0.5, 0.0), (4, 0.75, 10.0)], "wall_s": 20.0, "flips": [(4, 2, 1)]},
            {"seed": 1, "points": [(0, 0.25, 0.0), (4, 0.5, 12.0)], "wall_s": 30.0, "flips": [(4, 3, 0)]}]
    text = lc.table(runs, eval_tasks=4)
    assert "| 4 | 0.750 | 0.500 | 0.625 | 11 |" in text
    assert f"Iteration 4 vs before, all seeds: 5 tasks up, 1 down (two-sided sign test p = {2 * 7 / 64:.3f})" in text


def test_sampled_points_and_shifts_by_hand(lc, tmp_path):
    f = tmp_path / "eval_outcomes.jsonl"
    rows = [{"label": "before", "iteration": 0, "outcomes": [["a", 0.0], ["b", 1.0], ["c", 0.0]],
             "sampled": [["a", 0.25], ["b", 1.0], ["c", None]]},
            {"label": "iteration 8", "iteration": 8, "outcomes": [["a", 0.0], ["b", 1.0], ["c", 0.0]],
             "sampled": [["a", 0.75], ["b", 0.5], ["c", 0.5]]}]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # before: mean of 0.25 and 1.0 (c all dropped); after: (0.75 + 0.5 + 0.5) / 3
    assert lc.sampled_points(f) == [(0, 0.625), (8, pytest.approx(1.75 / 3))]
    assert lc.sampled_shifts(f) == [(8, 1, 1)]  # a rose, b fell, c not comparable
    runs = [{"seed": 0, "points": [(0, 0.5, 0.0), (8, 0.5, 9.0)], "wall_s": 9.0, "flips": [(8, 0, 0)],
             "sampled": lc.sampled_points(f), "sampled_shifts": [(8, 4, 0)]},
            {"seed": 1, "points": [(0, 0.5, 0.0), (8, 0.5, 9.0)], "wall_s": 9.0, "flips": [(8, 0, 0)],
             "sampled": [(0, 0.5), (8, 0.75)], "sampled_shifts": [(8, 2, 1)]}]
    text = lc.table(runs, eval_tasks=3)
    assert "| 8 | 0.583 | 0.750 | 0.667 |" in text
    assert f"sampled success rose on 6 tasks, fell on 1 (two-sided sign test p = {2 * 8 / 128:.3f})" in text
    assert lc.sampled_points(tmp_path / "missing.jsonl") == [] and lc.sampled_shifts(tmp_path / "missing.jsonl") == []

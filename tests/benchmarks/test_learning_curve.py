"""benchmarks/learning_curve.py: paired task flips from a run's eval_outcomes.jsonl, the sign
test, the table's pooled line (values worked out by hand), the plot's lines and --from-json."""
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


def test_time_without_sampled_evaluations(lc, tmp_path):
    f = tmp_path / "metrics.jsonl"
    rows = [{"time": 0.0, "stage": "eval", "label": "before", "success": 0.5, "time_eval_s": 60.0,
             "time_eval_sampled_s": 250.0},
            {"time": 400.0, "iteration": 1, "time_collect_s": 80.0},
            {"time": 700.0, "stage": "eval", "label": "iteration 1", "success": 0.5, "time_eval_s": 61.0,
             "time_eval_sampled_s": 240.5}]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert lc.sampled_eval_seconds(f) == 490.5
    runs = [{"seed": 3, "points": lc.eval_points(f), "wall_s": 1000.0, "flips": [], "sampled_eval_s": 490.5}]
    assert "greedy evaluations only) (s): 3: 510" in lc.table(runs, eval_tasks=2)
    assert "greedy evaluations only" not in lc.table([{**runs[0], "sampled_eval_s": 0.0}], eval_tasks=2)


def _colour_count(path, rgb) -> int:
    from PIL import Image

    return dict((c, n) for n, c in Image.open(path).convert("RGB").getcolors(maxcolors=1 << 20)).get(rgb, 0)


def test_plot_draws_the_sampled_lines_only_when_sampled(lc, tmp_path):
    greedy = [{"seed": 0, "points": [(0, 0.5, 0.0), (8, 0.5, 9.0)]}, {"seed": 1, "points": [(0, 0.25, 0.0), (8, 0.5, 9.0)]}]
    lc.plot(greedy, tmp_path / "g.png")
    assert _colour_count(tmp_path / "g.png", (0x80, 0x80, 0x80)) == 0  # no sampled mean
    assert _colour_count(tmp_path / "g.png", (0, 0, 0)) > 100  # axes, labels and the greedy mean
    both = [{**r, "sampled": [(0, 0.3), (8, 0.6)]} for r in greedy]
    lc.plot(both, tmp_path / "s.png")
    grey = _colour_count(tmp_path / "s.png", (0x80, 0x80, 0x80))
    # the dashed mean from x=50 to x=590 (540 px, 8 of every 14 drawn) at width 4: a few hundred px
    assert 500 < grey < 540 * 4


def test_from_json_rewrites_the_table_and_plot_without_running(lc, tmp_path):
    runs = [{"seed": 0, "points": [[0, 0.5, 0.0], [8, 0.75, 9.0]], "wall_s": 9.0, "flips": [[8, 1, 0]],
             "sampled": [[0, 0.5], [8, 0.625]], "sampled_shifts": [[8, 2, 0]]}]
    (tmp_path / "curve.json").write_text(json.dumps({"eval_tasks": 4, "runs": runs}))
    assert lc.main(["--from-json", str(tmp_path / "curve.json")]) == 0
    assert "| 8 | 0.750 | 0.750 | 9 |" in (tmp_path / "curve.md").read_text()
    assert _colour_count(tmp_path / "curve.png", (0x80, 0x80, 0x80)) > 0

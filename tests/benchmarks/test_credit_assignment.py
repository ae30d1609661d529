"""benchmarks/credit_assignment.py: a run folder's summary (success, flips, informative groups per
iteration and per collection minute), the table's per-method means and pooled sign test (values
worked out by hand), the bar chart, resuming a partial comparison without re-running done pairs."""
import json

import pytest

from tests.benchmarks.helpers import load_benchmark


@pytest.fixture(scope="module")
def ca():
    return load_benchmark("credit_assignment")


def fake_run(folder, before, after, informative, collect_s, outcomes):
    """A run folder as the trainer writes it: eval rows, RL rows, eval_outcomes.jsonl."""
    folder.mkdir(parents=True)
    rows = [{"stage": "eval", "label": "before", "success": before, "time": 0.0}]
    rows += [{"iteration": i + 1, "informative_groups": g, "time_collect_s": collect_s, "time": 10.0 * (i + 1)}
             for i, g in enumerate(informative)]
    rows.append({"stage": "eval", "label": "after", "success": after, "time": 99.0})  # as Trainer.fit labels it
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    evals = [{"label": "before", "iteration": 0, "outcomes": outcomes[0]},
             {"label": "after", "iteration": len(informative), "outcomes": outcomes[1]}]
    (folder / "eval_outcomes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))


def test_summary_of_a_run_folder_by_hand(ca, tmp_path):
    fake_run(tmp_path / "r", 0.25, 0.5, [3.0, 5.0], 30.0,
             ([["a", 0.0], ["b", 1.0], ["c", 0.0], ["d", 0.0]], [["a", 1.0], ["b", 0.0], ["c", 1.0], ["d", 0.0]]))
    s = ca.summarize_run(tmp_path / "r")
    # 8 informative groups over 2 x 30 s of collection = 8 per minute; a, c up, b down
    assert (s["before"], s["after"], s["up"], s["down"], s["iterations"]) == (0.25, 0.5, 2, 1, 2)
    assert s["informative_groups"] == [3.0, 5.0] and s["informative_per_min"] == pytest.approx(8.0)


def test_table_means_over_seeds_and_pools_flips(ca, tmp_path):
    results = [{"method": "grpo", "seed": 0, "before": 0.5, "after": 0.5, "up": 1, "down": 1, "wall_s": 100.0,
                "informative_groups": [2.0, 4.0], "informative_per_min": 3.0},
               {"method": "ppo", "seed": 0, "before": 0.5, "after": 0.75, "up": 3, "down": 0, "wall_s": 120.0,
                "informative_groups": [6.0, 6.0], "informative_per_min": 5.0},
               {"method": "ppo", "seed": 1, "before": 0.25, "after": 0.5, "up": 2, "down": 0, "wall_s": 140.0,
                "informative_groups": [4.0, 4.0], "informative_per_min": 4.0}]
    text = ca.table(results, ["grpo", "ppo"])
    assert "| grpo | 0 | 0.500 | 0.500 | +0.000 | 1 / 1 (p = 1.000) | 3.00 | 3.00 | 100 |" in text
    # ppo: before (0.5 + 0.25) / 2, after (0.75 + 0.5) / 2, 5 up 0 down: p = 2 / 32
    assert f"| ppo | 0,1 | 0.375 | 0.625 | +0.250 | 5 / 0 (p = {2 / 32:.3f}) | 5.00 | 4.50 | 130 |" in text
    ca.plot(results, ["grpo", "ppo"], tmp_path / "bars.png")
    from PIL import Image

    with Image.open(tmp_path / "bars.png") as im:
        assert im.size == (320, 320) and (40, 90, 200) in {c for _, c in im.getcolors(10_000)}


def test_a_partial_comparison_continues_and_refuses_other_settings(ca, tmp_path, monkeypatch):
    ran = []

    def fake_run_one(config, method, seed, out, overrides):
        ran.append((method, seed))
        return {"method": method, "seed": seed, "before": 0.5, "after": 0.5, "up": 0, "down": 0, "wall_s": 1.0,
                "informative_groups": [1.0], "informative_per_min": 1.0}

    monkeypatch.setattr(ca, "run_one", fake_run_one)
    out = str(tmp_path / "cmp")
    assert ca.main(["--methods", "grpo", "ppo", "--seeds", "0", "--out", out]) == 0
    assert ca.main(["--methods", "grpo", "ppo", "--seeds", "0", "1", "--out", out]) == 0
    assert ran == [("grpo", 0), ("ppo", 0), ("grpo", 1), ("ppo", 1)]  # seed 0 was not run again
    assert len(json.loads((tmp_path / "cmp" / "results.json").read_text())["results"]) == 4
    with pytest.raises(SystemExit, match="holds runs of config 'level0'"):
        ca.main(["--seeds", "0", "--out", out, "trainer.iterations=2"])


def test_report_rereads_the_run_folders(ca, tmp_path):
    out = tmp_path / "cmp"
    fake_run(out / "ppo-seed0", 0.25, 0.75, [2.0], 60.0, ([["a", 0.0]], [["a", 1.0]]))
    stale = {"method": "ppo", "seed": 0, "before": 0.25, "after": None, "up": 0, "down": 0, "wall_s": 9.0,
             "informative_groups": [], "informative_per_min": 0.0}
    (out / "results.json").write_text(json.dumps({"config": "default", "overrides": [], "results": [stale]}))
    assert ca.main(["--out", str(out), "--report"]) == 0
    (got,) = json.loads((out / "results.json").read_text())["results"]
    assert (got["after"], got["up"], got["wall_s"], got["informative_per_min"]) == (0.75, 1, 9.0, 2.0)


def test_every_method_selects_what_it_names_in_the_default_config(ca):
    from webrl.config import load_config
    from webrl.run.config import WebRLConfig

    configs = {m: load_config(WebRLConfig, "default", overrides) for m, overrides in ca.METHODS.items()}
    assert configs["grpo"].learner.objective == "grpo" and not configs["grpo"].dyna.enabled
    assert configs["ppo"].learner.objective == "ppo" and configs["ppo"].learner.value_head
    assert configs["grpo_step"].learner.step.weight == 1.0
    assert configs["grpo_balanced"].rollout.balanced.enabled
    assert configs["grpo_dyna"].dyna.enabled and not configs["grpo_dyna"].dyna.train_collected
    assert configs["grpo_dyna_collected"].dyna.enabled and configs["grpo_dyna_collected"].dyna.train_collected

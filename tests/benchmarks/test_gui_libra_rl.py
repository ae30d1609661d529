"""benchmarks/gui_libra_rl.py: the arms differ only in the KL settings; correlations and ranks
worked out by hand; one arm's rows from a stand-in trainer (no Ray, no browser); the table."""
import dataclasses
import json
import math
from pathlib import Path

import pytest

from tests.benchmarks.helpers import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("gui_libra_rl")


@pytest.mark.slow  # about 6 s: the config's imports
def test_arms_share_the_run_and_differ_only_in_the_kl(bench, tmp_path):
    args = bench.parse_args(["--heldout", "/demos", "--iterations", "2", "--kl-coef", "0.05"])
    cfg = {arm: bench.arm_config(arm, args, tmp_path / "run") for arm in bench.ARMS}
    losses = {arm: c.learner.loss for arm, c in cfg.items()}
    assert (losses["kl_off"].kl_coef, losses["kl_loss"].kl_coef, losses["kl_reward"].kl_coef) == (0.0, 0.05, 0.05)
    assert (losses["kl_loss"].kl_mode, losses["kl_reward"].kl_mode) == ("loss", "reward")
    assert {c.learner.reference for c in cfg.values()} == {"copy"}  # kl_off too: its KL is logged, not applied
    off = cfg["kl_off"]
    for arm in ("kl_loss", "kl_reward"):  # put the off arm's loss back: everything else is the same run
        assert dataclasses.replace(cfg[arm], learner=dataclasses.replace(cfg[arm].learner, loss=losses["kl_off"])) == off
    # the default run (shipped checkpoint, widgets level 0, GRPO) with a checkpoint and an evaluation every
    # iteration, all checkpoints kept
    assert off.model.path == "webrl:tiny-webagent-pointer" and off.tasks.sites == ["widgets"]
    assert off.tasks.train_levels == [0] and off.learner.objective == "grpo" and off.run.seed == 0
    assert (off.trainer.iterations, off.trainer.eval_every, off.trainer.checkpoint_every) == (2, 1, 1)
    assert off.learner.checkpoint.keep_last == 2 and (off.tasks.tasks_per_iteration, off.tasks.eval_tasks) == (4, 24)


def test_bad_arm_and_coefficient_are_refused(bench):
    with pytest.raises(ValueError, match=r"arm must be one of \['kl_loss', 'kl_off', 'kl_reward'\], got 'kl'"):
        bench.arm_overrides("kl", 0.05)
    with pytest.raises(ValueError, match="kl_coef must be > 0"):
        bench.arm_overrides("kl_loss", 0.0)
    with pytest.raises(SystemExit):
        bench.parse_args(["--heldout", "/demos", "--iterations", "0"])


def test_ranks_pearson_spearman_by_hand(bench):
    assert bench.ranks([3, 1, 3]) == [2.5, 1.0, 2.5]
    # x = 1, 2, 3; y = 1, 2, 4: sxy = 3, sxx = 2, syy = 42 / 9, r = 3 / sqrt(28 / 3); the ranks agree: rho = 1
    assert bench.pearson([1, 2, 3], [1, 2, 4]) == pytest.approx(3 / math.sqrt(28 / 3))
    assert bench.spearman([1, 2, 3], [1, 2, 4]) == pytest.approx(1.0)
    # ties: ranks x = 1, 2.5, 2.5, 4 and y = 1.5, 3.5, 1.5, 3.5: sxy = 3, sxx = 4.5, syy = 4, rho = 3 / sqrt(18)
    assert bench.spearman([0.5, 0.6, 0.6, 0.7], [0, 1, 0, 1]) == pytest.approx(3 / math.sqrt(18))
    assert bench.pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert bench.pearson([1, 2, 3], [0.5, 0.5, 0.5]) is None and bench.pearson([1, 2], [1, 2]) is None
    with pytest.raises(ValueError, match="equal lengths"):
        bench.pearson([1, 2, 3], [1, 2])


def test_correlations_use_rows_with_both_figures(bench):
    # the two rows with a missing figure are left out; the other three lie on a line: r = rho = 1
    rows = [{"step_accuracy": 0.5, "success": 0.25}, {"step_accuracy": 0.6, "success": None},
            {"step_accuracy": 0.7, "success": 0.5}, {"step_accuracy": None, "success": 0.0},
            {"step_accuracy": 0.9, "success": 0.75}]
    c = bench.correlations(rows)
    assert c["n"] == 3 and c["pearson"] == pytest.approx(1.0) and c["spearman"] == pytest.approx(1.0)


class FakeLearner:
    def save(self, path):
        Path(path, "hf").mkdir(parents=True)
        Path(path, "hf", "config.json").write_text("{}")
        return str(path)


class FakeTrainer:
    """What run_arm uses of Trainer: prepare, before, model_path, step (with eval_every=1), save, close."""

    made = []

    def __init__(self, config):
        self.config, self.iteration, self.learner, self.closed = config, 0, FakeLearner(), False
        self.before, self.model_path = None, "/shipped/hf"
        FakeTrainer.made.append(self)

    def prepare(self, evaluate_before=False):
        if evaluate_before:
            self.before = {"success": 0.5, "dropped": 0.0}

    def step(self):
        self.iteration += 1
        return {"iteration": self.iteration, "kl": 1e-3 * self.iteration, "eval_success": 0.5 + 0.125 * self.iteration,
                "eval_dropped": 0.0, "reward/mean": 0.25, "informative_groups": 2.0}

    def save(self, path):
        return self.learner.save(path)

    def close(self):
        self.closed = True


def test_one_arm_rows_from_a_stand_in_trainer(bench, tmp_path, monkeypatch):
    import importlib

    import webrl.run.trainer

    monkeypatch.setattr(webrl.run.trainer, "Trainer", FakeTrainer)
    gui_libra = importlib.import_module("gui_libra")  # benchmarks/ is on sys.path once the benchmark loads
    seen = []

    def fake_step_accuracy(path, config, heldout):
        seen.append(path)
        return {"steps": len(heldout), "step_accuracy": 0.5 + 0.1 * len(seen), "element_accuracy": 0.25}

    monkeypatch.setattr(gui_libra, "step_accuracy", fake_step_accuracy)
    args = bench.parse_args(["--heldout", "/demos", "--iterations", "2", "--work", str(tmp_path)])
    rows = bench.run_arm("kl_loss", args, ["t1", "t2"], evaluate_before=True)
    assert FakeTrainer.made[-1].closed and FakeTrainer.made[-1].config.learner.loss.kl_mode == "loss"
    ckpt = tmp_path / "kl_loss" / "checkpoints"
    assert seen == ["/shipped/hf", str(ckpt / "step-00000001" / "hf"), str(ckpt / "step-00000002" / "hf")]
    assert [(r["arm"], r["iteration"], r["success"], r["kl"]) for r in rows] == [
        ("shipped", 0, 0.5, 0.0), ("kl_loss", 1, 0.625, 1e-3), ("kl_loss", 2, 0.75, 2e-3)]
    assert [r["step_accuracy"] for r in rows] == pytest.approx([0.6, 0.7, 0.8]) and rows[1]["train_reward"] == 0.25
    text = bench.table(rows, 24)
    assert "| shipped | 0 | 0.600 | 0.250 | 0.500 | 0.00e+00 |" in text
    assert "| kl_loss | 2 | 0.800 | 0.250 | 0.750 | 2.00e-03 |" in text
    assert "over all 3 checkpoints (iteration 0 once): Pearson r = 1.000, Spearman rho = 1.000" in text
    json.dumps(rows)  # results.json takes them as they are

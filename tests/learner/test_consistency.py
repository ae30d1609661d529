"""Rollout-vs-learner consistency (webrl.learner.consistency): the metrics by hand, the alarm, and on
a real learner rank: on-policy samples within tolerance, a changed image or a stale rollout alarmed."""
from __future__ import annotations

import dataclasses

import pytest

from webrl.learner import LearnerSample
from webrl.learner.consistency import ConsistencyConfig, logprob_mismatch, mismatch_alarm
from webrl.types import Image


def sample(rollout, turn_index=0, images=False):
    pic = [Image.from_array(__import__("numpy").zeros((4, 4, 3), dtype="uint8"))] if images else []
    return LearnerSample([1, 2], list(range(10, 10 + len(rollout))), rollout_logprobs=list(rollout),
                         images=pic, turn_index=turn_index)


def test_metrics_by_hand():
    samples = [sample([-1.0, -2.0], turn_index=0, images=True),     # |d| = 0.5, 0.5  -> turn mean 0.5
               sample([-1.0], turn_index=1),                         # |d| = 0.0       -> 0.0
               sample([-1.0, -1.0, -1.0, -1.0], turn_index=6),       # |d| = 0.2 x 4   -> 0.2
               LearnerSample([1], [5], turn_index=2)]                # no rollout log-probs: skipped
    learner = [[-1.5, -1.5], [-1.0], [-0.8, -1.2, -0.8, -1.2], [-3.0]]
    m = logprob_mismatch(samples, learner, turn_threshold=0.1)
    assert m["mismatch_abs_mean"] == pytest.approx((0.5 + 0.5 + 0.0 + 0.8) / 7)
    assert m["mismatch_abs_max"] == pytest.approx(0.5)
    assert m["mismatch_turns"] == 3 and m["mismatch_turns_over"] == pytest.approx(2 / 3)
    assert m["mismatch_abs_mean_images"] == pytest.approx(0.5)
    assert m["mismatch_abs_mean_text"] == pytest.approx(0.1)
    assert m["mismatch_abs_mean_turn0"] == pytest.approx(0.5) and m["mismatch_abs_mean_turn1"] == 0.0
    assert m["mismatch_abs_mean_turn4plus"] == pytest.approx(0.2) and "mismatch_abs_mean_turn2" not in m
    assert logprob_mismatch([LearnerSample([1], [5])], [[-1.0]], 0.1) == {}
    with pytest.raises(ValueError, match="2 entries for 1 response tokens"):
        logprob_mismatch([sample([-1.0])], [[-1.0, -1.0]], 0.1)
    with pytest.raises(ValueError, match="1 entries for 2 response tokens"):
        logprob_mismatch([sample([-1.0, -1.0])], [[-1.0]], 0.1)


def test_alarm_fires_past_the_fraction_and_names_where():
    config = ConsistencyConfig(turn_threshold=0.1, alarm_fraction=0.5)
    samples = [sample([-1.0], images=True), sample([-1.0])]
    assert mismatch_alarm(logprob_mismatch(samples, [[-1.5], [-1.0]], 0.1), config) is None  # 1 of 2: not > 0.5
    alarm = mismatch_alarm(logprob_mismatch(samples, [[-1.5], [-1.3]], 0.1), config)
    assert alarm.startswith("rollout and learner log-probs disagree on 100% of 2 turns")
    assert "images 0.5" in alarm and "text 0.3" in alarm and "min_pixels" in alarm


def test_config_is_validated():
    for bad, key in ((dict(every=-1), "every"), (dict(turn_threshold=0), "turn_threshold"),
                     (dict(alarm_fraction=1.0), "alarm_fraction")):
        with pytest.raises(ValueError, match=f"ConsistencyConfig.{key}"):
            ConsistencyConfig(**bad)


@pytest.mark.slow
def test_on_a_learner_rank_on_policy_is_within_tolerance_and_mismatches_alarm(tiny_qwen25vl_path, capsys):
    from tests.learner.helpers import learner_config, learner_run, make_samples, screenshot, with_rollout_logprobs
    from webrl.learner import LearnerGroup
    from webrl.learner.config import BatchingConfig
    from webrl.models import load_model

    _, processor = load_model(tiny_qwen25vl_path)
    config = learner_config(objective="grpo", zero_stage=0, batching=BatchingConfig(token_budget=10_000, mini_batches=2),
                            consistency=ConsistencyConfig(turn_threshold=1e-3, alarm_fraction=0.0))
    group = LearnerGroup(config, learner_run(tiny_qwen25vl_path), 1, use_ray=False)
    try:
        samples = make_samples(processor, 4)
        on_policy = with_rollout_logprobs(samples, group.compute_logprobs(samples).logprobs)
        metrics = group.update(on_policy)  # two mini-batches: start-of-update log-probs are computed
        assert metrics["mismatch_turns"] == 4 and metrics["mismatch_abs_max"] < 1e-4
        assert metrics["mismatch_alarm"] == 0.0 and "ALARM" not in capsys.readouterr().out
        # at the current weights, the rollout saw other screenshots of the same size (so the same
        # placeholder count, which the image-token check cannot catch): a changed image
        other = [dataclasses.replace(s, images=[screenshot(1000 + i)]) for i, s in enumerate(samples)]
        changed = with_rollout_logprobs(samples, group.compute_logprobs(other).logprobs)
        metrics = group.update(changed)
    finally:
        group.shutdown()
    assert metrics["mismatch_alarm"] == 1.0 and metrics["mismatch_abs_mean_images"] > 1e-3
    assert "webrl: ALARM at policy version 1: rollout and learner log-probs disagree" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("every, checked", [(0, False), (1, True)])
def test_every_adds_the_check_to_single_step_updates(tiny_qwen25vl_path, every, checked):
    from tests.learner.helpers import learner_config, learner_run, make_samples, with_rollout_logprobs
    from webrl.learner import LearnerGroup
    from webrl.models import load_model

    _, processor = load_model(tiny_qwen25vl_path)
    group = LearnerGroup(learner_config(objective="grpo", zero_stage=0, consistency=ConsistencyConfig(every=every)),
                         learner_run(tiny_qwen25vl_path), 1, use_ray=False)
    try:
        samples = make_samples(processor, 2)
        metrics = group.update(with_rollout_logprobs(samples, group.compute_logprobs(samples).logprobs))
    finally:
        group.shutdown()
    assert metrics["optimizer_steps"] == 1.0 and ("mismatch_abs_mean" in metrics) == checked

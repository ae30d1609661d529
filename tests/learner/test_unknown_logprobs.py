"""A turn whose engine could not report its sampling log-probs (a cascade head turn scored on an
SGLang server at a temperature other than 1) trains with the learner's start-of-update log-probs as
its old policy, never with zeros (which would make the PPO ratio exp(log pi))."""
import pytest

from tests.learner.helpers import learner_config, learner_run, make_samples, with_rollout_logprobs
from webrl.learner import LearnerGroup
from webrl.models import load_model


def test_missing_rollout_logprobs_are_the_learners_at_the_start_of_the_update(tiny_qwen25vl_path):
    _, processor = load_model(tiny_qwen25vl_path)
    group = LearnerGroup(learner_config(), learner_run(tiny_qwen25vl_path), 1, use_ray=False)
    try:
        samples = make_samples(processor, 4)
        start = group.compute_logprobs(samples).logprobs
        known = with_rollout_logprobs(samples[:2], start[:2])
        prepared, metrics = group._prepare([*known, *samples[2:]])
        assert metrics["rollout_logprobs_filled"] == 2.0
        for s, lp in zip(prepared, start):
            assert s.rollout_logprobs == pytest.approx(lp.tolist(), abs=1e-6)
        # with every log-prob known nothing is filled (and one step needs no start-of-update pass)
        prepared, metrics = group._prepare(with_rollout_logprobs(samples, start))
        assert "rollout_logprobs_filled" not in metrics
    finally:
        group.shutdown()

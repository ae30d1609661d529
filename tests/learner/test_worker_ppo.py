"""PPO on the same learner, with Qwen3-VL: value head, frozen reference copy for the KL term,
PPO epochs x mini-batches with proximal log-probs. One rank in this process."""
import dataclasses

import pytest
import torch

from tests.learner.helpers import learner_config, learner_run, make_samples, naive_logprobs
from webrl.algos import PPOConfig
from webrl.learner import LearnerGroup
from webrl.learner.config import BatchingConfig
from webrl.models import load_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ppo_setup(tiny_qwen3vl_path):
    _, processor = load_model(tiny_qwen3vl_path)
    ppo = PPOConfig(value_clip_eps=None)
    ppo.loss.kl_coef = 0.05
    config = learner_config(objective="ppo", value_head=True, reference="copy", ppo=ppo, zero_stage=0,
                            batching=BatchingConfig(token_budget=10_000, ppo_epochs=2, mini_batches=2))
    group = LearnerGroup(config, learner_run(tiny_qwen3vl_path), 1, use_ray=False)
    yield group, processor
    group.shutdown()


def test_qwen3vl_logprobs_equal_full_logits_reference(ppo_setup, tiny_qwen3vl_path):
    group, processor = ppo_setup
    model, _ = load_model(tiny_qwen3vl_path)
    samples = make_samples(processor, 3, seed=1)
    for sample, got in zip(samples, group.compute_logprobs(samples).logprobs):
        torch.testing.assert_close(torch.from_numpy(got), naive_logprobs(model, processor, sample, 1.0),
                                   atol=2e-5, rtol=0)


def test_ppo_update_trains_value_head_and_keeps_reference_fixed(ppo_setup):
    group, processor = ppo_setup
    samples = make_samples(processor, 6)
    start = group.compute_logprobs(samples)
    assert start.values == [0.0] * 6  # zero-initialised value head
    # returns +-1 (the helper's advantages), old values 0: the value loss must fall
    samples = [dataclasses.replace(s, rollout_logprobs=lp.tolist(), old_value=0.0, value_return=s.advantage)
               for s, lp in zip(samples, start.logprobs)]
    first = group.update(samples)
    second = group.update(samples)
    assert first["optimizer_steps"] == 4  # 2 epochs x 2 mini-batches
    assert second["value_loss"] < first["value_loss"], (first["value_loss"], second["value_loss"])
    assert "kl" in first and first["kl"] >= 0.0
    values = group.compute_logprobs(samples).values
    error = sum(abs(v - s.value_return) for v, s in zip(values, samples))
    assert error < 6.0  # |0 - (+-1)| summed over 6 samples was 6 before training
    reference = group.compute_logprobs(samples, reference=True).logprobs
    for ref, initial in zip(reference, start.logprobs):  # the frozen copy never moves
        assert torch.equal(torch.from_numpy(ref), torch.from_numpy(initial))
    assert group.policy_version == 2

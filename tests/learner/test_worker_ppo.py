"""PPO on the same learner, with Qwen3-VL: value head, frozen reference copy for the KL term,
PPO epochs x mini-batches with proximal log-probs. One rank in this process."""
import dataclasses

import pytest
import torch

from tests.learner.helpers import learner_config, learner_run, make_samples, naive_logprobs, with_rollout_logprobs
from webrl.algos import PolicyLossConfig
from webrl.learner import LearnerGroup
from webrl.learner.config import BatchingConfig, PPOValueConfig
from webrl.models import load_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ppo_setup(tiny_qwen3vl_path):
    _, processor = load_model(tiny_qwen3vl_path)
    config = learner_config(objective="ppo", reference="copy", ppo=PPOValueConfig(value_clip_eps=None),
                            loss=PolicyLossConfig(kl_coef=0.05), zero_stage=0,
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
    samples = outcome_samples(processor, [1.0, -1.0] * 3)
    start = group.compute_logprobs(samples)
    assert start.values == [0.0] * 6  # zero-initialised value head
    # one-turn trajectories with rewards +-1: returns +-1 whatever the values, so the value loss must fall
    samples = with_rollout_logprobs(samples, start.logprobs)
    first = group.update(samples)
    second = group.update(samples)
    assert first["optimizer_steps"] == 4  # 2 epochs x 2 mini-batches
    assert second["value_loss"] < first["value_loss"], (first["value_loss"], second["value_loss"])
    assert "kl" in first and first["kl"] >= 0.0
    values = group.compute_logprobs(samples).values
    error = sum(abs(v - s.reward) for v, s in zip(values, samples))
    assert error < 6.0  # |0 - (+-1)| summed over 6 samples was 6 before training
    reference = group.compute_logprobs(samples, reference=True).logprobs
    for ref, initial in zip(reference, start.logprobs):  # the frozen copy never moves
        assert torch.equal(torch.from_numpy(ref), torch.from_numpy(initial))
    assert group.policy_version == 2


# -- PPO through the learner's own start-of-update pass: old values, GAE, resume, ZeRO-3 ----------
def outcome_samples(processor, rewards, turns=1, images=True):
    """`len(rewards)` trajectories of `turns` turn samples each, trajectory k's reward on its last
    turn (as `webrl.learner.credit.ppo_stage` gives them); advantage 0 until GAE fills it in."""
    samples = make_samples(processor, len(rewards) * turns, images=images)
    return [dataclasses.replace(s, trajectory_index=i // turns, group_index=0, turn_index=i % turns, advantage=0.0,
                                reward=rewards[i // turns] if i % turns == turns - 1 else 0.0)
            for i, s in enumerate(samples)]


def ppo_config(**batching):
    return learner_config(objective="ppo", zero_stage=batching.pop("zero_stage", 1),
                          ppo=PPOValueConfig(gamma=0.9, lam=0.5, whiten_advantages=False, value_clip_eps=None),
                          batching=BatchingConfig(token_budget=10_000, **batching))


def test_the_update_takes_old_values_from_its_first_pass_and_gae_from_them(tiny_qwen3vl_path):
    """After one update the value head is non-zero; the next update's samples get old_value =
    the head's values at its start and the GAE of those values (hand formula of test_credit)."""
    from webrl.learner.credit import gae_stage

    _, processor = load_model(tiny_qwen3vl_path)
    group = LearnerGroup(ppo_config(mini_batches=2), learner_run(tiny_qwen3vl_path), 1, use_ray=False)
    try:
        samples = outcome_samples(processor, [1.0, 0.0], turns=3)
        start = group.compute_logprobs(samples)
        assert start.values == [0.0] * 6  # zero-initialised head: returns = rewards + 0
        samples = with_rollout_logprobs(samples, start.logprobs)
        first = group.update(samples)
        assert first["return_max"] == pytest.approx(1.0) and first["return_min"] == 0.0
        values = group.compute_logprobs(samples).values
        assert any(abs(v) > 1e-4 for v in values)
        prepared, metrics = group._prepare(samples)
        expected, _ = gae_stage(samples, values, group.config.objective_config)
        assert [s.old_value for s in prepared] == pytest.approx(values, abs=1e-6)
        assert [s.advantage for s in prepared] == pytest.approx([s.advantage for s in expected], abs=1e-6)
        v = values[3:]  # the failure's turns: r = 0, so delta_2 = -V_2, delta_1 = 0.9 V_2 - V_1, ...
        a2 = -v[2]
        a1 = 0.9 * v[2] - v[1] + 0.45 * a2
        assert [s.advantage for s in prepared[3:]] == pytest.approx([0.9 * v[1] - v[0] + 0.45 * a1, a1, a2], abs=1e-6)
        assert "mismatch_abs_mean" in metrics and all(s.proximal_logprobs for s in prepared)
    finally:
        group.shutdown()


def test_the_value_head_learns_a_constant_return(tiny_qwen3vl_path):
    """Six one-turn trajectories, all with reward 0.7: every return is 0.7 whatever the values
    (gamma^0 r), so the value head must move from 0 to 0.7."""
    _, processor = load_model(tiny_qwen3vl_path)
    config = ppo_config()
    config.optim = dataclasses.replace(config.optim, lr=2e-2, scheduler="linear", total_steps=50)  # decays to 0
    group = LearnerGroup(config, learner_run(tiny_qwen3vl_path), 1, use_ray=False)
    try:
        samples = outcome_samples(processor, [0.7] * 6)
        for _ in range(50):
            samples = with_rollout_logprobs(samples, group.compute_logprobs(samples).logprobs)
            group.update(samples)
        values = group.compute_logprobs(samples).values
        assert values == pytest.approx([0.7] * 6, abs=0.05), values
    finally:
        group.shutdown()


def _two_updates(config, run, processor, checkpoint=None, resume=False):
    """Update 1 on batch one, save (or, resuming, load) at `checkpoint`, update 2 on batch two.
    Returns (update-2 metrics, model state, value head state)."""
    group = LearnerGroup(config, run, 1, use_ray=False)
    try:
        one, two = outcome_samples(processor, [1.0, 0.0], turns=2), outcome_samples(processor, [0.0, 1.0, 1.0])
        if resume:
            group.load(checkpoint)
        else:
            group.update(with_rollout_logprobs(one, group.compute_logprobs(one).logprobs))
            group.save(checkpoint)
        metrics = group.update(with_rollout_logprobs(two, group.compute_logprobs(two).logprobs))
        return metrics, group.full_state_dict(), group.value_head_state()
    finally:
        group.shutdown()


def test_a_resumed_ppo_update_equals_the_uninterrupted_one(tiny_qwen3vl_path, tmp_path):
    _, processor = load_model(tiny_qwen3vl_path)
    config, run = ppo_config(ppo_epochs=2, mini_batches=2), learner_run(tiny_qwen3vl_path)
    checkpoint = str(tmp_path / "step-00000001")
    straight = _two_updates(config, run, processor, checkpoint)
    resumed = _two_updates(config, run, processor, checkpoint, resume=True)
    assert resumed[0]["policy_version"] == straight[0]["policy_version"] == 2.0
    for key in ("loss", "value_loss", "pg_loss", "advantage_raw_mean", "return_mean"):
        assert resumed[0][key] == straight[0][key], key
    assert straight[2]["weight"].abs().sum() > 0  # the head trained in update 1, and resumed with it
    for got, want in ((resumed[1], straight[1]), (resumed[2], straight[2])):
        for name in want:
            assert torch.equal(got[name], want[name]), name


@pytest.mark.timeout(480)
def test_ppo_on_two_zero3_ranks_trains_like_one_rank(tiny_qwen3vl_path):
    """Values, GAE and the value loss under ZeRO-3 on 2 ranks (the value head sharded with the
    rest) give the single-rank ZeRO-1 update (tolerance as in test_zero3_ranks)."""
    _, processor = load_model(tiny_qwen3vl_path)
    samples = outcome_samples(processor, [1.0, 0.0, 1.0], turns=2)
    run = learner_run(tiny_qwen3vl_path)
    results = []
    for ranks, stage in ((2, 3), (1, 1)):
        config = ppo_config(zero_stage=stage, mini_batches=2)
        if stage == 3:
            config.deepspeed_overrides = {"zero_optimization": {"stage3_param_persistence_threshold": 0}}
        group = LearnerGroup(config, run, ranks, use_ray=False)
        try:
            batch = with_rollout_logprobs(samples, group.compute_logprobs(samples).logprobs)
            metrics = [group.update(batch) for _ in range(2)]
            results.append((metrics, group.full_state_dict(), group.value_head_state(),
                            group.compute_logprobs(samples).values))
        finally:
            group.shutdown()
    (zero3, state3, head3, values3), (zero1, state1, head1, values1) = results
    for key in ("loss", "value_loss", "return_mean"):
        assert [m[key] for m in zero3] == pytest.approx([m[key] for m in zero1], abs=1e-5), key
    assert values3 == pytest.approx(values1, abs=1e-5) and any(abs(v) > 1e-4 for v in values1)
    for got, want in ((state3, state1), (head3, head1)):
        for name in want:
            torch.testing.assert_close(got[name], want[name], atol=2e-6, rtol=0, msg=name)

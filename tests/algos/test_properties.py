"""Hypothesis property tests: shapes, finiteness and invariants over random inputs."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from webrl.algos import (ADVANTAGE_ESTIMATORS, LOSS_AGGREGATIONS, OBJECTIVES, BatchExtras, GRPOConfig,
                         LearnerOutputs, PolicyLossConfig, PPOConfig, SFTConfig, aggregate, loss_scale, turn_gae,
                         zero_variance_filter)
from webrl.types import Batch

FAST = settings(max_examples=40, deadline=None)

rewards_and_groups = st.integers(1, 16).flatmap(lambda n: st.tuples(
    st.lists(st.sampled_from([-1.0, 0.0, 0.5, 1.0, 3.0]) | st.floats(-5, 5), min_size=n, max_size=n),
    st.lists(st.integers(0, 4), min_size=n, max_size=n)))


@FAST
@given(rewards_and_groups, st.sampled_from(sorted(ADVANTAGE_ESTIMATORS)))
def test_advantages_finite_zero_mean_per_group(data, name):
    rewards, groups = torch.tensor(data[0]), torch.tensor(data[1])
    adv = ADVANTAGE_ESTIMATORS[name](rewards, groups, eps=1e-6)
    assert adv.shape == rewards.shape and torch.isfinite(adv).all()
    for g in groups.unique():
        rows = groups == g
        assert abs(float(adv[rows].sum())) < 1e-3 * max(1.0, float(adv[rows].abs().sum()))
        if rows.sum() == 1:
            assert float(adv[rows]) == 0.0


@FAST
@given(rewards_and_groups)
def test_filter_keeps_exactly_groups_with_distinct_rewards(data):
    rewards, groups = torch.tensor(data[0]), torch.tensor(data[1])
    keep, dropped = zero_variance_filter(rewards, groups)
    flat_groups = 0
    for g in groups.unique():
        rows = groups == g
        flat = float(rewards[rows].max() - rewards[rows].min()) <= 1e-6  # the filter's default atol
        flat_groups += flat
        assert bool(keep[rows].any()) is not flat and bool(keep[rows].all()) is not flat
    assert dropped == flat_groups


@FAST
@given(st.integers(1, 5), st.integers(1, 6), st.floats(0.0, 1.0), st.integers(0, 10_000))
def test_constant_loss_aggregates_to_that_constant(B, T, density, seed):
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.rand(B, T, generator=gen) < density).float()
    traj = torch.randint(0, 3, (B,), generator=gen)
    n = mask.sum(-1)
    for mode in LOSS_AGGREGATIONS:
        value = float(aggregate(torch.full((B, T), 2.5), mask, loss_scale(mask, mode, trajectory_index=traj,
                                                                            constant=4.0)))
        if mask.sum() == 0:
            assert value == 0.0
        elif mode in ("token-mean", "seq-mean-token-mean", "traj-mean-token-mean"):
            assert value == pytest.approx(2.5)
        else:  # mean over non-empty samples of 2.5 * n_b, over C for the norm mode
            expect = float((2.5 * n[n > 0]).mean()) / (4.0 if mode == "seq-mean-token-sum-norm" else 1.0)
            assert value == pytest.approx(expect)


@FAST
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(-2, 2), st.floats(-2, 2)), min_size=1, max_size=12))
def test_gae_with_unit_gamma_lambda_is_reward_to_go_minus_value(turns):
    index = torch.tensor([k for k, _, _ in turns])
    rewards = torch.tensor([r for _, r, _ in turns], dtype=torch.float64)
    values = torch.tensor([v for _, _, v in turns], dtype=torch.float64)
    adv, ret = turn_gae(rewards, values, index, gamma=1.0, lam=1.0)
    for i in range(len(turns)):
        later = [j for j in range(i, len(turns)) if turns[j][0] == turns[i][0]]
        assert float(ret[i]) == pytest.approx(sum(turns[j][1] for j in later), abs=1e-9)
    torch.testing.assert_close(adv, ret - values)


@FAST
@given(st.integers(1, 5), st.integers(1, 8), st.floats(0.0, 1.0), st.sampled_from([1.0, 100.0, 1e4]),
       st.sampled_from(sorted(OBJECTIVES)), st.sampled_from(sorted(LOSS_AGGREGATIONS)), st.integers(0, 10_000))
def test_objectives_scalar_finite_with_finite_grads(B, T, density, spread, name, mode, seed):
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.rand(B, T, generator=gen) < density).float()
    old = -torch.rand(B, T, generator=gen) * spread
    batch = Batch(input_ids=torch.ones(B, T, dtype=torch.long), attention_mask=torch.ones(B, T, dtype=torch.long),
                  loss_mask=mask, old_logprobs=old, advantages=torch.randn(B, T, generator=gen) * spread,
                  ref_logprobs=-torch.rand(B, T, generator=gen) * spread,
                  group_index=torch.zeros(B, dtype=torch.long), trajectory_index=torch.randint(0, 3, (B,), generator=gen))
    logp = (-torch.rand(B, T, generator=gen) * spread).requires_grad_(True)
    entropy = torch.rand(B, T, generator=gen).requires_grad_(True)
    values = (torch.randn(B, generator=gen) * spread).requires_grad_(True)
    extras = BatchExtras(proximal_logprobs=-torch.rand(B, T, generator=gen) * spread,
                         old_values=torch.randn(B, generator=gen), returns=torch.randn(B, generator=gen) * spread,
                         action_mask=torch.rand(B, T, generator=gen) < 0.5, coordinate_mask=torch.rand(B, T, generator=gen) < 0.3)
    loss_cfg = PolicyLossConfig(aggregation=mode, kl_coef=0.1, entropy_coef=0.01, dual_clip_c=3.0, tis_cap=2.0)
    config = {"grpo": GRPOConfig(loss=loss_cfg), "ppo": PPOConfig(loss=loss_cfg), "sft": SFTConfig()}[name]
    loss, metrics = OBJECTIVES[name](LearnerOutputs(logp, entropy, values), batch, config, extras=extras)
    assert loss.shape == () and math.isfinite(float(loss.detach()))
    assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())
    loss.backward()
    for t in (logp, entropy, values):
        assert t.grad is None or torch.isfinite(t.grad).all()
    if mask.sum() == 0:
        assert float(loss.detach()) == 0.0

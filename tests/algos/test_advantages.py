"""Advantage estimators against hand-computed values, plus edge cases."""
import math

import pytest
import torch

from webrl.algos import (ADVANTAGE_ESTIMATORS, GroupAdvantageConfig, broadcast_to_tokens, broadcast_to_turns,
                         drgrpo_advantages, group_success_rate, grpo_advantages, outcome_turn_rewards,
                         rloo_advantages, scale_negative_advantages, turn_gae, whiten, zero_variance_filter)

# One group of G=5 with rewards [1, 0, 0, 1, 1]: mean 0.6, deviations +0.4 / -0.6,
# unbiased variance (3 * 0.16 + 2 * 0.36) / 4 = 0.3, std = 0.547723.
R5 = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0])
G5 = torch.zeros(5, dtype=torch.long)


def test_grpo_hand_values():
    adv = grpo_advantages(R5, G5, eps=0.0)
    # +0.4 / 0.547723 = 0.730297, -0.6 / 0.547723 = -1.095445
    expected = torch.tensor([0.730297, -1.095445, -1.095445, 0.730297, 0.730297])
    torch.testing.assert_close(adv, expected, atol=1e-5, rtol=0)


def test_drgrpo_hand_values():
    # mean-centred only: r - 0.6
    torch.testing.assert_close(drgrpo_advantages(R5, G5), torch.tensor([0.4, -0.6, -0.6, 0.4, 0.4]))


def test_rloo_hand_values():
    # r=1: others [0, 0, 1, 1] mean 0.5 -> 0.5; r=0: others [1, 1, 1, 0] mean 0.75 -> -0.75
    torch.testing.assert_close(rloo_advantages(R5, G5), torch.tensor([0.5, -0.75, -0.75, 0.5, 0.5]))


def test_groups_with_arbitrary_ids_are_separate():
    # group 7 holds rewards [1, 0], group 3 holds [0, 2]. Two rewards a, b: mean (a+b)/2,
    # unbiased std |a-b|/sqrt(2), so GRPO gives +-1/sqrt(2) whatever the gap.
    rewards = torch.tensor([1.0, 0.0, 0.0, 2.0])
    groups = torch.tensor([7, 3, 7, 3])
    s = 1 / math.sqrt(2)
    torch.testing.assert_close(grpo_advantages(rewards, groups, eps=0.0), torch.tensor([s, -s, -s, s]))
    torch.testing.assert_close(drgrpo_advantages(rewards, groups), torch.tensor([0.5, -1.0, -0.5, 1.0]))
    # RLOO with G=2: r_i - r_other
    torch.testing.assert_close(rloo_advantages(rewards, groups), torch.tensor([1.0, -2.0, -1.0, 2.0]))


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_group_of_one_and_equal_rewards_give_zero_not_nan(name):
    estimator = ADVANTAGE_ESTIMATORS[name]
    single = estimator(torch.tensor([0.7]), torch.tensor([0]), eps=1e-6)
    assert single.tolist() == [0.0]
    flat = estimator(torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0]), torch.tensor([0, 0, 0, 1, 1]), eps=1e-6)
    assert torch.equal(flat, torch.zeros(5))
    # eps=0 on a zero-variance group still must not produce 0/0
    assert torch.isfinite(estimator(torch.tensor([1.0, 1.0]), torch.tensor([4, 4]), eps=0.0)).all()


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_estimators_are_zero_mean_per_group(name):
    rewards = torch.tensor([0.3, -1.0, 2.0, 0.0, 1.0, 1.0, 0.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    adv = ADVANTAGE_ESTIMATORS[name](rewards, groups, eps=1e-6)
    assert abs(float(adv[:3].sum())) < 1e-5 and abs(float(adv[3:].sum())) < 1e-5


def test_zero_variance_filter_keeps_mask_and_count():
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 5.0])
    groups = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 3])
    keep, dropped = zero_variance_filter(rewards, groups)
    # group 0 all ones, group 2 all zeros, group 3 a single trajectory -> 3 groups dropped
    assert keep.tolist() == [False, False, False, True, True, True, False, False, False]
    assert dropped == 3


def test_success_rate_and_negative_scaling_hand_values():
    p = group_success_rate(R5, G5, threshold=0.5)
    torch.testing.assert_close(p, torch.full((5,), 0.6))
    adv = grpo_advantages(R5, G5, eps=0.0)
    # linear, floor 0.25: s = 0.25 + 0.75 * 0.6 = 0.7; negatives -1.095445 * 0.7 = -0.766812
    scaled = scale_negative_advantages(adv, p, scale="linear", floor=0.25)
    torch.testing.assert_close(scaled, torch.tensor([0.730297, -0.766812, -0.766812, 0.730297, 0.730297]),
                               atol=1e-5, rtol=0)
    # sqrt: s = 0.25 + 0.75 * sqrt(0.6) = 0.830948
    scaled = scale_negative_advantages(adv, p, scale="sqrt", floor=0.25)
    torch.testing.assert_close(scaled[1], torch.tensor(-1.095445 * 0.830948), atol=1e-5, rtol=0)
    assert torch.equal(scale_negative_advantages(adv, p, scale="none"), adv)
    with pytest.raises(ValueError, match="allowed"):
        scale_negative_advantages(adv, p, scale="cubic")


def test_broadcast_turns_share_trajectory_advantage():
    traj_adv = torch.tensor([0.5, -1.0])
    trajectory_index = torch.tensor([0, 0, 0, 1, 1])
    per_turn = broadcast_to_turns(traj_adv, trajectory_index)
    assert per_turn.tolist() == [0.5, 0.5, 0.5, -1.0, -1.0]
    mask = torch.tensor([[0, 1, 1], [0, 0, 1], [1, 1, 0], [0, 1, 0], [0, 0, 0]], dtype=torch.float)
    tokens = broadcast_to_tokens(per_turn, mask)
    assert tokens.tolist() == [[0, 0.5, 0.5], [0, 0, 0.5], [0.5, 0.5, 0], [0, -1, 0], [0, 0, 0]]


def test_outcome_turn_rewards_on_last_turn_of_each_trajectory():
    # trajectories interleave: 0 at rows 0, 1, 3; 1 at rows 2, 4
    out = outcome_turn_rewards(torch.tensor([1.0, 1.0, -1.0, 1.0, -1.0]), torch.tensor([0, 0, 1, 0, 1]))
    assert out.tolist() == [0.0, 0.0, 0.0, 1.0, -1.0]


def test_turn_gae_hand_values():
    # rewards [0, 0, 1], values [0.5, 0.6, 0.7], gamma 0.9, lam 0.8 (gamma * lam = 0.72):
    # t2: delta = 1 - 0.7 = 0.3,               A2 = 0.3
    # t1: delta = 0.9 * 0.7 - 0.6 = 0.03,      A1 = 0.03 + 0.72 * 0.3 = 0.246
    # t0: delta = 0.9 * 0.6 - 0.5 = 0.04,      A0 = 0.04 + 0.72 * 0.246 = 0.21712
    adv, ret = turn_gae(torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.5, 0.6, 0.7]), torch.tensor([0, 0, 0]),
                        gamma=0.9, lam=0.8)
    torch.testing.assert_close(adv, torch.tensor([0.21712, 0.246, 0.3]))
    torch.testing.assert_close(ret, torch.tensor([0.71712, 0.846, 1.0]))


def test_turn_gae_monte_carlo_and_interleaving():
    # gamma = lam = 1: A_t = (sum of rewards from t on) - V_t
    adv, _ = turn_gae(torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.5, 0.6, 0.7]), torch.tensor([3, 3, 3]))
    torch.testing.assert_close(adv, torch.tensor([0.5, 0.4, 0.3]))
    # interleaving two trajectories gives each the same values as alone
    rewards = torch.tensor([0.0, 0.0, 0.0, 2.0, 1.0])
    values = torch.tensor([0.5, 1.0, 0.6, 1.0, 0.7])
    index = torch.tensor([0, 1, 0, 1, 0])
    adv, _ = turn_gae(rewards, values, index, gamma=0.9, lam=0.8)
    # trajectory 1: t1 delta = 2 - 1 = 1 -> 1; t0 delta = 0.9 - 1 = -0.1 -> -0.1 + 0.72 = 0.62
    torch.testing.assert_close(adv, torch.tensor([0.21712, 0.62, 0.246, 1.0, 0.3]))


def test_whiten():
    x = torch.tensor([1.0, 2.0, 3.0])  # mean 2, std 1
    torch.testing.assert_close(whiten(x, eps=0.0), torch.tensor([-1.0, 0.0, 1.0]))
    assert whiten(torch.tensor([4.0])).tolist() == [0.0]


def test_group_advantage_config_validation_names_field_and_allowed():
    with pytest.raises(ValueError, match=r"GroupAdvantageConfig.estimator.*'drgrpo'.*'grpo'.*'rloo'"):
        GroupAdvantageConfig(estimator="ppo")
    with pytest.raises(ValueError, match="GroupAdvantageConfig.negative_scale"):
        GroupAdvantageConfig(negative_scale="exp")
    with pytest.raises(ValueError, match="negative_scale_floor"):
        GroupAdvantageConfig(negative_scale_floor=1.5)


def test_grpo_identical_non_representable_rewards_are_exactly_zero():
    # 0.1 * 3 / 3 != 0.1 in floating point: the mean's rounding error must not be blown up to +-1
    adv = grpo_advantages(torch.tensor([0.1, 0.1, 0.1], dtype=torch.float64), torch.tensor([0, 0, 0]), eps=0.0)
    assert adv.tolist() == [0.0, 0.0, 0.0]

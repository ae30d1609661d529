"""GiGPO-style step-level advantages against hand-worked values, plus edge cases."""
import math

import pytest
import torch

from webrl.algos.advantages import broadcast_to_turns, grpo_advantages, outcome_turn_rewards
from webrl.algos.step_advantages import (StepAdvantageConfig, combine_advantages, discounted_step_returns,
                                         normalize_url, state_key, state_similarity, step_advantages,
                                         step_group_metrics, step_groups, step_relative_advantages)

# Toy site with three page states. One episode group of three trajectories, gamma = 0.5,
# outcome reward on the last turn:
#   traj 0: A -> B -> success (1)        returns R = [0.5, 1]
#   traj 1: A -> C -> B -> success (1)   returns R = [0.25, 0.5, 1]
#   traj 2: A -> C -> C -> failure (0)   returns R = [0, 0, 0]
# B is reached by traj 0 at step 1 and by traj 1 at step 2.
A = state_key("http://shop.test/", "[1] link \"Phones\"\n[2] link \"Laptops\"")
B = state_key("http://shop.test/phones", "[1] button \"Add to cart\"")
C = state_key("http://shop.test/laptops", "[1] button \"Back\"")
KEYS = [A, B, A, C, B, A, C, C]
TRAJ = torch.tensor([0, 0, 1, 1, 1, 2, 2, 2])
GROUP = torch.zeros(8, dtype=torch.long)
OUTCOME = torch.tensor([1.0, 1.0, 0.0])
TURN_REWARDS = torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
RETURNS = torch.tensor([0.5, 1.0, 0.25, 0.5, 1.0, 0.0, 0.0, 0.0])
# Step groups in order of first appearance: A -> 0, B -> 1, C -> 2.
TOY_GROUPS = torch.tensor([0, 1, 0, 2, 1, 0, 2, 2])
# mean_norm: A: R [0.5, 0.25, 0] mean 0.25 -> [0.25, 0, -0.25]; B: [1, 1] flat -> 0;
# C: R [0.5, 0, 0] mean 1/6 -> [1/3, -1/6, -1/6].
TOY_STEP_MEAN = torch.tensor([0.25, 0.0, 0.0, 1 / 3, 0.0, -0.25, -1 / 6, -1 / 6])


def test_toy_step_groups():
    assert step_groups(KEYS, GROUP).tolist() == TOY_GROUPS.tolist()


def test_toy_returns():
    torch.testing.assert_close(discounted_step_returns(TURN_REWARDS, TRAJ, gamma=0.5), RETURNS)


def test_toy_step_advantages_mean_norm():
    adv = step_relative_advantages(RETURNS, TOY_GROUPS, StepAdvantageConfig())
    torch.testing.assert_close(adv, TOY_STEP_MEAN)


def test_toy_step_advantages_mean_std_norm():
    # A: unbiased std of [0.5, 0.25, 0] is 0.25 -> [1, 0, -1].
    # C: deviations [1/3, -1/6, -1/6], var (1/9 + 2/36) / 2 = 1/12, std 0.288675
    #    -> [1.154701, -0.577350, -0.577350]. B stays 0.
    adv = step_relative_advantages(RETURNS, TOY_GROUPS, StepAdvantageConfig(std_normalize=True, eps=0.0))
    expected = torch.tensor([1.0, 0.0, 0.0, 1.154701, 0.0, -1.0, -0.577350, -0.577350])
    torch.testing.assert_close(adv, expected, atol=1e-5, rtol=0)


def test_toy_combined_advantages_and_metrics():
    # Episode level (GRPO, eps 0): rewards [1, 1, 0], mean 2/3, unbiased std 1/sqrt(3):
    # +1/sqrt(3) = 0.577350 for the successes, -2/sqrt(3) = -1.154701 for the failure.
    episode = broadcast_to_turns(grpo_advantages(OUTCOME, torch.zeros(3, dtype=torch.long), eps=0.0), TRAJ)
    turn_rewards = outcome_turn_rewards(OUTCOME[TRAJ], TRAJ)
    assert turn_rewards.tolist() == TURN_REWARDS.tolist()
    adv, step, metrics = step_advantages(episode, turn_rewards, KEYS, GROUP, TRAJ,
                                         StepAdvantageConfig(weight=1.0, gamma=0.5))
    s = 1 / math.sqrt(3)
    expected = torch.tensor([s + 0.25, s, s, s + 1 / 3, s, -2 * s - 0.25, -2 * s - 1 / 6, -2 * s - 1 / 6])
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(step, expected - episode)  # w = 1: the step part is the difference
    # step group sizes 3 (A), 2 (B), 3 (C): every turn shares its state with another one
    assert metrics == {"num_step_groups": 3.0, "step_group_size_mean": 8 / 3, "step_group_size_max": 3.0,
                       "step_grouped_fraction": 1.0}


def test_weight_zero_is_pure_grpo():
    episode = torch.tensor([0.3, 0.3, -0.7, -0.7, -0.7, 0.1, 0.1, 0.1])
    adv, _, _ = step_advantages(episode, TURN_REWARDS, KEYS, GROUP, TRAJ, StepAdvantageConfig())
    assert torch.equal(adv, episode)


def test_combine_advantages_formula_and_shape_check():
    combined = combine_advantages(torch.tensor([1.0, -1.0]), torch.tensor([0.5, 2.0]), 0.5)
    torch.testing.assert_close(combined, torch.tensor([1.25, 0.0]))
    with pytest.raises(ValueError, match="same shape"):
        combine_advantages(torch.zeros(2), torch.zeros(3), 1.0)


def test_interleaved_trajectories_give_the_same_returns():
    # The toy's turns in round-robin order (t0 of each, then t1, then t2); time order per trajectory kept.
    order = [0, 2, 5, 1, 3, 6, 4, 7]
    returns = discounted_step_returns(TURN_REWARDS[order], TRAJ[order], gamma=0.5)
    torch.testing.assert_close(returns, RETURNS[order])


def test_discounted_returns_dense_rewards_and_gamma_one():
    # traj 7: r = [1, 0, 2]; traj 3: r = [5] (interleaved)
    rewards = torch.tensor([1.0, 5.0, 0.0, 2.0])
    traj = torch.tensor([7, 3, 7, 7])
    # gamma 0.5: R2 = 2, R1 = 0 + 1 = 1, R0 = 1 + 0.5 = 1.5; traj 3: 5
    torch.testing.assert_close(discounted_step_returns(rewards, traj, gamma=0.5), torch.tensor([1.5, 5.0, 1.0, 2.0]))
    # gamma 1: plain sums of the rewards to go
    torch.testing.assert_close(discounted_step_returns(rewards, traj, gamma=1.0), torch.tensor([3.0, 5.0, 2.0, 2.0]))
    # gamma 0: the turn's own reward; integer rewards come back as float32
    returns = discounted_step_returns(torch.tensor([1, 5, 0, 2]), traj, gamma=0.0)
    assert returns.dtype == torch.float32 and returns.tolist() == [1.0, 5.0, 0.0, 2.0]


def test_discounted_returns_bad_input():
    with pytest.raises(ValueError, match="gamma"):
        discounted_step_returns(torch.zeros(2), torch.zeros(2, dtype=torch.long), gamma=1.5)
    with pytest.raises(ValueError, match="same 1-D shape"):
        discounted_step_returns(torch.zeros(2), torch.zeros(3, dtype=torch.long), gamma=0.5)


@pytest.mark.parametrize("std_normalize", [False, True])
def test_singleton_and_flat_step_groups_give_zero(std_normalize):
    # step group 4: one turn; step group 9: three equal returns (0.1 + 0.1 + 0.1 != 0.3 in floats,
    # so a plain r - mean would leave a rounding residue); step group 2: [1, 3] -> -1, +1
    # (mean norm) or -1/sqrt(2), +1/sqrt(2) (std 1.414214, eps 0).
    returns = torch.tensor([0.7, 0.1, 0.1, 0.1, 1.0, 3.0], dtype=torch.float64)
    groups = torch.tensor([4, 9, 9, 9, 2, 2])
    adv = step_relative_advantages(returns, groups, StepAdvantageConfig(std_normalize=std_normalize, eps=0.0))
    pair = 1 / math.sqrt(2) if std_normalize else 1.0
    assert adv[:4].tolist() == [0.0, 0.0, 0.0, 0.0]
    torch.testing.assert_close(adv[4:], torch.tensor([-pair, pair], dtype=torch.float64))
    assert not torch.isnan(adv).any()


def test_empty_batch():
    empty = torch.zeros(0)
    assert step_groups([], torch.zeros(0, dtype=torch.long)).numel() == 0
    assert step_relative_advantages(empty, torch.zeros(0, dtype=torch.long), StepAdvantageConfig()).numel() == 0
    assert step_group_metrics(torch.zeros(0, dtype=torch.long))["num_step_groups"] == 0.0


def test_step_groups_never_mix_episode_groups():
    # the same state in episode groups 5 and 8: two step groups, each of one turn -> advantage 0
    keys = [A, A, B]
    group_index = torch.tensor([5, 8, 5])
    groups = step_groups(keys, group_index)
    assert groups.tolist() == [0, 1, 2]
    adv = step_relative_advantages(torch.tensor([1.0, 0.0, 0.5]), groups, StepAdvantageConfig())
    assert adv.tolist() == [0.0, 0.0, 0.0]
    # the same holds in similarity mode
    assert step_groups(keys, group_index, similarity=0.5).tolist() == [0, 1, 2]


URL = "http://shop.test/form"
K1 = state_key(URL, "a\nb\nc\nd")
K2 = state_key(URL, "a\nb\nc\nX")  # one element line differs from K1
K3 = state_key(URL, "a\nb\nY\nX")  # one line differs from K2, two from K1


def test_state_similarity_counts_matching_lines():
    # 5 lines each (URL + 4 elements); 2 * matched / total lines
    assert state_similarity(K1, K1) == 1.0
    assert state_similarity(K1, K2) == pytest.approx(2 * 4 / 10)
    assert state_similarity(K2, K3) == pytest.approx(2 * 4 / 10)
    assert state_similarity(K1, K3) == pytest.approx(2 * 3 / 10)
    # nothing in common (URL differs too)
    assert state_similarity(state_key("http://a.test/", "x"), state_key("http://b.test/", "y")) == 0.0
    for a, b in [(K1, K2), (K1, K3), (A, B), (A + "\nextra", A)]:
        assert state_similarity(a, b) == state_similarity(b, a)


def test_exact_versus_similarity_grouping():
    group_index = torch.zeros(2, dtype=torch.long)
    assert step_groups([K1, K2], group_index, similarity=1.0).tolist() == [0, 1]
    assert step_groups([K1, K2], group_index, similarity=0.8).tolist() == [0, 0]
    assert step_groups([K1, K2], group_index, similarity=0.81).tolist() == [0, 1]


def test_similarity_grouping_is_greedy_against_the_first_key():
    group_index = torch.zeros(3, dtype=torch.long)
    # K3 is 0.8 similar to K2 but 0.6 to K1, the representative of the step group K2 joined
    assert step_groups([K1, K2, K3], group_index, similarity=0.8).tolist() == [0, 0, 1]
    # with K2 first, K2 is the representative and both others are 0.8 similar to it
    assert step_groups([K2, K1, K3], group_index, similarity=0.8).tolist() == [0, 0, 0]
    # a key similar to two step groups joins the first one
    assert step_groups([K1, K3, K2], group_index, similarity=0.8).tolist() == [0, 1, 0]


def test_step_groups_bad_input():
    with pytest.raises(ValueError, match="2 keys but group_index has 3"):
        step_groups([A, B], torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"similarity must be in \(0, 1\]"):
        step_groups([A], torch.zeros(1, dtype=torch.long), similarity=0.0)


def _same_partition(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a[:, None] == a[None, :], b[:, None] == b[None, :])


@pytest.mark.parametrize("similarity", [1.0, 0.5])
def test_permuting_trajectories_permutes_the_outputs(similarity):
    # Two episode groups: the toy (trajectories 0-2) and a second group (trajectories 3-4).
    # Greedy similarity grouping depends on input order in general; here every similar pair is
    # similar to every other (K1 ~ K2; A, B, C share no line), so the partition must not change.
    keys = KEYS + [K1, K2, K1]
    traj = torch.cat([TRAJ, torch.tensor([3, 3, 4])])
    group_index = torch.cat([GROUP, torch.tensor([1, 1, 1])])
    rewards = torch.cat([TURN_REWARDS, torch.tensor([0.0, 1.0, 0.0])])
    episode = torch.linspace(-1.0, 1.0, 11)
    config = StepAdvantageConfig(weight=0.7, gamma=0.9, similarity=similarity, std_normalize=True)
    adv, _, metrics = step_advantages(episode, rewards, keys, group_index, traj, config)
    groups = step_groups(keys, group_index, similarity=similarity)

    rows_of = {k: [i for i in range(11) if traj[i] == k] for k in range(5)}
    perm = [i for k in (4, 2, 0, 3, 1) for i in rows_of[k]]  # trajectory blocks reordered
    adv_p, _, metrics_p = step_advantages(episode[perm], rewards[perm], [keys[i] for i in perm], group_index[perm],
                                          traj[perm], config)
    groups_p = step_groups([keys[i] for i in perm], group_index[perm], similarity=similarity)
    torch.testing.assert_close(adv_p, adv[perm])
    assert _same_partition(groups_p, groups[perm])
    assert metrics_p == metrics


def test_metrics_with_singletons():
    # sizes: group 7 -> 2, group 1 -> 1, group 3 -> 3
    metrics = step_group_metrics(torch.tensor([7, 7, 1, 3, 3, 3]))
    assert metrics == {"num_step_groups": 3.0, "step_group_size_mean": 2.0, "step_group_size_max": 3.0,
                       "step_grouped_fraction": 5 / 6}


@pytest.mark.parametrize("url, expected", [
    ("HTTP://Shop.Test/Cart?b=2&a=1#top", "http://shop.test/Cart?a=1&b=2"),
    ("http://shop.test", "http://shop.test/"),
    ("http://Host.test:8080/x", "http://host.test:8080/x"),
    ("http://User@Host.test/", "http://User@host.test/"),
    ("http://shop.test/s?x=2&a=1&x=1", "http://shop.test/s?a=1&x=2&x=1"),  # repeated names keep their order
    ("  http://shop.test/p?flag  ", "http://shop.test/p?flag="),
    ("about:blank", "about:blank"),
])
def test_normalize_url(url, expected):
    assert normalize_url(url) == expected


def test_url_encodings_agree():
    assert normalize_url("http://shop.test/s?q=a%20b") == normalize_url("http://shop.test/s?q=a+b")
    assert normalize_url("http://shop.test/s?q=a") != normalize_url("http://shop.test/s?q=b")


def test_state_key_collapses_whitespace():
    key = state_key("HTTP://Shop.Test/#x", "  [1]   button  \"Buy\" \n\n\t[2] link\t Home  \n")
    assert key == "http://shop.test/\n[1] button \"Buy\"\n[2] link Home"
    assert state_key("http://shop.test/", "") == "http://shop.test/"
    # a changed field value is a different state
    assert state_key(URL, '[1] textbox "Name" value="a"') != state_key(URL, '[1] textbox "Name" value="b"')


@pytest.mark.parametrize("kwargs, field", [
    ({"weight": -0.1}, "weight"),
    ({"weight": math.inf}, "weight"),
    ({"weight": math.nan}, "weight"),
    ({"gamma": 1.01}, "gamma"),
    ({"gamma": -0.5}, "gamma"),
    ({"similarity": 0.0}, "similarity"),
    ({"similarity": 1.5}, "similarity"),
    ({"std_normalize": "mean_norm"}, "std_normalize"),
    ({"eps": -1e-6}, "eps"),
    ({"eps": math.nan}, "eps"),
])
def test_config_errors(kwargs, field):
    with pytest.raises(ValueError, match=rf"StepAdvantageConfig\.{field} must"):
        StepAdvantageConfig(**kwargs)


def test_config_defaults_are_valid_and_off():
    config = StepAdvantageConfig()
    assert (config.weight, config.gamma, config.similarity, config.std_normalize) == (0.0, 0.95, 1.0, False)

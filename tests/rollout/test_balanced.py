"""Balanced Adaptive Rollout planning (webrl/rollout/balanced.py): hand-worked values, plan
invariants, resume, and an exact (not sampled) comparison with uniform allocation."""
import json
import math

import numpy as np
import pytest

from webrl.rollout.balanced import (
    BalancedRolloutConfig,
    SuccessEstimates,
    expected_informative_groups,
    family_key,
    informative_probability,
    marginal_gain,
    plan_metrics,
    plan_rollouts,
    uniform_plan,
)


def estimates_with(rates: dict[str, float]) -> SuccessEstimates:
    """Estimates whose posterior means are exactly `rates`: a vanishing prior and 1000
    pseudo-rollouts per family at the given rate."""
    state = {"prior_success_rate": 0.5, "prior_strength": 1e-12, "forgetting": 1.0,
             "counts": {key: [1000 * p, 1000 * (1 - p)] for key, p in rates.items()}}
    return SuccessEstimates.from_state(state)


# ---------------------------------------------------------------- informative_probability

@pytest.mark.parametrize("p, n, expected", [
    (0.5, 2, 0.5),             # 1 - 1/4 - 1/4
    (0.5, 8, 0.9921875),       # 1 - 2/256
    (0.1, 4, 0.3438),          # 1 - 0.0001 - 0.6561
    (0.2, 3, 0.48),            # 1 - 0.008 - 0.512
    (0.3, 4, 0.7518),          # 1 - 0.0081 - 0.2401
    (0.0, 5, 0.0), (1.0, 5, 0.0),   # never / always solved: no variance
    (0.4, 1, 0.0), (0.4, 0, 0.0),   # a group of one (or none) cannot vary
])
def test_informative_probability_by_hand(p, n, expected):
    assert informative_probability(p, n) == pytest.approx(expected, abs=1e-12)


def test_marginal_gain_is_the_difference_of_informative_probability():
    # D(0.1, 2) = 0.01 * 0.9 + 0.81 * 0.1 = 0.09; D(0.5, 3) = 2 * 0.125 * 0.5 = 0.125
    assert marginal_gain(0.1, 2) == pytest.approx(0.09)
    assert marginal_gain(0.5, 3) == pytest.approx(0.125)
    for p in (0.05, 0.3, 0.5, 0.8):
        for n in range(2, 10):
            assert marginal_gain(p, n) == pytest.approx(
                informative_probability(p, n + 1) - informative_probability(p, n))


@pytest.mark.parametrize("p, n", [(-0.1, 3), (1.5, 3), (0.5, -1), (0.5, 2.5)])
def test_informative_probability_rejects_bad_input(p, n):
    with pytest.raises(ValueError, match="p in \\[0, 1\\] and an integer n >= 0"):
        informative_probability(p, n)


# ---------------------------------------------------------------- SuccessEstimates

def test_estimates_posterior_mean_by_hand():
    est = SuccessEstimates(prior_success_rate=0.5, prior_strength=2.0)   # Beta(1, 1)
    assert est.estimate("never/seen") == 0.5
    est.update("shop/add", [1, 0, 1, 1])               # s=3, f=1: (1 + 3) / (2 + 4)
    assert est.estimate("shop/add") == pytest.approx(4 / 6)
    est.update("shop/add", [0, 0])                     # s=3, f=3: (1 + 3) / (2 + 6)
    assert est.estimate("shop/add") == pytest.approx(0.5)
    low = SuccessEstimates(prior_success_rate=0.2, prior_strength=5.0)  # a0=1, b0=4
    low.update("x", [0, 0, 0, 0, 0])                   # (1 + 0) / (5 + 5)
    assert low.estimate("x") == pytest.approx(0.1)


def test_estimates_threshold_and_forgetting_by_hand():
    est = SuccessEstimates(prior_success_rate=0.5, prior_strength=2.0, forgetting=0.5)
    est.update("a", [0.4, 0.6])                        # threshold 0.5: one success, one failure
    assert est.counts["a"] == [1.0, 1.0]
    est.update("b", [1, 1])                            # s=2, f=0
    est.update("b", [0, 0])                            # s=0.5*2+0=1, f=0.5*0+2=2: (1+1)/(2+3)
    assert est.estimate("b") == pytest.approx(0.4)
    est.update("b", [], threshold=0.5)                 # empty group: nothing changes, no decay
    assert est.counts["b"] == [1.0, 2.0]
    est.update("c", [0.7, 0.9], threshold=0.8)
    assert est.counts["c"] == [1.0, 1.0]
    est.update("d", [0.5, 0.49])                       # a reward equal to the threshold succeeds
    assert est.counts["d"] == [1.0, 1.0]


def test_estimates_reject_bad_input():
    with pytest.raises(ValueError, match="must be finite"):
        SuccessEstimates().update("a", [1.0, float("nan")])
    with pytest.raises(ValueError, match="BalancedRolloutConfig.forgetting must be in \\(0, 1\\]"):
        SuccessEstimates(forgetting=0.0)
    with pytest.raises(ValueError, match="missing keys \\['counts'\\]"):
        SuccessEstimates.from_state({"prior_success_rate": 0.5, "prior_strength": 2.0, "forgetting": 1.0})
    with pytest.raises(ValueError, match="counts\\['a'\\] must be"):
        SuccessEstimates.from_state({"prior_success_rate": 0.5, "prior_strength": 2.0, "forgetting": 1.0,
                                     "counts": {"a": [1.0, -1.0]}})


def test_family_key_strips_only_a_seed():
    assert family_key("shop/l1/train/add_to_cart/17") == "shop/l1/train/add_to_cart"
    assert family_key("miniwob/click-button/3") == "miniwob/click-button"
    assert family_key("online_mind2web/123") == "online_mind2web/123"    # a fixed task, not a seed
    assert family_key("webvoyager/Allrecipes--3") == "webvoyager/Allrecipes--3"


# ---------------------------------------------------------------- config

@pytest.mark.parametrize("field, value, allowed", [
    ("enabled", "yes", "true \\| false"),
    ("candidate_factor", 0, "an integer >= 1"),
    ("min_group", 1, "an integer >= 2"),
    ("min_group", 2.0, "an integer >= 2"),
    ("max_group", 1, "an integer >= min_group"),
    ("prior_success_rate", 0.0, "in \\(0, 1\\)"),
    ("prior_success_rate", 1.0, "in \\(0, 1\\)"),
    ("prior_strength", 0.0, "> 0"),
    ("forgetting", 1.5, "in \\(0, 1\\]"),
    ("hard_fraction", -0.1, "in \\[0, 1\\]"),
    ("hard_fraction", float("nan"), "in \\[0, 1\\]"),
])
def test_config_rejects_bad_values(field, value, allowed):
    with pytest.raises(ValueError, match=f"BalancedRolloutConfig.{field} must be {allowed}"):
        BalancedRolloutConfig(**{field: value})


# ---------------------------------------------------------------- plans by hand

def test_all_unseen_spreads_evenly():
    # 6 candidates / factor 2 = 3 tasks; every estimate is the prior 1/2 (no hard task), so the
    # first three by index; sizes 2,2,2 then the 4 left go to equal gains by index: 0,1,2,0.
    cfg = BalancedRolloutConfig(candidate_factor=2, min_group=2, max_group=8)
    plan = plan_rollouts([f"f{i}" for i in range(6)], SuccessEstimates(), 10, cfg)
    assert plan == [(0, 4), (1, 3), (2, 3)]
    even = plan_rollouts([f"f{i}" for i in range(6)], SuccessEstimates(), 12, cfg)
    assert even == [(0, 4), (1, 4), (2, 4)]


def test_mix_of_easy_hard_and_mid_by_hand():
    # p = [0.9 easy, 0.1 hard, 0.5 mid, 0.6 easy]; T = 4 / 2 = 2, B = 16, n0 = 8.
    # Hard quota floor(0.5 * 2 + 0.5) = 1: the only hard candidate, 1.
    # Easy pool by I(p, 8): 0.5 -> 0.992, 0.6 -> 0.983, 0.9 -> 0.570: candidate 2.
    # Sizes from (2, 2), 12 one at a time to the largest D (p=0.1 is A, p=0.5 is B):
    #   B .25, B .125, A .09, A .0738, A .0657, B .0625, A .0591, A .0531, A .0478,
    #   A .0430, A .0387, A .0349  ->  A = 11, B = 5.
    cfg = BalancedRolloutConfig(candidate_factor=2, min_group=2, max_group=12, hard_fraction=0.5)
    keys = ["easy", "hard", "mid", "easier-mid"]
    est = estimates_with({"easy": 0.9, "hard": 0.1, "mid": 0.5, "easier-mid": 0.6})
    plan = plan_rollouts(keys, est, 16, cfg)
    assert plan == [(1, 11), (2, 5)]
    # 1 - 0.9**11 + (1 - 2 / 32) beats the uniform 8 / 8 on the same two tasks
    p = [est.estimate(k) for k in keys]
    assert expected_informative_groups(plan, p) == pytest.approx(1 - 0.9 ** 11 - 0.1 ** 11 + 0.9375)
    assert expected_informative_groups(plan, p) > expected_informative_groups([(1, 8), (2, 8)], p)
    metrics = plan_metrics(keys, est, plan)
    assert metrics["balanced/chosen_hard"] == 1 and metrics["balanced/chosen_easy"] == 1
    assert (metrics["balanced/min_group"], metrics["balanced/max_group"]) == (5, 11)
    assert metrics["balanced/chosen_unseen"] == 0
    # uniform = the first two candidates (0.9 and 0.1) at 8 each: 2 * (1 - 0.9**8 - 0.1**8)
    assert metrics["balanced/uniform_expected_informative_groups"] == pytest.approx(
        2 * (1 - 0.9 ** 8 - 0.1 ** 8))


def test_hard_fraction_sets_the_quota():
    # p = [0.05, 0.2, 0.3, 0.45, 0.55, 0.7, 0.8, 0.95]; T = 4, n0 = 4.
    # hard pool by I(p, 4): 0.45, 0.3, 0.2, 0.05; easy pool: 0.55, 0.7, 0.8, 0.95.
    rates = [0.05, 0.2, 0.3, 0.45, 0.55, 0.7, 0.8, 0.95]
    keys = [f"k{i}" for i in range(8)]
    est = estimates_with(dict(zip(keys, rates)))
    chosen = {hf: [i for i, _ in plan_rollouts(keys, est, 16, BalancedRolloutConfig(
        candidate_factor=2, min_group=2, max_group=8, hard_fraction=hf))] for hf in (0.0, 0.25, 0.5, 1.0)}
    assert chosen[0.0] == [4, 5, 6, 7]
    assert chosen[0.25] == [3, 4, 5, 6]       # quota floor(1 + 0.5) = 1
    assert chosen[0.5] == [2, 3, 4, 5]        # quota 2
    assert chosen[1.0] == [0, 1, 2, 3]


def test_a_short_pool_is_filled_from_the_other():
    # hard_fraction 1 wants 2 hard tasks, only candidate 3 is hard: the best easy one fills in.
    keys = ["a", "b", "c", "d"]
    est = estimates_with({"a": 0.9, "b": 0.6, "c": 0.99, "d": 0.2})
    plan = plan_rollouts(keys, est, 8, BalancedRolloutConfig(candidate_factor=2, hard_fraction=1.0))
    assert [i for i, _ in plan] == [1, 3]


# ---------------------------------------------------------------- plan invariants

def random_case(rng):
    factor = int(rng.integers(1, 4))
    tasks = int(rng.integers(1, 7))
    min_group = int(rng.integers(2, 5))
    max_group = min_group + int(rng.integers(0, 8))
    cfg = BalancedRolloutConfig(candidate_factor=factor, min_group=min_group, max_group=max_group,
                                hard_fraction=float(rng.random()))
    keys = [f"fam{j}" for j in rng.integers(0, 12, tasks * factor)]
    est = SuccessEstimates(prior_success_rate=0.3)
    for j in range(12):
        if rng.random() < 0.7:
            est.update(f"fam{j}", rng.random(int(rng.integers(1, 9))) < rng.random())
    budget = int(rng.integers(tasks * min_group, tasks * max_group + 1))
    return keys, est, budget, cfg, tasks


def test_budget_bounds_and_task_count_always_hold():
    rng = np.random.default_rng(7)
    for _ in range(300):
        keys, est, budget, cfg, tasks = random_case(rng)
        plan = plan_rollouts(keys, est, budget, cfg)
        indices = [i for i, _ in plan]
        assert sum(n for _, n in plan) == budget
        assert all(cfg.min_group <= n <= cfg.max_group for _, n in plan)
        assert len(plan) == tasks and indices == sorted(set(indices))
        assert plan_rollouts(keys, est, budget, cfg) == plan            # deterministic


def test_sizing_is_optimal_for_the_chosen_set():
    # Greedy on a concave gain is exact: no single move of one rollout between two chosen tasks
    # (within the bounds) raises the expected informative groups.
    rng = np.random.default_rng(3)
    for _ in range(100):
        keys, est, budget, cfg, _ = random_case(rng)
        plan = plan_rollouts(keys, est, budget, cfg)
        p = [est.estimate(k) for k in keys]
        best = expected_informative_groups(plan, p)
        for a in range(len(plan)):
            for b in range(len(plan)):
                sizes = [n for _, n in plan]
                if a == b or sizes[a] <= cfg.min_group or sizes[b] >= cfg.max_group:
                    continue
                sizes[a] -= 1
                sizes[b] += 1
                moved = [(i, n) for (i, _), n in zip(plan, sizes)]
                assert expected_informative_groups(moved, p) <= best + 1e-12


@pytest.mark.parametrize("num_keys, budget, match", [
    (4, 3, "total_rollouts=3 cannot be split over 2 tasks .*\\(allowed: integers in \\[4, 16\\]"),
    (4, 17, "total_rollouts=17 cannot be split"),
    (4, 8.0, "total_rollouts=8.0 cannot be split"),
    (5, 8, "5 candidates is not a positive multiple of BalancedRolloutConfig.candidate_factor=2"),
    (0, 8, "0 candidates"),
])
def test_impossible_budgets_raise(num_keys, budget, match):
    cfg = BalancedRolloutConfig(candidate_factor=2, min_group=2, max_group=8)
    with pytest.raises(ValueError, match=match):
        plan_rollouts([f"k{i}" for i in range(num_keys)], SuccessEstimates(), budget, cfg)


def test_state_dict_round_trip_plans_identically():
    rng = np.random.default_rng(11)
    for _ in range(20):
        keys, est, budget, cfg, _ = random_case(rng)
        restored = SuccessEstimates.from_state(json.loads(json.dumps(est.state_dict())))
        assert restored.state_dict() == est.state_dict()
        assert plan_rollouts(keys, restored, budget, cfg) == plan_rollouts(keys, est, budget, cfg)
        restored.update(keys[0], [1, 0, 1])
        est.update(keys[0], [1, 0, 1])
        assert restored.estimate(keys[0]) == est.estimate(keys[0])


def test_renaming_keys_consistently_keeps_the_plan():
    rng = np.random.default_rng(5)
    for _ in range(50):
        keys, est, budget, cfg, _ = random_case(rng)
        renamed = SuccessEstimates.from_state({**est.state_dict(), "counts": {
            f"site/{key[::-1]}": value for key, value in est.state_dict()["counts"].items()}})
        new_keys = [f"site/{key[::-1]}" for key in keys]
        assert plan_rollouts(new_keys, renamed, budget, cfg) == plan_rollouts(keys, est, budget, cfg)


# ---------------------------------------------------------------- simulation

def test_simulated_training_beats_uniform_allocation():
    # Known per-family success rates; candidates drawn and rewards sampled with a fixed seed; the
    # comparison itself is exact: sum of I(true p, n) for the plan vs. the first T candidates at G.
    rates = {"f0": 0.0, "f1": 0.03, "f2": 0.15, "f3": 0.4, "f4": 0.6, "f5": 0.85, "f6": 0.97, "f7": 1.0}
    names = sorted(rates)
    cfg = BalancedRolloutConfig(enabled=True, candidate_factor=2, min_group=2, max_group=12)
    est = SuccessEstimates.from_config(cfg)
    rng = np.random.default_rng(0)
    tasks, group_size = 8, 8
    planned = uniform = 0.0
    for _ in range(40):
        keys = [names[j] for j in rng.integers(0, len(names), tasks * cfg.candidate_factor)]
        plan = plan_rollouts(keys, est, tasks * group_size, cfg)
        true = [rates[k] for k in keys]
        planned += expected_informative_groups(plan, true)
        uniform += expected_informative_groups(uniform_plan(tasks, tasks * group_size), true)
        for i, n in plan:
            est.update(keys[i], (rng.random(n) < rates[keys[i]]).astype(float))
    assert planned > 1.3 * uniform            # measured: 6.19 vs 3.89 informative groups / iteration
    assert est.estimate("f7") > 0.9 and est.estimate("f0") < 0.1


def test_uniform_plan_spreads_the_remainder():
    assert uniform_plan(3, 10) == [(0, 4), (1, 3), (2, 3)]
    with pytest.raises(ValueError, match="1 <= num_tasks <= total_rollouts"):
        uniform_plan(0, 4)
    assert math.isclose(expected_informative_groups(uniform_plan(2, 4), [0.5, 0.5]), 1.0)

"""Dynamic sampling's pure part: which groups a batch keeps, how many tasks the next round draws,
which candidates it prefers, and its seeded draw stream. Expected values are worked out by hand."""
import pytest

from webrl.rollout.balanced import SuccessEstimates
from webrl.rollout.dynamic_sampling import (DynamicSamplingConfig, extra_task_count, rank_candidates, round_rng,
                                            select_groups)


def test_select_groups_keeps_the_first_target_informative_groups_in_drawing_order():
    groups = {"a": [1.0, 0.0], "b": [0.0, 0.0], "c": [], "d": [1.0, 1.0, 0.0], "e": [1.0], "f": [0.5, 0.0]}
    # informative: a, d, f (rewards differ); b all equal, e one scored reward; c nothing scored
    s = select_groups(groups, target=2)
    assert (s.trained, s.filtered, s.dropped, s.needed) == (["a", "d"], ["b", "e", "f"], ["c"], 0)
    # target 4: all three informative kept, one still missing
    s = select_groups(groups, target=4)
    assert (s.trained, s.filtered, s.dropped, s.needed) == (["a", "d", "f"], ["b", "e"], ["c"], 1)
    assert len(s.trained) + len(s.filtered) + len(s.dropped) == len(groups)


def test_a_batch_of_3_informative_of_8_needs_5_more():
    # 8 groups of 2: groups 0, 3 and 6 are [1, 0], the rest [0, 0] or [1, 1]
    groups = {str(k): ([1.0, 0.0] if k in (0, 3, 6) else [float(k % 2)] * 2) for k in range(8)}
    s = select_groups(groups, target=8)
    assert s.trained == ["0", "3", "6"] and s.needed == 5 and len(s.filtered) == 5 and not s.dropped
    # informative rate 3/8, so 5 more take ceil(5 * 8 / 3) = ceil(13.33) = 14 draws; budget 16 allows it
    assert extra_task_count(s.needed, 3, 8, budget_left=16) == 14
    assert extra_task_count(s.needed, 3, 8, budget_left=10) == 10  # capped by the budget


@pytest.mark.parametrize("needed, informative, drawn, budget, expected", [
    (0, 8, 8, 16, 0),   # full: no round
    (2, 6, 8, 16, 3),   # ceil(2 * 8 / 6) = ceil(2.67) = 3
    (8, 0, 8, 16, 16),  # none informative: as if 1 in 8 were, ceil(8 * 8 / 1) = 64, capped at 16
    (1, 7, 8, 0, 0),    # budget spent
])
def test_extra_task_count(needed, informative, drawn, budget, expected):
    assert extra_task_count(needed, informative, drawn, budget) == expected


def test_rank_candidates_prefers_families_whose_estimate_is_not_near_0_or_1():
    estimates = SuccessEstimates()  # prior 0.5 x 2: p = (1 + s) / (2 + s + f)
    estimates.update("shop/l0/train/always_fails", [0.0] * 8)   # p = 1/10:  I(0.1, 2) = 1 - 0.01 - 0.81 = 0.18
    estimates.update("shop/l0/train/always_works", [1.0] * 8)   # p = 9/10:  I = 0.18
    estimates.update("shop/l0/train/mixed", [1.0, 0.0] * 4)     # p = 5/10:  I = 0.5
    ids = ["shop/l0/train/always_fails/3", "shop/l0/train/mixed/7", "shop/l0/train/always_works/1",
           "shop/l0/train/unseen/2", "shop/l0/train/mixed/9"]  # unseen: the prior 0.5, I = 0.5
    assert rank_candidates(ids, estimates, 3, group_size=2) == [1, 3, 4]
    assert rank_candidates(ids, estimates, 4, group_size=2) == [0, 1, 3, 4]  # the 0.18 tie goes to index 0


def test_round_streams_differ_from_the_iteration_draw_and_from_each_other_and_repeat():
    from webrl.envs.task import task_rng

    first = task_rng(0, "rl", 3).integers(0, 2**31, 4).tolist()
    rounds = [round_rng(0, 3, r).integers(0, 2**31, 4).tolist() for r in (1, 2)]
    assert rounds[0] != first and rounds[1] != first and rounds[0] != rounds[1]
    assert round_rng(0, 3, 1).integers(0, 2**31, 4).tolist() == rounds[0]


@pytest.mark.parametrize("overrides, message", [
    ({"enabled": "yes"}, "rollout.dynamic_sampling.enabled must be true | false"),
    ({"target_groups": -1}, r"rollout.dynamic_sampling.target_groups must be an integer >= 0 \(0 = tasks"),
    ({"max_rounds": 1.5}, "rollout.dynamic_sampling.max_rounds must be an integer >= 0"),
    ({"candidate_factor": 0}, "rollout.dynamic_sampling.candidate_factor must be an integer >= 1"),
])
def test_config_errors_name_the_key_and_the_allowed_values(overrides, message):
    with pytest.raises(ValueError, match=message):
        DynamicSamplingConfig(**overrides)


def test_zero_means_the_iteration_size_and_twice_the_target():
    config = DynamicSamplingConfig()
    assert (config.target(8), config.extra_budget(8)) == (8, 16)
    config = DynamicSamplingConfig(target_groups=6, max_extra_tasks=5)
    assert (config.target(8), config.extra_budget(8)) == (6, 5)

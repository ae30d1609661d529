"""Dyna-GRPO's refinement advantages (algos/dyna.py), values worked out by hand."""
import math

import pytest
import torch

from webrl.algos.dyna import (REFINE_ADVANTAGES, beat_both_advantages, joint_group_advantages, refine_advantages,
                              refine_metrics)


def _t(*values):
    return torch.tensor(values, dtype=torch.float32)


def test_beat_both_rewards_only_successes_above_both_means():
    # plain [1, 0, 0, 0]: mean 0.25; refined [1, 0]: mean 0.5. r'=1: >= 0.5, > 0.25, >= 0.5 -> 1;
    # r'=0 fails the threshold -> 0
    assert beat_both_advantages(_t(1, 0), _t(1, 0, 0, 0)).tolist() == [1.0, 0.0]
    # the plain group already always succeeds (mean 1): a refined success is no improvement
    assert beat_both_advantages(_t(1), _t(1, 1)).tolist() == [0.0]
    # every refinement succeeds where the plain group never did: mean(r') = 1, and 1 >= 1 counts
    assert beat_both_advantages(_t(1, 1), _t(0, 0)).tolist() == [1.0, 1.0]
    # above the plain mean (0) but below the success threshold 0.5
    assert beat_both_advantages(_t(0.4), _t(0)).tolist() == [0.0]
    # a lower threshold lets it through
    assert beat_both_advantages(_t(0.4), _t(0), success_threshold=0.3).tolist() == [1.0]
    # a partial reward 0.6 succeeds but is below its siblings' mean (0.6 + 1) / 2 = 0.8
    assert beat_both_advantages(_t(0.6, 1.0), _t(0, 0)).tolist() == [0.0, 1.0]


def test_joint_group_normalises_over_the_union():
    # union [1, 0, 1]: mean 2/3, unbiased var ((1/3)^2 + (2/3)^2 + (1/3)^2) / 2 = 1/3
    expected = (1 - 2 / 3) / (math.sqrt(1 / 3) + 1e-6)
    assert joint_group_advantages(_t(1), _t(1, 0)).tolist() == pytest.approx([expected], abs=1e-6)
    # union [0, 0, 1, 0]: mean 1/4, var (3 * 1/16 + 9/16) / 3 = 1/4, std 1/2
    out = joint_group_advantages(_t(1, 0), _t(0, 0))
    assert out.tolist() == pytest.approx([0.75 / (0.5 + 1e-6), -0.25 / (0.5 + 1e-6)], abs=1e-6)
    # no spread: zeros, not a division by ~0
    assert joint_group_advantages(_t(1, 1), _t(1)).tolist() == [0.0, 0.0]


def test_dispatch_and_bad_input():
    assert set(REFINE_ADVANTAGES) == {"beat_both", "joint_group"}
    assert refine_advantages(_t(1), _t(0), "beat_both").tolist() == [1.0]
    assert refine_advantages(_t(), _t(0), "joint_group").tolist() == []
    with pytest.raises(ValueError, match=r"unknown refine advantage rule 'best'; rules: \['beat_both', 'joint_gr"):
        refine_advantages(_t(1), _t(0), "best")
    with pytest.raises(ValueError, match="at least one"):
        refine_advantages(_t(1), _t(), "beat_both")
    with pytest.raises(ValueError, match="1-D"):
        refine_advantages(torch.ones(2, 2), _t(0), "joint_group")


def test_metrics_by_hand():
    # r' = [1, 0, 0] against plain means [0.5, 0.5, 0]: one success (1/3), one improvement
    # (1 > 0.5; 0 > 0.5 no; 0 > 0 no); A' = [1, 0, -0.5]: one of each sign
    m = refine_metrics(_t(1, 0, -0.5), _t(1, 0, 0), _t(0.5, 0.5, 0))
    assert m == {"refine_success_rate": pytest.approx(1 / 3), "refine_improved": pytest.approx(1 / 3),
                 "refine_positive": 1.0, "refine_zero": 1.0, "refine_negative": 1.0}
    assert refine_metrics(_t(), _t(), _t())["refine_positive"] == 0.0
    with pytest.raises(ValueError, match=r"three \(R,\) tensors"):
        refine_metrics(_t(1), _t(1, 0), _t(0))

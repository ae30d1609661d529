"""Weight sync without DeepSpeed: `apply_weight_update` copies a `WeightUpdate` in place."""
import pytest
import torch
from torch import nn

from webrl.learner import WeightUpdate, apply_weight_update


def tiny_net(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))


def test_apply_weight_update_copies_named_tensors_and_checks_first():
    src, dst = tiny_net(0), tiny_net(1)
    update = WeightUpdate(5, ["0.weight", "2.bias"], [src[0].weight.detach().clone(), src[2].bias.detach().clone()])
    untouched = dst[2].weight.detach().clone()
    assert apply_weight_update(dst, update) == 2
    assert torch.equal(dst[0].weight, src[0].weight) and torch.equal(dst[2].bias, src[2].bias)
    assert torch.equal(dst[2].weight, untouched)  # only what was sent changes
    before = dst[0].weight.detach().clone()
    bad = WeightUpdate(6, ["0.weight", "9.weight"], [torch.zeros(3, 4), torch.zeros(1)])
    with pytest.raises(KeyError, match="9.weight"):
        apply_weight_update(dst, bad)
    assert torch.equal(dst[0].weight, before)  # nothing applied from a rejected update
    with pytest.raises(ValueError, match=r"0.weight is \(4, 3\)"):
        apply_weight_update(dst, WeightUpdate(7, ["0.weight"], [torch.zeros(4, 3)]))

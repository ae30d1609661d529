"""Weight sync pieces without DeepSpeed: apply_weight_update and the collective broadcast path
(run with gloo between two threads here; NCCL on GPUs is the same code)."""
import threading

import pytest
import torch
from torch import nn

from webrl.learner import WeightBroadcast, WeightUpdate, apply_weight_update
from webrl.learner.group import free_port


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


def test_gloo_broadcast_from_learner_rank0_to_two_receivers():
    sender = tiny_net(0)
    receivers = [tiny_net(1), tiny_net(2)]
    names = [n for n, _ in sender.named_parameters()]
    port, versions, errors = free_port(), {}, []

    def receive(rank):
        try:
            group = WeightBroadcast("127.0.0.1", port, rank, 3, backend="gloo", timeout_s=60)
            versions[rank] = group.receive(receivers[rank - 1], names, expected_version=4)
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=receive, args=(r,)) for r in (1, 2)]
    for t in threads:
        t.start()
    group = WeightBroadcast("127.0.0.1", port, 0, 3, backend="gloo", timeout_s=60)
    group.send(4, sender.named_parameters(), len(names))
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert versions == {1: 4, 2: 4}
    for receiver in receivers:
        for (_, a), (_, b) in zip(sender.named_parameters(), receiver.named_parameters()):
            assert torch.equal(a, b)

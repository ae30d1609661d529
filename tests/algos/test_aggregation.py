"""Aggregation modes against hand-computed values; empty masks; micro-batching with global scales."""
import pytest
import torch

from webrl.algos import LOSS_AGGREGATIONS, aggregate, aggregate_samples, loss_scale

# Three samples, two trajectories (0: samples 0-1, 1: sample 2):
#   sample 0 trains tokens [1, 2, 3], sample 1 trains [4], sample 2 trains [6, 8].
LOSS = torch.tensor([[9.0, 1.0, 2.0, 3.0], [4.0, 9.0, 9.0, 9.0], [6.0, 8.0, 9.0, 9.0]])
MASK = torch.tensor([[0.0, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]])
TRAJ = torch.tensor([0, 0, 1])
HAND = {
    "token-mean": (1 + 2 + 3 + 4 + 6 + 8) / 6,                 # 24 / 6 = 4
    "seq-mean-token-mean": (2 + 4 + 7) / 3,                     # per-sample means 2, 4, 7
    "seq-mean-token-sum": (6 + 4 + 14) / 3,                     # per-sample sums 6, 4, 14 -> 8
    "seq-mean-token-sum-norm": (6 + 4 + 14) / (3 * 10),         # C = 10 -> 0.8
    "traj-mean-token-mean": ((1 + 2 + 3 + 4) / 4 + (6 + 8) / 2) / 2,  # (2.5 + 7) / 2 = 4.75
}


@pytest.mark.parametrize("mode", sorted(LOSS_AGGREGATIONS))
def test_modes_hand_values(mode):
    scale = loss_scale(MASK, mode, trajectory_index=TRAJ, constant=10.0)
    assert float(aggregate(LOSS, MASK, scale)) == pytest.approx(HAND[mode])


def test_hand_table_covers_every_mode():
    assert set(HAND) == set(LOSS_AGGREGATIONS)


def test_empty_sample_is_not_counted_and_empty_batch_gives_zero():
    # adding a sample without trained tokens changes no mode
    loss = torch.cat([LOSS, torch.full((1, 4), 7.0)])
    mask = torch.cat([MASK, torch.zeros(1, 4)])
    traj = torch.tensor([0, 0, 1, 2])
    for mode in LOSS_AGGREGATIONS:
        scale = loss_scale(mask, mode, trajectory_index=traj, constant=10.0)
        assert float(aggregate(loss, mask, scale)) == pytest.approx(HAND[mode]), mode
    for mode in LOSS_AGGREGATIONS:
        x = torch.randn(2, 3, requires_grad=True)
        empty = torch.zeros(2, 3)
        value = aggregate(x, empty, loss_scale(empty, mode, trajectory_index=torch.tensor([0, 1])))
        value.backward()
        assert float(value.detach()) == 0.0 and torch.equal(x.grad, torch.zeros(2, 3)), mode


def test_nan_off_mask_does_not_leak():
    loss = LOSS.clone().requires_grad_(True)
    poisoned = torch.where(MASK.bool(), loss, torch.tensor(float("nan")))
    for mode in LOSS_AGGREGATIONS:
        value = aggregate(poisoned, MASK, loss_scale(MASK, mode, trajectory_index=TRAJ, constant=10.0))
        assert float(value.detach()) == pytest.approx(HAND[mode])
    value.backward()
    assert torch.isfinite(loss.grad).all()


def test_traj_mode_needs_trajectory_index_and_unknown_mode_lists_allowed():
    with pytest.raises(ValueError, match="trajectory_index"):
        loss_scale(MASK, "traj-mean-token-mean")
    with pytest.raises(ValueError, match="allowed: \\['seq-mean-token-mean'"):
        loss_scale(MASK, "sum")


def test_aggregate_samples_is_mean_over_non_empty_samples():
    mask = torch.cat([MASK, torch.zeros(1, 4)])
    scale = loss_scale(mask, "token-mean")
    # per-sample [1, 2, 3, 100]; the empty 4th sample is ignored -> (1 + 2 + 3) / 3
    assert float(aggregate_samples(torch.tensor([1.0, 2.0, 3.0, 100.0]), mask, scale)) == pytest.approx(2.0)


def _random_problem(seed):
    gen = torch.Generator().manual_seed(seed)
    B, T = 7, 6
    mask = (torch.rand(B, T, generator=gen) < 0.6).float()
    mask[3] = 0  # one empty sample
    traj = torch.tensor([0, 0, 1, 1, 1, 2, 3])
    return torch.randn(B, T, generator=gen), mask, traj


@pytest.mark.parametrize("mode", sorted(LOSS_AGGREGATIONS))
def test_micro_batches_with_global_scale_equal_full_batch(mode):
    x, mask, traj = _random_problem(1)
    full_param = x.clone().requires_grad_(True)
    scale = loss_scale(mask, mode, trajectory_index=traj, constant=5.0)
    full = aggregate(full_param * full_param, mask, scale)
    full.backward()
    micro_param = x.clone().requires_grad_(True)
    total = 0.0
    # unequal micro-batches that split trajectory 1 across two of them
    for rows in (torch.tensor([0, 1, 2]), torch.tensor([3, 4]), torch.tensor([5, 6])):
        part = aggregate(micro_param[rows] ** 2, mask[rows], scale.select(rows))
        part.backward()
        total += float(part.detach())
    assert total == pytest.approx(float(full.detach()), rel=1e-6)
    torch.testing.assert_close(micro_param.grad, full_param.grad)


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "seq-mean-token-sum"])
def test_seq_modes_average_locally_when_micro_batches_hold_equal_sample_counts(mode):
    # Without a global scale, the mean of micro-batch losses is exact for the sequence modes as
    # long as each micro-batch holds the same number of non-empty samples...
    x, mask, _ = _random_problem(2)
    mask[:, 0] = 1  # every sample non-empty: 4 + 3 samples, plus one more to make it 4 + 4
    mask = torch.cat([mask, torch.ones(1, 6)])
    x = torch.cat([x, torch.randn(1, 6)])
    full = aggregate(x, mask, loss_scale(mask, mode))
    halves = [torch.arange(0, 4), torch.arange(4, 8)]
    local = sum(float(aggregate(x[r], mask[r], loss_scale(mask[r], mode))) for r in halves) / 2
    assert local == pytest.approx(float(full), rel=1e-6)


def test_token_mean_needs_the_global_normaliser():
    # ...while token-mean micro-batches with different token counts do not average to the full
    # batch: this is why `LossScale` carries the full batch's token count.
    loss = torch.tensor([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    full = float(aggregate(loss, mask, loss_scale(mask, "token-mean")))  # 7 / 4 = 1.75
    local = (1.0 + 4.0) / 2  # micro-batch means 1 and 4
    assert full == pytest.approx(1.75) and local != pytest.approx(full)

"""Pure planning and collation: packing by token budget, rank split, mini-batches, Batch layout."""
import pytest
import torch

from webrl.algos import GRPOConfig, PolicyLossConfig, full_batch_scale
from webrl.learner.batching import (mini_batch_indices, pack_micro_batches, padded_tokens, padding_fraction,
                                    plan_ranks, plan_update)
from webrl.learner.config import BatchingConfig, LearnerConfig, OptimConfig
from webrl.learner.metrics import merge_metrics
from webrl.learner.samples import LearnerSample, collate, scale_batch


def test_pack_respects_budget_and_sorts_longest_first():
    lengths = [10, 50, 20, 45, 12, 30, 100]
    batches = pack_micro_batches(lengths, token_budget=100, max_rows=8)
    # longest first: 100 alone (fills the budget); 50,45 (2x50=100); 30,20,12 (3x30=90; a 4th
    # row would make 4x30=120); 10 (alone, the last)
    assert batches == [[6], [1, 3], [5, 2, 4], [0]]
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(padded_tokens(b, lengths) <= 100 for b in batches)


def test_pack_oversized_sample_gets_own_batch_and_max_rows():
    assert pack_micro_batches([500, 3, 3, 3], token_budget=100, max_rows=2) == [[0], [1, 2], [3]]


def test_plan_ranks_equal_counts_with_fillers_and_balance():
    lengths = [100, 50, 45, 30, 20, 12, 10]
    mbs = pack_micro_batches(lengths, 100, 8)  # 4 micro-batches (see above, reordered)
    plans = plan_ranks(mbs, lengths, world_size=3)
    assert all(len(p) == 2 for p in plans)  # ceil(4 / 3) = 2 each, 2 fillers in total
    assert sum(1 for p in plans for mb in p if not mb) == 2
    assert sorted(i for p in plans for mb in p for i in mb) == list(range(len(lengths)))
    # more ranks than micro-batches: every rank still runs one pass
    plans = plan_ranks([[0]], [5], world_size=2)
    assert plans == [[[0]], [[]]]


def test_plan_update_two_ranks_balances_tokens():
    lengths = [64] * 4 + [32] * 8
    plans = plan_update(lengths, world_size=2, token_budget=128, max_rows=8)
    # micro-batches [64, 64] x 2 and [32 x 4] x 2, 128 padded tokens each: two per rank
    loads = [sum(padded_tokens(mb, lengths) for mb in p) for p in plans]
    assert loads == [256, 256] and all(len(p) == 2 and all(p) for p in plans)
    assert padding_fraction(plans, lengths) == 0.0


def test_mini_batches_partition_and_are_seeded():
    parts = mini_batch_indices(10, 3, seed=1)
    assert sorted(i for p in parts for i in p) == list(range(10))
    assert [len(p) for p in parts] == [3, 4, 3]  # bounds round(10k/3) = 0, 3, 7, 10
    assert parts == mini_batch_indices(10, 3, seed=1)
    assert parts != mini_batch_indices(10, 3, seed=2)
    assert mini_batch_indices(4, 1, seed=5) == [[0, 1, 2, 3]]


def test_collate_layout_by_hand():
    a = LearnerSample([1, 2, 3], [4, 5], rollout_logprobs=[-0.5, -0.25], advantage=2.0, trajectory_index=0)
    b = LearnerSample([6], [7, 8, 9], rollout_logprobs=[-1.0, -2.0, -3.0], advantage=-1.0, trajectory_index=1)
    batch, extras = collate([a, b], pad_id=0)
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 5], [6, 7, 8, 9, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert batch.loss_mask.tolist() == [[0, 0, 0, 1, 1], [0, 1, 1, 1, 0]]
    assert batch.old_logprobs.tolist() == [[0, 0, 0, -0.5, -0.25], [0, -1, -2, -3, 0]]
    assert batch.advantages.tolist() == [[0, 0, 0, 2, 2], [0, -1, -1, -1, 0]]
    assert batch.ref_logprobs is None and extras.proximal_logprobs is None
    assert batch.pixel_values is None and batch.num_tokens == 9


def test_scale_batch_gives_the_full_batch_scale():
    """The controller's response-only batch yields the same loss scale as the real batch."""
    samples = [LearnerSample([1] * p, [2] * r, trajectory_index=t) for p, r, t in
               [(5, 3, 0), (2, 4, 0), (7, 1, 1)]]
    full, _ = collate(samples, pad_id=0)
    small, extras = scale_batch(samples)
    for mode in ("token-mean", "seq-mean-token-mean", "traj-mean-token-mean"):
        cfg = GRPOConfig()
        cfg.loss.aggregation = mode
        s1, s2 = full_batch_scale(full, cfg), full_batch_scale(small, cfg, extras)
        assert torch.equal(s1.sample_weight, s2.sample_weight) and float(s1.normalizer) == float(s2.normalizer)


def test_merge_metrics_sums_losses_and_weights_fractions():
    merged = merge_metrics([({"loss": 0.5, "clip_fraction": 0.0, "ratio_max": 1.1}, 1.0),
                            ({"loss": 0.25, "clip_fraction": 1.0, "ratio_max": 1.3}, 3.0)])
    assert merged["loss"] == 0.75 and merged["ratio_max"] == 1.3
    assert merged["clip_fraction"] == 0.75  # (0 * 1 + 1 * 3) / 4


def test_sample_and_config_validation_name_the_field():
    with pytest.raises(ValueError, match="rollout_logprobs"):
        LearnerSample([1], [2, 3], rollout_logprobs=[-1.0])
    with pytest.raises(ValueError, match="zero_stage"):
        LearnerConfig(zero_stage=4)
    with pytest.raises(ValueError, match="reference"):
        LearnerConfig(loss=PolicyLossConfig(kl_coef=0.1))
    assert LearnerConfig(objective="ppo").value_head and not LearnerConfig().value_head  # PPO implies its head
    with pytest.raises(ValueError, match="scheduler"):
        OptimConfig(scheduler="step")
    with pytest.raises(ValueError, match="token_budget"):
        BatchingConfig(token_budget=0)


def test_learner_config_loads_through_the_project_config_machinery():
    from webrl.config import load_config

    cfg = load_config(LearnerConfig, overrides=["zero_stage=3", "optim.lr=1e-5",
                                                "batching.ppo_epochs=2", "loss.clip_eps_high=0.3"])
    assert isinstance(cfg, LearnerConfig) and cfg.zero_stage == 3 and cfg.optim.lr == 1e-5
    assert cfg.batching.ppo_epochs == 2 and cfg.objective_config.loss.clip_eps_high == 0.3
    assert cfg.optim.betas == (0.9, 0.999)


def test_samples_from_trajectories_broadcasts_advantages_and_skips_dropped():
    from webrl.learner import samples_from_trajectories
    from webrl.types import Trajectory, Turn

    def turn(k):
        return Turn(prompt_ids=[1, 2], response_ids=[3 + k], logprobs=[-0.5], policy_version=4)

    trajs = [Trajectory("a", group_id="g1", turns=[turn(0), turn(1)]),
             Trajectory("a", group_id="g1", turns=[turn(2)], status="dropped", drop_reason="browser crashed"),
             Trajectory("b", group_id="g2", turns=[turn(3)]),
             Trajectory("b", group_id="g2", turns=[turn(4)])]
    samples = samples_from_trajectories(trajs, advantages=[0.5, 9.0, -1.0, 2.0], keep=[True, True, True, False])
    # trajectory 0's two turns, trajectory 2's one; 1 is dropped, 3 filtered by keep
    assert [(s.response_ids, s.advantage, s.group_index, s.trajectory_index) for s in samples] == [
        ([3], 0.5, 0, 0), ([4], 0.5, 0, 0), ([6], -1.0, 1, 2)]
    assert samples[0].rollout_logprobs == [-0.5] and samples[0].policy_version == 4

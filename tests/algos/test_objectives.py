"""grpo / ppo / sft objectives: hand values, invariances, micro-batch equivalence, edge cases."""
import math

import pytest
import torch

from webrl.algos import (LOSS_AGGREGATIONS, OBJECTIVES, BatchExtras, GRPOConfig, GroupAdvantageConfig,
                         LearnerOutputs, PolicyLossConfig, PPOConfig, SFTConfig, broadcast_to_tokens,
                         broadcast_to_turns, full_batch_scale, group_advantages, grpo, kl_reward_penalty, ppo,
                         ppo_advantages, sft)
from webrl.types import Batch

from .helpers import pad_right, random_batch, with_garbage_off_mask

# A two-sample batch (T = 3, token 0 is prompt in both, sample 1 trains only token 2):
#   ratios   [[-, 1.5, 1.0], [-, -, 0.5]]   advantages [[0, 1, 1], [0, 0, -1]]
# PPO clip 0.2 / 0.28 per token: 1.5 with A=1 -> -1.28 (clipped); 1.0 with A=1 -> -1;
# 0.5 with A=-1 -> 0.8 (clipped).
MASK = torch.tensor([[0.0, 1, 1], [0, 0, 1]])
OLD = torch.tensor([[0.0, -1.0, -1.0], [0.0, 0.0, -2.0]])
RATIO = torch.tensor([[1.0, 1.5, 1.0], [1.0, 1.0, 0.5]])
ADV = torch.tensor([[0.0, 1, 1], [0, 0, -1]])


def _tiny(ref=None):
    batch = Batch(input_ids=torch.ones(2, 3, dtype=torch.long), attention_mask=torch.ones(2, 3, dtype=torch.long),
                  loss_mask=MASK, old_logprobs=OLD, advantages=ADV, ref_logprobs=ref,
                  group_index=torch.tensor([0, 0]), trajectory_index=torch.tensor([0, 1]))
    logprobs = (OLD + RATIO.log()).clone().requires_grad_(True)
    return batch, logprobs


def test_grpo_token_mean_hand_value_and_metrics():
    batch, logp = _tiny()
    loss, m = grpo(LearnerOutputs(logp), batch, GRPOConfig())
    # (-1.28 - 1 + 0.8) / 3 = -0.493333
    assert float(loss.detach()) == pytest.approx(-1.48 / 3)
    assert m["clip_fraction"] == pytest.approx(2 / 3)
    # approx_kl = mean k3(d), d = log r: 1.5 -> 1/1.5 + ln 1.5 - 1 = 0.072132; 1 -> 0; 0.5 -> 2 - ln 2 - 1 = 0.306853
    assert m["approx_kl"] == pytest.approx((0.072132 + 0.306853) / 3, abs=1e-5)
    # per-sample advantages 1 and -1
    assert (m["advantage_mean"], m["advantage_min"], m["advantage_max"]) == (0.0, -1.0, 1.0)
    assert m["num_tokens"] == 3 and m["num_samples"] == 2 and m["ratio_max"] == pytest.approx(1.5)


def test_grpo_seq_mean_token_mean_hand_value():
    batch, logp = _tiny()
    loss, _ = grpo(LearnerOutputs(logp), batch, GRPOConfig(loss=PolicyLossConfig(aggregation="seq-mean-token-mean")))
    # sample means (-1.28 - 1) / 2 = -1.14 and 0.8 -> (-1.14 + 0.8) / 2 = -0.17
    assert float(loss.detach()) == pytest.approx(-0.17)


def test_grpo_with_kl_loss_and_entropy_hand_value():
    batch, logp = _tiny(ref=OLD.clone())  # reference = rollout policy, so k1 = log ratio
    entropy = torch.tensor([[9.0, 1.0, 2.0], [9.0, 9.0, 3.0]])
    cfg = GRPOConfig(loss=PolicyLossConfig(kl_coef=0.1, kl_estimator="k1", entropy_coef=0.01))
    loss, m = grpo(LearnerOutputs(logp, entropy=entropy), batch, cfg)
    # k1 token mean (ln 1.5 + 0 + ln 0.5) / 3 = -0.095894; entropy token mean (1 + 2 + 3) / 3 = 2
    # -0.493333 + 0.1 * -0.095894 - 0.01 * 2 = -0.522923
    assert m["kl"] == pytest.approx(-0.095894, abs=1e-6)
    assert m["entropy"] == pytest.approx(2.0)
    assert float(loss.detach()) == pytest.approx(-0.522923, abs=1e-6)


def test_grpo_kl_reward_mode_adds_no_loss_term():
    batch, logp = _tiny(ref=OLD.clone())
    plain, _ = grpo(LearnerOutputs(logp), batch, GRPOConfig())
    reward_mode, m = grpo(LearnerOutputs(logp), batch, GRPOConfig(loss=PolicyLossConfig(kl_coef=0.1, kl_mode="reward")))
    assert float(plain.detach()) == float(reward_mode.detach()) and "kl" in m


def test_truncated_importance_sampling_hand_value():
    batch, logp = _tiny()
    # proximal = learner log-probs (ratio 1 everywhere); pi_prox / mu = [3, 1, 0.5] on the trained tokens
    prox = logp.detach().clone()
    batch.old_logprobs = prox - torch.tensor([[0.0, math.log(3.0), 0.0], [0.0, 0.0, math.log(0.5)]])
    cfg = GRPOConfig(loss=PolicyLossConfig(tis_cap=2.0))
    loss, m = grpo(LearnerOutputs(logp), batch, cfg, extras=BatchExtras(proximal_logprobs=prox))
    # per token -A * 1 = [-1, -1, 1], weights min(w, 2) = [2, 1, 0.5] -> (-2 - 1 + 0.5) / 3
    assert float(loss.detach()) == pytest.approx(-2.5 / 3)
    assert m["tis_weight_mean"] == pytest.approx(3.5 / 3)


def test_ppo_adds_clipped_value_loss_hand_value():
    batch, logp = _tiny()
    values = torch.tensor([1.0, 2.0], requires_grad=True)
    extras = BatchExtras(old_values=torch.tensor([0.5, 0.5]), returns=torch.tensor([0.0, 3.0]))
    cfg = PPOConfig(value_coef=0.5, value_clip_eps=0.2)
    loss, m = ppo(LearnerOutputs(logp, values=values), batch, cfg, extras=extras)
    # value losses 0.5 and 2.645 (see test_losses) -> mean 1.5725; total -0.493333 + 0.5 * 1.5725
    assert m["value_loss"] == pytest.approx(1.5725)
    assert float(loss.detach()) == pytest.approx(-1.48 / 3 + 0.78625)
    with pytest.raises(ValueError, match="values"):
        ppo(LearnerOutputs(logp), batch, cfg, extras=extras)


def test_sft_action_aware_hand_value():
    batch, _ = _tiny()
    logp = torch.tensor([[0.0, math.log(0.5), math.log(0.25)], [0.0, 0.0, math.log(0.5)]], requires_grad=True)
    action = torch.tensor([[0, 0, 1], [0, 0, 1]], dtype=torch.bool)
    coordinate = torch.tensor([[0, 0, 0], [0, 0, 1]], dtype=torch.bool)
    loss, m = sft(LearnerOutputs(logp), batch, SFTConfig(), extras=BatchExtras(action_mask=action,
                                                                               coordinate_mask=coordinate))
    # CE [ln 2, ln 4, ln 2], weights [1, 2, 2*2] -> (ln2 + 2 ln4 + 4 ln2) / 7 = 9 ln 2 / 7 = 0.891189
    assert float(loss.detach()) == pytest.approx(9 * math.log(2) / 7)
    assert m["nll"] == pytest.approx(4 * math.log(2) / 3) and m["coordinate_nll"] == pytest.approx(math.log(2))
    plain, _ = sft(LearnerOutputs(logp), batch, SFTConfig(action_weight=1.0))  # plain token mean
    assert float(plain.detach()) == pytest.approx(4 * math.log(2) / 3)


def test_group_advantages_filter_metrics_and_turn_broadcast():
    # group 0: rewards [1, 0, 0, 1, 1]; group 1: all zeros (filtered)
    rewards = torch.tensor([1.0, 0, 0, 1, 1, 0, 0, 0])
    groups = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1])
    res = group_advantages(rewards, groups, GRPOConfig())
    assert res.keep.tolist() == [True] * 5 + [False] * 3
    assert res.metrics["filtered_groups"] == 1 and res.metrics["num_groups"] == 2
    torch.testing.assert_close(res.advantages[:2], torch.tensor([0.730297, -1.095445]), atol=1e-5, rtol=0)
    # turns of one trajectory share its advantage: trajectories 0 and 1 have 3 and 2 turns
    trajectory_index = torch.tensor([0, 0, 0, 1, 1])
    mask = torch.tensor([[0, 1, 1, 0], [0, 0, 1, 1], [1, 1, 1, 1], [0, 1, 0, 0], [0, 0, 1, 1]], dtype=torch.float)
    tokens = broadcast_to_tokens(broadcast_to_turns(res.advantages, trajectory_index), mask)
    for b, k in enumerate(trajectory_index.tolist()):
        assert torch.equal(tokens[b][mask[b].bool()], res.advantages[k].expand(int(mask[b].sum())))
    scaled = group_advantages(rewards, groups, GRPOConfig(advantage=GroupAdvantageConfig(negative_scale="linear")))
    # success rate 0.6 -> negatives x 0.7
    assert float(scaled.advantages[1]) == pytest.approx(-1.095445 * 0.7, abs=1e-5)


def test_group_advantages_kl_reward_mode_shapes_rewards_but_filters_on_outcome():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0])
    groups = torch.tensor([0, 0, 1, 1])
    penalty = torch.tensor([0.0, 10.0, 0.0, 0.0])
    cfg = GRPOConfig(loss=PolicyLossConfig(kl_coef=0.1, kl_mode="reward"), advantage=GroupAdvantageConfig(estimator="drgrpo"))
    res = group_advantages(rewards, groups, cfg, kl_penalty=penalty)
    # group 0 has equal outcomes -> filtered although the shaped rewards 1 and 0 differ
    assert res.keep.tolist() == [False, False, True, True]
    torch.testing.assert_close(res.advantages, torch.tensor([0.0, 0.0, -0.5, 0.5]))
    no_filter = group_advantages(rewards, groups, GRPOConfig(loss=cfg.loss, advantage=GroupAdvantageConfig(
        estimator="drgrpo", filter_zero_variance=False)), kl_penalty=penalty)
    # shaped group 0: [1, 0] -> [0.5, -0.5]
    torch.testing.assert_close(no_filter.advantages[:2], torch.tensor([0.5, -0.5]))


def test_kl_reward_penalty_sums_trained_tokens():
    logp = torch.tensor([[5.0, -1.0, -1.0], [7.0, 0.0, -2.0]])
    ref = torch.tensor([[0.0, -2.0, -1.0], [0.0, 0.0, -3.0]])
    # k1 on trained tokens: sample 0: 1 + 0; sample 1: 1
    assert kl_reward_penalty(logp, ref, MASK, estimator="k1").tolist() == [1.0, 1.0]


def test_ppo_advantages_returns_and_whitening():
    cfg = PPOConfig(gamma=0.9, lam=0.8, whiten_advantages=False)
    adv, ret, _ = ppo_advantages(torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.5, 0.6, 0.7]), torch.tensor([0, 0, 0]), cfg)
    torch.testing.assert_close(adv, torch.tensor([0.21712, 0.246, 0.3]))
    torch.testing.assert_close(ret, torch.tensor([0.71712, 0.846, 1.0]))
    white, ret2, _ = ppo_advantages(torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.5, 0.6, 0.7]), torch.tensor([0, 0, 0]),
                                    PPOConfig(gamma=0.9, lam=0.8))
    assert abs(float(white.mean())) < 1e-6 and float(white.std()) == pytest.approx(1.0, abs=1e-6)
    torch.testing.assert_close(ret2, ret)


def test_missing_inputs_raise_clear_errors():
    batch, logp = _tiny()
    with pytest.raises(ValueError, match="ref_logprobs"):
        grpo(LearnerOutputs(logp), batch, GRPOConfig(loss=PolicyLossConfig(kl_coef=0.1)))
    with pytest.raises(ValueError, match="entropy"):
        grpo(LearnerOutputs(logp), batch, GRPOConfig(loss=PolicyLossConfig(entropy_coef=0.1)))
    with pytest.raises(ValueError, match="PPOConfig.lam"):
        PPOConfig(lam=1.5)
    with pytest.raises(ValueError, match="SFTConfig.direct_fraction"):
        SFTConfig(direct_fraction=2.0)


# -- invariances and micro-batching over every objective -------------------------------------

def _case(name, aggregation="token-mean", seed=0, **batch_kw):
    batch, logp, entropy = random_batch(seed, **batch_kw)
    B, T = batch.loss_mask.shape
    gen = torch.Generator().manual_seed(seed + 100)
    extras = BatchExtras(proximal_logprobs=batch.old_logprobs + 0.3 * torch.randn(B, T, generator=gen),
                         old_values=torch.randn(B, generator=gen), returns=torch.randn(B, generator=gen),
                         action_mask=torch.rand(B, T, generator=gen) < 0.5,
                         coordinate_mask=torch.rand(B, T, generator=gen) < 0.2)
    loss_cfg = PolicyLossConfig(aggregation=aggregation, aggregation_constant=4.0, kl_coef=0.05, entropy_coef=0.01,
                                dual_clip_c=3.0, tis_cap=2.0)
    config = {"grpo": GRPOConfig(loss=loss_cfg), "ppo": PPOConfig(loss=loss_cfg), "sft": SFTConfig()}[name]
    values = torch.randn(B, generator=gen).requires_grad_(True)
    return batch, LearnerOutputs(logp, entropy=entropy, values=values), extras, config


def _grads(loss, outputs):
    tensors = [outputs.logprobs, outputs.entropy, outputs.values]
    grads = torch.autograd.grad(loss, tensors, allow_unused=True)
    return [torch.zeros_like(t) if g is None else g for g, t in zip(grads, tensors)]


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_padding_and_masked_tokens_do_not_change_loss(name):
    batch, outputs, extras, config = _case(name, aggregation="traj-mean-token-mean" if name != "sft" else "token-mean")
    loss, _ = OBJECTIVES[name](outputs, batch, config, extras=extras)
    g_logp, g_ent, g_val = _grads(loss, outputs)
    mask = batch.loss_mask
    # garbage on prompt / padding tokens (NaN log-probs, inf old log-probs, huge advantages) plus 3
    # extra padding columns
    poisoned = Batch(input_ids=pad_right(batch.input_ids, 3), attention_mask=pad_right(batch.attention_mask, 3),
                     loss_mask=pad_right(mask, 3),
                     old_logprobs=pad_right(with_garbage_off_mask(batch.old_logprobs, mask, -math.inf), 3, -math.inf),
                     advantages=pad_right(with_garbage_off_mask(batch.advantages, mask, 1e30), 3, 1e30),
                     ref_logprobs=pad_right(with_garbage_off_mask(batch.ref_logprobs, mask, 50.0), 3, math.nan),
                     group_index=batch.group_index, trajectory_index=batch.trajectory_index)
    logp2 = pad_right(with_garbage_off_mask(outputs.logprobs.detach(), mask, math.nan), 3, math.nan).requires_grad_(True)
    ent2 = pad_right(with_garbage_off_mask(outputs.entropy.detach(), mask, 1e6), 3, math.inf).requires_grad_(True)
    outputs2 = LearnerOutputs(logp2, entropy=ent2, values=outputs.values.detach().clone().requires_grad_(True))
    extras2 = BatchExtras(
        proximal_logprobs=pad_right(with_garbage_off_mask(extras.proximal_logprobs, mask, 100.0), 3, math.nan),
        old_values=extras.old_values, returns=extras.returns,
        action_mask=pad_right(extras.action_mask.float(), 3, 1.0).bool(),
        coordinate_mask=pad_right(extras.coordinate_mask.float(), 3, 1.0).bool())
    loss2, _ = OBJECTIVES[name](outputs2, poisoned, config, extras=extras2)
    assert float(loss2.detach()) == pytest.approx(float(loss.detach()), rel=1e-6, abs=1e-7)
    h_logp, h_ent, h_val = _grads(loss2, outputs2)
    torch.testing.assert_close(h_logp[:, :-3], g_logp)
    assert torch.equal(h_logp[:, -3:], torch.zeros_like(h_logp[:, -3:]))
    torch.testing.assert_close(h_ent[:, :-3], g_ent)
    torch.testing.assert_close(h_val, g_val)
    assert torch.equal(g_logp[~mask.bool()], torch.zeros_like(g_logp[~mask.bool()]))


_MICRO_CASES = [("grpo", mode) for mode in sorted(LOSS_AGGREGATIONS)] + [("ppo", "seq-mean-token-mean"),
                                                                          ("ppo", "token-mean"), ("sft", None)]


@pytest.mark.parametrize("name,aggregation", _MICRO_CASES)
def test_micro_batch_accumulation_equals_full_batch(name, aggregation):
    batch, outputs, extras, config = _case(name, aggregation=aggregation or "token-mean", seed=3,
                                           num_samples=7, empty_rows=(2,), trajectory_index=[0, 0, 1, 1, 1, 2, 3])
    full, _ = OBJECTIVES[name](outputs, batch, config, extras=extras)
    full_grads = _grads(full, outputs)
    scale = full_batch_scale(batch, config, extras)
    total = torch.zeros(())
    # micro-batches of unequal size; trajectory 1 (rows 2-4) is split across two of them
    for rows in (torch.tensor([0, 1, 2]), torch.tensor([3]), torch.tensor([4, 5, 6])):
        micro = Batch(input_ids=batch.input_ids[rows], attention_mask=batch.attention_mask[rows],
                      loss_mask=batch.loss_mask[rows], old_logprobs=batch.old_logprobs[rows],
                      advantages=batch.advantages[rows], ref_logprobs=batch.ref_logprobs[rows],
                      group_index=batch.group_index[rows], trajectory_index=batch.trajectory_index[rows])
        micro_out = LearnerOutputs(outputs.logprobs[rows], outputs.entropy[rows], outputs.values[rows])
        part, _ = OBJECTIVES[name](micro_out, micro, config, extras=extras.select(rows), scale=scale.select(rows))
        total = total + part
    assert float(total.detach()) == pytest.approx(float(full.detach()), rel=1e-5, abs=1e-6)
    for got, want in zip(_grads(total, outputs), full_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_empty_mask_gives_zero_loss_not_nan(name):
    batch, outputs, extras, config = _case(name, num_samples=3, empty_rows=(0, 1, 2))
    loss, metrics = OBJECTIVES[name](outputs, batch, config, extras=extras)
    assert float(loss.detach()) == 0.0
    assert all(math.isfinite(v) for v in metrics.values())
    assert all(torch.isfinite(g).all() for g in _grads(loss, outputs))


@pytest.mark.parametrize("name", ["grpo", "ppo"])
def test_extreme_log_prob_ratios_finite(name):
    batch, outputs, extras, config = _case(name)
    big = torch.where(batch.loss_mask.bool(), torch.full_like(batch.old_logprobs, -1e4), batch.old_logprobs)
    batch.old_logprobs = big
    extras.proximal_logprobs = -big
    loss, metrics = OBJECTIVES[name](outputs, batch, config, extras=extras)
    assert math.isfinite(float(loss.detach())) and all(math.isfinite(v) for v in metrics.values())
    assert all(torch.isfinite(g).all() for g in _grads(loss, outputs))


def test_empty_rollout_gives_empty_advantages_and_zero_metrics():
    res = group_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long), GRPOConfig())
    assert res.advantages.numel() == 0 and res.keep.numel() == 0
    assert res.metrics["filtered_groups"] == 0 and all(math.isfinite(v) for v in res.metrics.values())

"""Policy losses, KL estimators, TIS weights and the value loss against hand-computed values."""
import math

import pytest
import torch

from webrl.algos import (KL_ESTIMATORS, POLICY_LOSSES, PolicyLossConfig, clipped_value_loss, kl_k1, kl_k2, kl_k3,
                         ppo_clip_loss, truncated_is_weights, vanilla_policy_loss)

# Six tokens, eps_low 0.2 / eps_high 0.28 (clip range [0.8, 1.28]), dual-clip c = 3:
#  a: A= 1, r=1.5 -> unclipped -1.5, clipped -1.28 -> max -1.28 (clipped)
#  b: A= 1, r=0.5 -> unclipped -0.5, clipped -0.8  -> max -0.5  (not clipped)
#  c: A=-1, r=0.5 -> unclipped  0.5, clipped  0.8  -> max  0.8  (clipped)
#  d: A=-1, r=1.5 -> unclipped  1.5, clipped  1.28 -> max  1.5  (not clipped)
#  e: A=-2, r=5   -> unclipped 10,   clipped  2.56 -> max 10, dual cap -A c = 6 -> 6 (dual)
#  f: A= 2, r=1.1 -> unclipped -2.2, clipped -2.2  -> -2.2 (inside the range)
RATIOS = torch.tensor([1.5, 0.5, 0.5, 1.5, 5.0, 1.1])
ADV = torch.tensor([1.0, 1.0, -1.0, -1.0, -2.0, 2.0])
OLD = torch.tensor([-1.0, -2.0, -0.5, -3.0, -4.0, -1.2])


def _logprobs():
    return (OLD + RATIOS.log()).clone().requires_grad_(True)


def test_ppo_clip_hand_values_and_flags():
    logp = _logprobs()
    out = ppo_clip_loss(logp, OLD, ADV, clip_eps_low=0.2, clip_eps_high=0.28, dual_clip_c=3.0)
    torch.testing.assert_close(out.loss, torch.tensor([-1.28, -0.5, 0.8, 1.5, 6.0, -2.2]))
    assert out.clipped.tolist() == [True, False, True, False, False, False]
    assert out.dual_clipped.tolist() == [False, False, False, False, True, False]
    torch.testing.assert_close(out.ratio, RATIOS)
    # gradient d L / d logp = -A r on unclipped tokens, 0 on clipped / dual-clipped ones
    out.loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([0.0, -0.5, 0.0, 1.5, 0.0, -2.2]))


def test_ppo_without_dual_clip_keeps_large_negative_token():
    out = ppo_clip_loss(_logprobs(), OLD, ADV, clip_eps_low=0.2, clip_eps_high=0.28)
    assert float(out.loss[4].detach()) == pytest.approx(10.0)
    assert not out.dual_clipped.any()


def test_clip_higher_is_asymmetric():
    # with eps_low = eps_high = 0.2 token a would be capped at 1.2 instead of 1.28
    out = ppo_clip_loss(_logprobs(), OLD, ADV, clip_eps_low=0.2, clip_eps_high=0.2)
    assert float(out.loss[0].detach()) == pytest.approx(-1.2)


def test_vanilla_is_unclipped_importance_weighted():
    out = vanilla_policy_loss(_logprobs(), OLD, ADV)
    torch.testing.assert_close(out.loss, -ADV * RATIOS)


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_extreme_log_ratios_are_finite(name):
    logp = torch.tensor([0.0, -1e4, -80.0, 0.0], requires_grad=True)
    old = torch.tensor([-1e4, 0.0, 0.0, -90.0])
    adv = torch.tensor([1.0, -1.0, -3.0, -2.0])
    out = POLICY_LOSSES[name](logp, old, adv, clip_eps_low=0.2, clip_eps_high=0.28, dual_clip_c=3.0)
    out.loss.sum().backward()
    assert torch.isfinite(out.loss).all() and torch.isfinite(logp.grad).all()


def test_kl_estimators_hand_values():
    logp = torch.tensor([-1.0, -2.0, -3.0])
    ref = torch.tensor([-2.0, -2.0, -2.0])  # d = log pi - log pi_ref = [1, 0, -1]
    torch.testing.assert_close(kl_k1(logp, ref), torch.tensor([1.0, 0.0, -1.0]))
    torch.testing.assert_close(kl_k2(logp, ref), torch.tensor([0.5, 0.0, 0.5]))
    # k3 = exp(-d) + d - 1: d=1 -> e^-1 = 0.367879; d=0 -> 0; d=-1 -> e - 2 = 0.718282
    torch.testing.assert_close(kl_k3(logp, ref), torch.tensor([math.exp(-1), 0.0, math.e - 2]))


@pytest.mark.parametrize("name", sorted(KL_ESTIMATORS))
def test_kl_extremes_finite(name):
    logp = torch.tensor([0.0, -1e4], requires_grad=True)
    kl = KL_ESTIMATORS[name](logp, torch.tensor([-1e4, 0.0]))
    kl.sum().backward()
    assert torch.isfinite(kl).all() and torch.isfinite(logp.grad).all()


def test_truncated_is_weights_hand_values():
    prox = torch.tensor([math.log(3.0), math.log(0.5), 0.0, 50.0])
    rollout = torch.zeros(4)
    # min(pi_prox / mu, 2): 3 -> 2, 0.5 -> 0.5, 1 -> 1, e^50 -> 2
    torch.testing.assert_close(truncated_is_weights(prox, rollout, cap=2.0), torch.tensor([2.0, 0.5, 1.0, 2.0]))


def test_clipped_value_loss_hand_values():
    values = torch.tensor([1.0, 2.0], requires_grad=True)
    old, returns = torch.tensor([0.5, 0.5]), torch.tensor([0.0, 3.0])
    # sample 0: (1 - 0)^2 = 1; clipped value 0.5 + 0.2 = 0.7 -> 0.49; max 1 -> 0.5
    # sample 1: (2 - 3)^2 = 1; clipped value 0.7 -> (0.7 - 3)^2 = 5.29; max 5.29 -> 2.645
    loss, clipped = clipped_value_loss(values, old, returns, clip_eps=0.2)
    torch.testing.assert_close(loss, torch.tensor([0.5, 2.645]))
    assert clipped.tolist() == [False, True]
    loss.sum().backward()
    # d/dV: sample 0 = V - R = 1; sample 1 takes the clipped branch, constant in V -> 0
    torch.testing.assert_close(values.grad, torch.tensor([1.0, 0.0]))
    plain, _ = clipped_value_loss(values, old, returns)
    torch.testing.assert_close(plain, torch.tensor([0.5, 0.5]))


def test_policy_loss_config_validation():
    with pytest.raises(ValueError, match=r"PolicyLossConfig.aggregation.*'seq-mean-token-mean'.*'token-mean'"):
        PolicyLossConfig(aggregation="mean")
    with pytest.raises(ValueError, match=r"PolicyLossConfig.kl_estimator.*'k1'.*'k3'"):
        PolicyLossConfig(kl_estimator="k4")
    with pytest.raises(ValueError, match=r"PolicyLossConfig.kl_mode.*'loss'.*'reward'"):
        PolicyLossConfig(kl_mode="both")
    with pytest.raises(ValueError, match="PolicyLossConfig.dual_clip_c"):
        PolicyLossConfig(dual_clip_c=0.5)
    with pytest.raises(ValueError, match="PolicyLossConfig.clip_eps_low"):
        PolicyLossConfig(clip_eps_low=1.0)
    with pytest.raises(ValueError, match="PolicyLossConfig.policy_loss"):
        PolicyLossConfig(policy_loss="grpo")
    assert PolicyLossConfig().clip_eps_high == 0.28

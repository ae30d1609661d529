"""The KL trust region in the rewards (kl_mode="reward") and success-adaptive negative scaling,
reached from the run's config. Expected values are worked out by hand in the comments."""
import dataclasses

import pytest
import torch

from webrl.algos import GRPOConfig, LearnerOutputs, PPOConfig
from webrl.algos.losses import PolicyLossConfig
from webrl.algos.objectives import grpo, kl_shaped_advantages
from webrl.config import ConfigError, load_config
from webrl.learner.credit import gae_stage, trajectories_to_samples
from webrl.learner.samples import LearnerSample, collate
from webrl.run.config import WebRLConfig
from webrl.types import Trajectory, Turn

# one sample, prompt of 2 tokens, response of 2: positions 2 and 3 are trained on
MASK = torch.tensor([[0.0, 0.0, 1.0, 1.0]])
OLD = torch.tensor([[0.0, 0.0, -1.0, -2.0]])  # start-of-update log-probs
REF = torch.tensor([[0.0, 0.0, -1.5, -1.0]])  # reference log-probs: k1 = OLD - REF = [0.5, -1.0]


def test_kl_shaped_advantages_subtract_the_per_token_kl():
    adv = torch.tensor([[0.0, 0.0, 1.0, 1.0]])
    shaped = kl_shaped_advantages(adv, OLD, REF, MASK, kl_coef=0.1, estimator="k1")
    # 1 - 0.1 * 0.5 = 0.95 and 1 - 0.1 * (-1.0) = 1.1; nothing off the mask
    assert shaped[0].tolist() == pytest.approx([0.0, 0.0, 0.95, 1.1])


def _batch():
    sample = LearnerSample([1, 2], [3, 4], rollout_logprobs=[-1.0, -2.0], advantage=1.0, ref_logprobs=[-1.5, -1.0])
    batch, extras = collate([sample], pad_id=0)
    return batch, extras


def _grpo(kl_mode, kl_coef, proximal=None):
    batch, extras = _batch()
    if proximal is not None:
        extras.proximal_logprobs = proximal
    logprobs = OLD.clone().requires_grad_(True)  # ratio 1 against the rollout: the unclipped surrogate -A
    config = GRPOConfig(loss=PolicyLossConfig(kl_coef=kl_coef, kl_mode=kl_mode, kl_estimator="k1"))
    loss, metrics = grpo(LearnerOutputs(logprobs), batch, config, extras=extras)
    loss.backward()
    return float(loss.detach()), logprobs.grad.clone()


def test_grpo_reward_mode_trains_on_kl_shaped_advantages():
    loss, grad = _grpo("reward", 0.1)
    # token-mean of -A_t: -(0.95 + 1.1) / 2 = -1.025; d loss / d logp_t = -A_t / 2 (ratio 1)
    assert loss == pytest.approx(-1.025)
    assert grad[0, 2:].tolist() == pytest.approx([-0.475, -0.55])


def test_grpo_reward_mode_with_kl_coef_zero_is_the_no_kl_update():
    no_kl_loss, no_kl_grad = _grpo("loss", 0.0)
    loss, grad = _grpo("reward", 0.0)
    assert no_kl_loss == pytest.approx(-1.0) and loss == no_kl_loss
    assert torch.equal(grad, no_kl_grad)


def test_grpo_reward_mode_takes_the_kl_of_the_proximal_policy_when_given():
    # proximal [-1.5, -1.0] equals the reference: no penalty, whatever the rollout's log-probs
    # (the ratio is then exp(-1 + 1.5) and exp(-2 + 1) against the proximal log-probs)
    loss, _ = _grpo("reward", 0.1, proximal=REF.clone())
    no_penalty, _ = _grpo("loss", 0.0, proximal=REF.clone())
    assert loss == pytest.approx(no_penalty)


def test_grpo_reward_mode_without_reference_logprobs_fails():
    batch, extras = _batch()
    batch.ref_logprobs = None
    config = GRPOConfig(loss=PolicyLossConfig(kl_coef=0.1, kl_mode="reward"))
    with pytest.raises(ValueError, match="needs batch.ref_logprobs"):
        grpo(LearnerOutputs(OLD.clone()), batch, config, extras=extras)


def test_ppo_reward_mode_takes_the_turn_kl_off_the_turn_reward_before_gae():
    samples = [LearnerSample([1], [2], trajectory_index=0, turn_index=0, reward=0.0),
               LearnerSample([1], [3], trajectory_index=0, turn_index=1, reward=1.0)]
    config = PPOConfig(gamma=1.0, lam=1.0, whiten_advantages=False, loss=PolicyLossConfig(kl_coef=0.1, kl_mode="reward"))
    out, metrics = gae_stage(samples, [0.0, 0.0], config, kl_penalty=[0.5, 0.2])
    # rewards [0 - 0.05, 1 - 0.02]; V = 0, gamma = lam = 1: A_1 = 0.98, A_0 = -0.05 + 0.98 = 0.93
    assert [s.advantage for s in out] == pytest.approx([0.93, 0.98])
    assert metrics["kl_penalty_mean"] == pytest.approx(0.35)
    plain, _ = gae_stage(samples, [0.0, 0.0], PPOConfig(gamma=1.0, lam=1.0, whiten_advantages=False))
    zero, _ = gae_stage(samples, [0.0, 0.0], PPOConfig(gamma=1.0, lam=1.0, whiten_advantages=False,
                                                        loss=PolicyLossConfig(kl_mode="reward")), kl_penalty=[0.5, 0.2])
    assert [s.advantage for s in zero] == [s.advantage for s in plain] == pytest.approx([1.0, 1.0])
    with pytest.raises(ValueError, match="1 KL penalties for 2 samples"):
        gae_stage(samples, [0.0, 0.0], config, kl_penalty=[0.5])


def test_kl_mode_reward_is_accepted_with_a_reference_and_refused_without():
    cfg = load_config(WebRLConfig, None, ["learner.loss.kl_mode=reward", "learner.loss.kl_coef=0.1",
                                          "learner.reference=copy"])
    assert cfg.learner.loss.kl_mode == "reward"
    with pytest.raises(ConfigError, match=r"kl_mode='reward' has no effect.*learner.reference=none"):
        load_config(WebRLConfig, None, ["learner.loss.kl_mode=reward", "learner.loss.kl_coef=0.1"])


def _traj(reward):
    t = Trajectory("task", group_id="g", reward=reward, status="ok")
    t.turns = [Turn(prompt_ids=[1, 2], response_ids=[3], logprobs=[-0.1])]
    return t


def test_negative_scale_from_the_config_reaches_the_advantages():
    cfg = load_config(WebRLConfig, None, ["learner.advantage.estimator=drgrpo",
                                          "learner.advantage.negative_scale=linear"])
    trajectories = [_traj(1.0), _traj(0.0), _traj(0.0), _traj(0.0)]
    samples, _ = trajectories_to_samples(trajectories, cfg.learner.objective, cfg.learner.objective_config)
    # Dr. GRPO: r - mean = [0.75, -0.25, -0.25, -0.25]; success rate 1/4, linear scale
    # 0.25 + 0.75 * 0.25 = 0.4375 on the negatives: -0.25 * 0.4375 = -0.109375
    assert [s.advantage for s in samples] == pytest.approx([0.75, -0.109375, -0.109375, -0.109375])
    plain = load_config(WebRLConfig, None, ["learner.advantage.estimator=drgrpo"])
    samples, _ = trajectories_to_samples(trajectories, plain.learner.objective, plain.learner.objective_config)
    assert [s.advantage for s in samples] == pytest.approx([0.75, -0.25, -0.25, -0.25])


@pytest.mark.slow
def test_ppo_learner_takes_the_turn_kl_off_the_rewards(tiny_qwen3vl_path):
    """Through LearnerGroup: at the first update the policy is its reference copy (KL 0, so
    the update is the no-KL one); after it, each turn's KL to the copy is > 0 (k3 >= 0) and is
    what the next update's GAE sees."""
    from tests.learner.helpers import learner_config, learner_run, make_samples, with_rollout_logprobs
    from webrl.learner import LearnerGroup
    from webrl.learner.config import BatchingConfig
    from webrl.models import load_model

    _, processor = load_model(tiny_qwen3vl_path)
    from webrl.learner.config import PPOValueConfig

    config = learner_config(objective="ppo", reference="copy", ppo=PPOValueConfig(value_clip_eps=None),
                            loss=PolicyLossConfig(kl_coef=0.5, kl_mode="reward"), zero_stage=0,
                            batching=BatchingConfig(token_budget=10_000, ppo_epochs=1, mini_batches=2))
    group = LearnerGroup(config, learner_run(tiny_qwen3vl_path), 1, use_ray=False)
    try:
        samples = [dataclasses.replace(s, reward=r, trajectory_index=k, turn_index=0)
                   for k, (s, r) in enumerate(zip(make_samples(processor, 4, seed=2), [1.0, 0.0, 1.0, 0.0]))]
        start = group.compute_logprobs(samples).logprobs
        samples = with_rollout_logprobs(samples, start)
        ref = [dataclasses.replace(s, ref_logprobs=r.tolist())
               for s, r in zip(samples, group.compute_logprobs(samples, reference=True).logprobs)]
        assert group._turn_kl(ref, [p.tolist() for p in start]) == [0.0] * 4
        first = group.update(samples)
        assert first["kl_penalty_mean"] == 0.0
        moved = [p.tolist() for p in group.compute_logprobs(samples).logprobs]
        kl = group._turn_kl(ref, moved)
        assert all(x > 0 for x in kl)
        second = group.update(samples)
        assert second["kl_penalty_mean"] == pytest.approx(sum(kl) / 4, rel=1e-4)
    finally:
        group.shutdown()

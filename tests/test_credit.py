"""`webrl.learner.credit.trajectories_to_samples`: the pure step from scored trajectories to learner samples."""
import dataclasses
import math

import torch

import pytest

from webrl.algos import GRPOConfig, PPOConfig
from webrl.learner.credit import ADVANTAGE_STAGES, gae_stage, trajectories_to_samples
from webrl.types import Trajectory, Turn


def _traj(group, reward, turns=1, status="ok"):
    t = Trajectory(f"task-{group}", group_id=group, reward=reward, status=status,
                   drop_reason="infra: test" if status == "dropped" else None)
    t.turns = [Turn(prompt_ids=[1, 2, 3], response_ids=[4 + k, 5], logprobs=[-0.1, -0.2]) for k in range(turns)]
    return t


def test_grpo_samples_carry_group_normalised_advantages_on_every_turn():
    trajectories = [_traj("a", 1.0, turns=2), _traj("a", 0.0), _traj("b", 1.0), _traj("b", 1.0),
                    _traj("a", None), _traj("c", 1.0, status="dropped")]
    samples, metrics = trajectories_to_samples(trajectories, "grpo", GRPOConfig())
    # trained on: the 4 scored "ok" ones. Group a = [1, 0]: mean 0.5, unbiased std sqrt(0.5), so
    # advantages +-0.5 / (0.70711 + 1e-6) = +-0.70711. Group b = [1, 1] has no variance: filtered.
    adv = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert [s.advantage for s in samples] == pytest.approx([adv, adv, -adv])  # 2 turns + 1 turn
    assert [s.response_ids[0] for s in samples] == [4, 5, 4]  # turns in time order
    assert [s.trajectory_index for s in samples] == [0, 0, 1] and {s.group_index for s in samples} == {0}
    assert metrics["filtered_groups"] == 1.0 and metrics["kept_trajectories"] == 2.0
    assert samples[0].rollout_logprobs == [-0.1, -0.2]


def test_nothing_to_train_on_gives_no_samples_and_an_unknown_objective_names_the_stages():
    assert trajectories_to_samples([_traj("a", None), _traj("b", 1.0, status="dropped")], "grpo", GRPOConfig()) == (
        [], {"kept_trajectories": 0.0})
    with pytest.raises(ValueError, match=r"no advantage stage for objective 'dance'; stages: \['grpo', 'ppo'\]"):
        trajectories_to_samples([_traj("a", 1.0)], "dance", GRPOConfig())
    assert sorted(ADVANTAGE_STAGES) == ["grpo", "ppo"]


def test_the_stage_is_invariant_to_the_order_of_groups():
    one = [_traj("a", 1.0), _traj("a", 0.0), _traj("b", 0.0), _traj("b", 1.0), _traj("b", 1.0)]
    two = one[2:] + one[:2]
    by_id = lambda samples, trajs: sorted((trajs[s.trajectory_index].group_id, round(s.advantage, 6)) for s in samples)
    assert by_id(trajectories_to_samples(one, "grpo", GRPOConfig())[0], one) == by_id(
        trajectories_to_samples(two, "grpo", GRPOConfig())[0], two)


def test_ppo_gae_on_a_three_turn_episode_through_the_sample_path_by_hand():
    """Group "a": a 3-turn success (reward 1) and a 1-turn failure (reward 0); a dropped and an
    unscored trajectory are left out. gamma 0.9, lambda 0.5, values given per turn sample.

    Success, values V = (0.2, 0.5, 0.1), rewards r = (0, 0, 1), V after the last turn = 0:
        delta_2 = 1 - 0.1 = 0.9                        A_2 = 0.9
        delta_1 = 0 + 0.9 * 0.1 - 0.5 = -0.41          A_1 = -0.41 + 0.45 * 0.9 = -0.005
        delta_0 = 0 + 0.9 * 0.5 - 0.2 = 0.25           A_0 = 0.25 + 0.45 * -0.005 = 0.24775
    Failure, V = (0.3,), r = (0,): A = -0.3. Returns A + V: (0.44775, 0.495, 1.0), (0.0,).
    """
    trajectories = [_traj("a", 1.0, turns=3), _traj("x", 1.0, status="dropped"), _traj("a", 0.0), _traj("a", None)]
    samples, metrics = trajectories_to_samples(trajectories, "ppo", PPOConfig())
    assert [(s.trajectory_index, s.turn_index, s.reward, s.advantage) for s in samples] == [
        (0, 0, 0.0, 0.0), (0, 1, 0.0, 0.0), (0, 2, 1.0, 0.0), (1, 0, 0.0, 0.0)]  # the dropped one is left out first
    assert metrics["kept_trajectories"] == 2.0 and metrics["filtered_groups"] == 0.0 and metrics["reward_mean"] == 0.5
    config = PPOConfig(gamma=0.9, lam=0.5, whiten_advantages=False)
    out, gae = gae_stage(samples, [0.2, 0.5, 0.1, 0.3], config)
    assert [s.advantage for s in out] == pytest.approx([0.24775, -0.005, 0.9, -0.3])
    assert [s.value_return for s in out] == pytest.approx([0.44775, 0.495, 1.0, 0.0])
    assert [s.old_value for s in out] == pytest.approx([0.2, 0.5, 0.1, 0.3])
    assert gae["return_max"] == pytest.approx(1.0) and gae["advantage_raw_min"] == pytest.approx(-0.3)
    whitened, _ = gae_stage(samples, [0.2, 0.5, 0.1, 0.3], dataclasses.replace(config, whiten_advantages=True))
    raw = torch.tensor([0.24775, -0.005, 0.9, -0.3], dtype=torch.float64)
    assert [s.advantage for s in whitened] == pytest.approx(((raw - raw.mean()) / raw.std()).tolist(), abs=1e-6)
    assert [s.value_return for s in whitened] == pytest.approx([0.44775, 0.495, 1.0, 0.0])  # returns before whitening
    with pytest.raises(ValueError, match="gae_stage got 3 values for 4 samples"):
        gae_stage(samples, [0.0] * 3, config)
    with pytest.raises(ValueError, match="trajectory 0 has turn 0 after turn 2"):  # sorted by length, say
        gae_stage([samples[2], samples[0], samples[1], samples[3]], [0.0] * 4, config)


def test_ppo_stage_puts_the_reward_on_the_last_sampled_turn():
    """A trajectory whose last turn has no sampled tokens (a scripted stop) carries its reward on
    the last turn that does; GAE then bootstraps nothing past it."""
    traj = _traj("a", 1.0, turns=3)
    traj.turns[-1] = Turn(prompt_ids=[1, 2, 3])
    samples, _ = trajectories_to_samples([traj], "ppo", PPOConfig())
    assert [(s.turn_index, s.reward) for s in samples] == [(0, 0.0), (1, 1.0)]


def _on_pages(traj, pages):
    """Give the trajectory's turns the page states `pages` (URL + one element line each)."""
    from webrl.types.records import TurnObservation

    for turn, page in zip(traj.turns, pages):
        turn.observation = TurnObservation(url=f"http://127.0.0.1:9/{page}", elements_text=f"[0] button {page}")
    return traj


def test_step_level_grpo_compares_turns_from_the_same_page_state_by_hand():
    """Group a (all success, so the episode level filters it): P->Q and P->R->Q. gamma 0.5:
    returns 0.5, 1 and 0.25, 0.5, 1. Step group P = {0.5, 0.25}: mean 0.375, so +-0.125; Q = {1, 1}
    is flat and R a singleton: 0. Only the two P turns are kept, with advantage 0 + 1 * (+-0.125).
    Group b = [1, 0] on one page P (its own step group; a's P is another group's):
    episode +-0.5 / (sqrt(0.5) + 1e-6), step +-0.5."""
    trajectories = [_on_pages(_traj("a", 1.0, turns=2), "PQ"), _on_pages(_traj("a", 1.0, turns=3), "PRQ"),
                    _on_pages(_traj("b", 1.0), "P"), _on_pages(_traj("b", 0.0), "P")]
    config = GRPOConfig()
    config.step.weight, config.step.gamma = 1.0, 0.5
    samples, metrics = trajectories_to_samples(trajectories, "grpo", config)
    episode = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert [(s.trajectory_index, s.turn_index) for s in samples] == [(0, 0), (1, 0), (2, 0), (3, 0)]
    assert [s.advantage for s in samples] == pytest.approx([0.125, -0.125, episode + 0.5, -episode - 0.5])
    assert metrics["filtered_groups"] == 1.0 and metrics["step_kept_samples"] == 2.0
    assert metrics["num_step_groups"] == 4.0 and metrics["step_group_size_max"] == 2.0
    off, _ = trajectories_to_samples(trajectories, "grpo", GRPOConfig())  # weight 0: plain GRPO
    assert [s.advantage for s in off] == pytest.approx([episode, -episode])


def test_turns_without_a_recorded_page_never_share_a_step_group():
    trajectories = [_traj("a", 1.0, turns=2), _traj("a", 0.0, turns=2)]  # no observation recorded
    config = GRPOConfig()
    config.step.weight = 1.0
    samples, metrics = trajectories_to_samples(trajectories, "grpo", config)
    episode = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert [s.advantage for s in samples] == pytest.approx([episode, episode, -episode, -episode])
    assert metrics["num_step_groups"] == 4.0 and metrics["step_grouped_fraction"] == 0.0

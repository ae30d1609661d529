"""`webrl.credit.trajectories_to_samples`: the pure step from scored trajectories to learner samples."""
import math

import pytest

from webrl.algos import GRPOConfig
from webrl.credit import ADVANTAGE_STAGES, trajectories_to_samples
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
    with pytest.raises(ValueError, match=r"no advantage stage for objective 'ppo'; stages: \['grpo'\]"):
        trajectories_to_samples([_traj("a", 1.0)], "ppo", GRPOConfig())
    assert sorted(ADVANTAGE_STAGES) == ["grpo"]


def test_the_stage_is_invariant_to_the_order_of_groups():
    one = [_traj("a", 1.0), _traj("a", 0.0), _traj("b", 0.0), _traj("b", 1.0), _traj("b", 1.0)]
    two = one[2:] + one[:2]
    by_id = lambda samples, trajs: sorted((trajs[s.trajectory_index].group_id, round(s.advantage, 6)) for s in samples)
    assert by_id(trajectories_to_samples(one, "grpo", GRPOConfig())[0], one) == by_id(
        trajectories_to_samples(two, "grpo", GRPOConfig())[0], two)

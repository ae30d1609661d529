"""Dynamic sampling through `Trainer.step` over the in-process stand-ins of tests/test_trainer.py:
an iteration with 3 informative groups of 8 draws another round, ends with 8, and accounts for
every group and trajectory drawn; one seed draws the same tasks twice."""
import pytest

from tests.test_trainer import LocalActors
from webrl.config import ConfigError, load_config
from webrl.reward import RewardResult
from webrl.run.config import WebRLConfig

INFORMATIVE_FIRST_ROUND = (0, 2, 5)
"""Group indices of the iteration's own 8 groups scored [1, 0]; the other 5 score [0, 0]."""


def scripted_reward(group_id: str, seen: set) -> RewardResult:
    """Group "it:k:task": k in INFORMATIVE_FIRST_ROUND or k >= 8 (an extra round's group) scores
    1 for its first trajectory and 0 for the rest; every other group scores 0 throughout."""
    k = int(group_id.split(":")[1])
    first = group_id not in seen
    seen.add(group_id)
    return RewardResult(1.0 if first and (k in INFORMATIVE_FIRST_ROUND or k >= 8) else 0.0)


def run_one_iteration(tmp_path, seed=0, reward=scripted_reward):
    """One step of a seeded run (8 tasks x 2 rollouts); returns its metrics, the collect calls
    ([(task ids, first_group, env steps)]), the logged trajectories and the learner."""
    from webrl.run.trainer import Trainer

    config = load_config(WebRLConfig, None, [f"run.run_dir={tmp_path}", f"run.seed={seed}", "trainer.iterations=1",
                                              "tasks.tasks_per_iteration=8", "rollout.group_size=2",
                                              "tasks.eval_tasks=0"])
    actors = LocalActors()
    trainer = Trainer(config, actors=actors)
    try:
        trainer.prepare()
        parts, seen, calls, logged = trainer.parts, set(), [], []
        parts.reward_fn = lambda traj: reward(traj.group_id, seen)
        collect, log = parts.coordinator.collect, parts.trajectory_log

        def recording_collect(tasks, iteration=0, group_sizes=None, first_group=0):
            out = collect(tasks, iteration, group_sizes, first_group=first_group)
            calls.append(([t.spec.id for t in tasks], first_group, out[1].env_steps))
            return out

        def recording_log(traj):
            logged.append(traj.group_id)
            return log(traj) if log is not None else 0

        parts.coordinator.collect, parts.trajectory_log = recording_collect, recording_log
        metrics = trainer.step()
    finally:
        trainer.close()
    return metrics, calls, logged, actors.learners[0]


def test_an_iteration_with_3_of_8_informative_draws_another_round_and_trains_on_8(tmp_path):
    metrics, calls, logged, learner = run_one_iteration(tmp_path / "a")
    # round 0: 8 groups, 3 informative -> 5 missing; rate 3/8, so ceil(5 * 8 / 3) = 14 extra tasks
    # (budget 2 x 8 = 16). Every extra group is [1, 0]: 17 informative of 22 drawn, the first 8 trained
    # (0, 2, 5 and extra groups 8..12), filtered = 5 zero-variance + 9 informative past the target.
    assert [(len(ids), first) for ids, first, _ in calls] == [(8, 0), (14, 8)]
    assert metrics["dynamic_sampling/rounds"] == 1.0 and metrics["dynamic_sampling/extra_tasks"] == 14.0
    assert metrics["informative_groups"] == 17.0
    assert (metrics["drawn_groups"], metrics["trained_groups"], metrics["filtered_groups"],
            metrics["dropped_groups"]) == (22.0, 8.0, 14.0, 0.0)
    assert metrics["drawn_groups"] == metrics["trained_groups"] + metrics["filtered_groups"] + metrics["dropped_groups"]
    assert metrics["dynamic_sampling/extra_env_steps"] == calls[1][2] > 0
    assert metrics["env_steps"] == calls[0][2] + calls[1][2]
    assert metrics["trajectories"] == 44 and metrics["reward/n"] == 44.0  # 22 groups x 2, all scored
    assert len(logged) == 44 and len(set(logged)) == 22  # the trajectory log gets every trajectory drawn
    # credit saw only the 8 trained groups, each [1, 0]
    assert metrics["num_groups"] == 8.0 and metrics["kept_trajectories"] == 16.0
    assert len(learner.updates) == 1 and metrics["samples"] == len(learner.updates[0]) > 0


def test_a_round_dropped_whole_at_scoring_draws_no_other(tmp_path):
    """The judge down for the whole round: its 8 groups are dropped and no extra round is drawn
    (it would be dropped too); the iteration trains on nothing and says so in its counts."""
    metrics, calls, logged, learner = run_one_iteration(
        tmp_path, reward=lambda group_id, seen: RewardResult.drop("judge_connection_error", "refused"))
    assert [(len(ids), first) for ids, first, _ in calls] == [(8, 0)]
    assert metrics["dynamic_sampling/rounds"] == 0.0
    assert (metrics["drawn_groups"], metrics["trained_groups"], metrics["filtered_groups"],
            metrics["dropped_groups"]) == (8.0, 0.0, 0.0, 8.0)
    assert metrics["reward/n_dropped"] == 16.0 and len(logged) == 16  # 8 groups x 2, each logged once


def test_one_seed_draws_the_same_tasks_and_the_round_draws_from_its_own_stream(tmp_path):
    from webrl.envs.task import draw_tasks
    from webrl.rollout.dynamic_sampling import round_rng
    from webrl.run.tasks import task_sources

    _, first, _, _ = run_one_iteration(tmp_path / "a", seed=3)
    _, again, _, _ = run_one_iteration(tmp_path / "b", seed=3)
    assert [ids for ids, _, _ in first] == [ids for ids, _, _ in again]
    config = load_config(WebRLConfig, None, ["tasks.tasks_per_iteration=8", "rollout.group_size=2"])
    candidates = [t.spec.id for t in draw_tasks(task_sources(config.tasks)[0], round_rng(3, 0, 1), 14 * 2)]
    chosen = first[1][0]
    assert all(task_id in candidates for task_id in chosen)  # 14 of the round's 28 candidates


def test_bounded_rounds_stop_short_and_say_so(tmp_path):
    """max_extra_tasks=3: one round of 3 extra tasks (all informative) leaves 6 of 8."""
    from webrl.run.trainer import Trainer

    config = load_config(WebRLConfig, None, [f"run.run_dir={tmp_path}", "trainer.iterations=1",
                                              "tasks.tasks_per_iteration=8", "rollout.group_size=2",
                                              "tasks.eval_tasks=0", "rollout.dynamic_sampling.max_extra_tasks=3"])
    trainer = Trainer(config, actors=LocalActors())
    try:
        trainer.prepare()
        seen: set = set()
        trainer.parts.reward_fn = lambda traj: scripted_reward(traj.group_id, seen)
        metrics = trainer.step()
    finally:
        trainer.close()
    # round 1: min(14, 3) = 3 tasks; then the budget is spent, so the batch trains on 3 + 3 = 6
    assert metrics["dynamic_sampling/rounds"] == 1.0 and metrics["dynamic_sampling/extra_tasks"] == 3.0
    assert (metrics["drawn_groups"], metrics["trained_groups"], metrics["filtered_groups"]) == (11.0, 6.0, 5.0)


@pytest.mark.parametrize("overrides, message", [
    (["learner.objective=ppo", "rollout.dynamic_sampling.enabled=true"], "learner.objective=ppo trains on every group"),
    (["rollout.mode=async", "rollout.dynamic_sampling.enabled=true"], "has no effect with rollout.mode=async"),
    (["rollout.dynamic_sampling.enabled=false", "rollout.dynamic_sampling.max_rounds=3"],
     "rollout.dynamic_sampling.enabled is false"),
])
def test_settings_dynamic_sampling_would_ignore_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(WebRLConfig, None, overrides)


def test_it_is_on_by_default_and_off_where_nothing_is_filtered():
    assert load_config(WebRLConfig, None, []).rollout.dynamic_sampling.enabled
    for overrides in (["learner.objective=ppo"], ["rollout.mode=async"],
                      ["learner.advantage.filter_zero_variance=false"]):
        assert not load_config(WebRLConfig, None, overrides).rollout.dynamic_sampling.enabled
    assert not load_config(WebRLConfig, "smoke", []).rollout.dynamic_sampling.enabled  # keeps zero-variance groups

"""A sandbox episode's checker details reach what the rollout records: the final step's
`info["reward_details"]`, which `RolloutCoordinator` keeps as `Trajectory.info.checker_details`.

Real path: a widgets task (`SiteTask`) in the `WebEnv`s of a plain `EnvWorker` (no Ray), on
Chromium, driven by its oracle. The expected details come from reading the checker:
`check_link` returns `{"links": <link ids the page reported as followed>}`.
"""
import pytest

from webrl.envs import EnvWorker, EnvWorkerConfig
from webrl.envs.observation import oracle_view
from webrl.envs.sites.source import make_task


def _task():
    # widgets level 0, seed 0: 'Follow the "Terms of service" link.', the link is control c4
    task = make_task("widgets", 0, "train", seed=0)
    assert task.kind == "click_link" and task.spec.params["targets"] == [["c4", ""]]
    return task


@pytest.mark.browser
def test_checker_details_reach_the_worker_result():
    worker = EnvWorker(EnvWorkerConfig(num_slots=1, viewport="small"))
    try:
        task = _task()
        result = worker.reset(0, options={"task": task})
        steps = []
        while not (result.terminated or result.truncated):
            action = task.oracle_action(oracle_view(result.observation, result.info))
            result = worker.step(0, action)
            steps.append((action.kind, result.info["reward_details"]))
        # the oracle clicks the link (no details on a step that does not end the episode), then stops
        assert steps == [("click", {}), ("stop", {"links": ["c4"]})]
        assert result.reward == 1.0 and result.info["needs_judge"] is False

        # a failed episode carries its evidence too: nothing followed, reward 0
        worker.reset(0, options={"task": _task()})
        result = worker.step(0, "stop()")
        assert result.terminated and result.reward == 0.0
        assert result.info["reward_details"] == {"links": []}
    finally:
        worker.close()


class _ThreadedWorker:
    """The coordinator's async worker interface over a plain (sync Playwright) EnvWorker: every
    call runs on one thread, the thread Playwright's sync objects belong to."""

    def __init__(self, worker, pool):
        self.worker, self.pool = worker, pool

    async def reset(self, slot, seed, options):
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(self.pool, self.worker.reset, slot, seed, options)

    async def step(self, slot, action):
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(self.pool, self.worker.step, slot, action)


class _StopEngine:
    def act(self, requests):
        from webrl.actions import Action
        from webrl.policy.types import Decision

        return [Decision(parsed=Action.stop(), response_text="stop()") for _ in requests]

    def load_weights(self, weights):
        pass


@pytest.mark.browser
def test_a_rollout_trajectory_keeps_its_checkers_details_through_scoring_and_the_log(tmp_path):
    """Through RolloutCoordinator, the programmatic reward and the trajectory JSONL: the checker's
    details are `info.checker_details`; `reward_details` is the reward function's own account."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.rollout.test_coordinator_logic import AsyncInference
    from webrl.reward import ProgrammaticReward, score_trajectories
    from webrl.rollout import InferenceConfig, InferenceWorker, RolloutConfig, RolloutCoordinator
    from webrl.types import load_trajectories, save_trajectories

    pool = ThreadPoolExecutor(1)
    worker = pool.submit(EnvWorker, EnvWorkerConfig(num_slots=1, viewport="small")).result()
    try:
        inference = AsyncInference(InferenceWorker(_StopEngine(), InferenceConfig(batch_window_s=0.0)))
        coordinator = RolloutCoordinator([(_ThreadedWorker(worker, pool), 0)], [inference],
                                         RolloutConfig(group_size=1, max_turns=2))
        (traj,), _ = coordinator.collect([_task()], 0)
    finally:
        pool.submit(worker.close).result()
        pool.shutdown()
    # stopping at once follows no link: the checker reports an empty list and reward 0
    assert traj.status == "ok", traj.drop_reason
    assert traj.info.task_reward == 0.0 and traj.reward is None
    assert traj.info.checker_details == {"links": []}
    score_trajectories(ProgrammaticReward(), [traj])
    assert traj.reward == 0.0 and traj.reward_details == {"rule": "checker", "checker_reward": 0.0}
    assert traj.info.checker_details == {"links": []}  # scoring does not overwrite it
    save_trajectories(tmp_path / "t.jsonl", [traj])
    assert load_trajectories(tmp_path / "t.jsonl")[0].info.checker_details == {"links": []}

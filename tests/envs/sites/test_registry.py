"""Registration of the sandbox ids, `check_env` on each, and `record_demos` writing
trajectories in the project's format."""
import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from webrl.envs.sites import register_site_envs
from webrl.envs.sites.cli import record_demos
from webrl.envs.sites.registry import SANDBOX_ENV_ID, SITE_ENV_IDS
from webrl.envs.sites.source import SandboxTaskSource
from webrl.types import load_trajectories

IDS = list(SITE_ENV_IDS.values()) + [SANDBOX_ENV_ID]


def test_ids_are_registered_with_a_task_source():
    assert register_site_envs() == IDS and register_site_envs() == IDS  # idempotent
    for site, env_id in SITE_ENV_IDS.items():
        spec = gymnasium.spec(env_id)
        assert spec.entry_point == "webrl.envs.web_env:WebEnv"
        assert spec.kwargs["tasks"].sites == (site,) and spec.kwargs["tasks"].levels == (0, 1, 2)
    assert gymnasium.spec(SANDBOX_ENV_ID).kwargs["tasks"].sites == ("shop", "travel", "wiki", "widgets")


@pytest.mark.browser
def test_sandbox_difficulty_option(browser_session):
    register_site_envs()
    env = gymnasium.make(SANDBOX_ENV_ID, tasks=SandboxTaskSource(levels=(0,), split="test"),
                         config={"browser": {"viewport": "small"}}, session=browser_session)
    try:
        for seed in (1, 2):
            _obs, info = env.reset(seed=seed)
            assert "/l0/test/" in info["task_id"]
    finally:
        env.close()


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("env_id", IDS)
def test_check_env(browser_session, env_id):
    register_site_envs()
    env = gymnasium.make(env_id, config={"browser": {"viewport": "small"}}, session=browser_session)
    try:
        # includes: same seed -> same observation. The close check deep-copies the env, which
        # cannot copy a shared browser session (the MiniWoB check skips it for the same reason).
        check_env(env.unwrapped, skip_render_check=True, skip_close_check=True)
    finally:
        env.close()


@pytest.mark.browser
def test_record_demos_writes_loadable_trajectories(browser_session, tmp_path):
    summary = record_demos(3, tmp_path, seed=5, levels=(0,), sites=("widgets", "wiki"), viewport="small",
                           session=browser_session)
    assert summary["episodes"] == 3 and summary["saved"] == 3 and not summary["failed"]
    trajectories = load_trajectories(tmp_path / "demos.jsonl")
    assert len(trajectories) == 3
    for traj in trajectories:
        assert traj.info.task_reward == 1.0 and traj.reward is None and traj.goal and traj.turns  # not scored yet
        assert all(t.decided_by == "oracle" and t.action is not None and t.images for t in traj.turns)
        assert traj.turns[0].images[0].size == (640, 480)

"""Registration of the sandbox ids and `check_env` on each."""
import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from webrl.envs.sites import register_site_envs
from webrl.envs.sites.registry import SANDBOX_ENV_ID, SITE_ENV_IDS
from webrl.envs.sites.source import SandboxTaskSource

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

"""A task built in another process (placeholder URL, no server) runs where the env runs:
WebEnv calls `task.prepare()` before opening the start URL."""
import pytest

from webrl.envs import WebEnv
from webrl.envs.observation import oracle_view
from webrl.envs.sites.source import PLACEHOLDER_BASE, make_task


@pytest.mark.browser
def test_task_with_placeholder_url_is_prepared_and_solved(browser_session):
    task = make_task("widgets", 0, "train", seed=3, start_server=False)
    assert task.spec.start_url.startswith(PLACEHOLDER_BASE + "/")
    env = WebEnv({"browser": {"viewport": "640x480"}}, session=browser_session)
    try:
        obs, info = env.reset(options={"task": task})
        assert not info.get("infra_error") and not task.spec.start_url.startswith(PLACEHOLDER_BASE + "/")
        reward, done = 0.0, False
        while not done:
            action = task.oracle_action(oracle_view(obs, info))
            obs, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        assert reward == 1.0
    finally:
        env.close()


def test_prepare_is_optional_for_the_task_protocol():
    from webrl.envs.task import Task, TaskSpec

    class Minimal:  # a task written against the protocol without the optional hook
        spec = TaskSpec(id="t", goal="g", start_url="http://127.0.0.1:1/")

        def setup(self, page): ...

        def reward(self, page, answer): ...

        def oracle_action(self, observation): ...

        def teardown(self, page): ...

    assert isinstance(Minimal(), Task)

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


@pytest.mark.browser
def test_sandbox_episode_starts_with_one_navigation(browser_session):
    """`entry_url()` creates the episode's state and the env opens it directly: the tab's history
    holds the blank tab and one page (the start page, reached by the cookie redirect) and the site server created
    exactly one session (the episode's, no anonymous one from a cookie-less first load)."""
    from webrl.envs.sites.state import STORE

    task = make_task("widgets", 0, "train", seed=4)
    env = WebEnv({"browser": {"viewport": "640x480"}}, session=browser_session)
    try:
        before = len(STORE)
        obs, info = env.reset(options={"task": task})
        assert len(STORE) == before + 1 and STORE.get(task.sid) is not None
        assert env.page.evaluate("history.length") == 2  # the new tab's about:blank, then the start page
        assert env.page.url == task.spec.start_url
    finally:
        env.close()


@pytest.mark.browser
def test_setup_after_a_caller_opened_the_start_url(browser_session):
    """A caller that opens `spec.start_url` itself and then calls `setup(page)` (the protocol's
    plain order) still gets the episode's state and cookie."""
    task = make_task("widgets", 0, "train", seed=5)
    context = browser_session.new_context((640, 480))
    try:
        page = context.new_page()
        page.goto(task.spec.start_url)
        task.setup(page)
        cookies = {c["name"]: c["value"] for c in context.cookies()}
        assert task.sid and task.sid in cookies.values()
        assert page.url == task.spec.start_url and task.check().details.get("error") is None
    finally:
        context.close()

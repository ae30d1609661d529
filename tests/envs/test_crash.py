"""Crash recovery: a killed Chromium or a crashed renderer ends the episode with infra_error
(truncated, never an exception), and the next reset works on a relaunched browser."""
from __future__ import annotations

import os
import signal

import pytest

from webrl.envs import BrowserSession
from tests.envs.helpers import element_id, make_env, spec

pytestmark = pytest.mark.browser


@pytest.fixture
def own_session():
    """A browser of this test alone: killing it must not disturb the shared one."""
    session = BrowserSession()
    session.start()
    yield session
    session.close()


def _wait_gone(pid: int, timeout_s: float = 30.0) -> None:
    import time

    import psutil

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    raise AssertionError(f"Chromium {pid} still running {timeout_s:.0f} s after SIGKILL (machine overloaded?)")


def test_killed_browser_gives_infra_error_then_recovers(own_session, fixture_server):
    env = make_env(own_session, step_timeout_s=10.0)
    try:
        _, info = env.reset(options={"task": spec(fixture_server)})
        pid = own_session.browser_pid()
        assert pid is not None and pid != os.getpid()
        generation = own_session.generation
        os.kill(pid, signal.SIGKILL)  # the Chromium main process this session launched
        _wait_gone(pid)  # on a loaded machine the step could otherwise race the process's exit
        obs, reward, terminated, truncated, info = env.step(f"click({element_id(info, 'btn')})")
        assert (reward, terminated, truncated) == (0.0, False, True)
        assert info["infra_error"].startswith("browser_crashed"), info["infra_error"]
        assert info["truncation_reason"] == "infra_error" and obs["last_action_error"] == info["infra_error"]
        assert obs in env.observation_space  # a blank observation of the right shape
        assert own_session.generation == generation + 1 and own_session.is_alive()
        _, info = env.reset(options={"task": spec(fixture_server)})
        obs, _, _, truncated, _ = env.step(f"click({element_id(info, 'btn')})")
        assert not truncated and env.page.inner_text("#out") == "clicked 1"
    finally:
        env.close()


def test_each_session_knows_its_own_chromium(own_session):
    """Sessions of one process share a Playwright driver; `browser_pid` is each one's own
    Chromium (it used to return whichever the /proc walk met first, so a test could kill the
    shared browser instead of its own)."""
    other = BrowserSession()
    other.start()
    try:
        mine, theirs = own_session.browser_pid(), other.browser_pid()
        assert None not in (mine, theirs) and mine != theirs
        os.kill(theirs, signal.SIGKILL)
        _wait_gone(theirs)
        context = own_session.new_context((320, 240))  # my browser was not the one killed
        try:
            page = context.new_page()
            assert page.evaluate("1 + 1") == 2 and own_session.browser_pid() == mine
        finally:
            context.close()
    finally:
        other.close()


def test_browser_killed_between_episodes_reset_relaunches(own_session, fixture_server):
    env = make_env(own_session)
    try:
        env.reset(options={"task": spec(fixture_server)})
        os.kill(own_session.browser_pid(), signal.SIGKILL)
        obs, info = env.reset(options={"task": spec(fixture_server)})
        assert obs["title"] == "Basic fixture" and own_session.is_alive()
    finally:
        env.close()


def test_crashed_renderer_gives_infra_error(own_session, fixture_server):
    env = make_env(own_session, step_timeout_s=10.0)
    try:
        _, info = env.reset(options={"task": spec(fixture_server)})
        try:  # test-side navigation (the env itself refuses chrome:// URLs)
            env.page.goto("chrome://crash", timeout=5000)
        except Exception:
            pass
        obs, reward, terminated, truncated, info = env.step("wait(0)")
        assert truncated and info["infra_error"].startswith("page_crashed"), info["infra_error"]
        assert own_session.is_alive()  # only the renderer died
        obs, info = env.reset(options={"task": spec(fixture_server)})
        assert obs["title"] == "Basic fixture"
    finally:
        env.close()

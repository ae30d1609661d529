"""Fixtures of the sandbox-site browser tests: one Chromium for the run (the envs plugin's
`browser_session`), WebEnvs and pages on it."""
import pytest


@pytest.fixture(scope="module")
def site_env(browser_session):
    """A WebEnv at the small (640x480) viewport on the shared browser."""
    from webrl.envs import WebEnv, WebEnvConfig

    env = WebEnv(WebEnvConfig.from_dict({"browser": {"viewport": "small"}}), session=browser_session)
    yield env
    env.close()


@pytest.fixture(scope="module")
def light_page(browser_session):
    """A raw page for the light oracle runner (reused across episodes)."""
    context = browser_session.new_context((640, 480))
    page = context.new_page()
    yield page
    context.close()

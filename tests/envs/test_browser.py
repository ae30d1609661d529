"""Browser session pieces: executable resolution, viewports, readiness waits (no fixed sleeps)."""
from __future__ import annotations

import pytest

from webrl.envs.browser import DEBIAN_CHROMIUM, resolve_executable, viewport_size
from tests.envs.helpers import element_id, make_env, spec


def test_resolve_executable(monkeypatch, tmp_path):
    fake = tmp_path / "chrome"
    fake.write_text("")
    monkeypatch.delenv("WEBRL_CHROMIUM", raising=False)
    assert resolve_executable(str(fake)) == str(fake)  # the config wins
    monkeypatch.setenv("WEBRL_CHROMIUM", str(fake))
    assert resolve_executable("") == str(fake)  # then the environment variable
    monkeypatch.setenv("WEBRL_CHROMIUM", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_executable("")
    monkeypatch.delenv("WEBRL_CHROMIUM")
    # no Playwright browser given: Debian's chromium (present on these machines)
    assert resolve_executable("") == DEBIAN_CHROMIUM


def test_viewport_presets():
    assert viewport_size("openwebrl") == (1280, 1000)  # the OpenWebRL recipe
    assert viewport_size("cpu") == (800, 600) and viewport_size("1024x768") == (1024, 768)
    with pytest.raises(ValueError, match="sides in 100..8192"):
        viewport_size("10x10")


@pytest.mark.browser
@pytest.mark.parametrize("button, expected", [("fetch", "fetched"), ("xhr", "xhr done"), ("burst", "tick 5")])
def test_observation_waits_for_network_and_dom_quiet(browser_session, fixture_server, button, expected):
    """The step returns only after the page's fetch/XHR finished (300 ms server delay) and the DOM
    stopped changing; without the readiness wait the observation would still say "loading"."""
    env = make_env(browser_session)
    try:
        _, info = env.reset(options={"task": spec(fixture_server, "ready.html")})
        env.step(f"click({element_id(info, button)})")
        assert env.page.inner_text("#out") == expected
    finally:
        env.close()


@pytest.mark.browser
def test_slow_navigation_is_waited_for(browser_session, fixture_server):
    env = make_env(browser_session)
    try:
        _, info = env.reset(options={"task": spec(fixture_server, "ready.html")})
        obs, *_ = env.step(f"click({element_id(info, 'slowlink')})")
        assert obs["title"] == "Slow" and obs["feedback"].endswith("Page navigated to " + obs["url"])
    finally:
        env.close()

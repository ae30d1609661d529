"""Browser session pieces: executable resolution, viewports, readiness waits (no fixed sleeps)."""
from __future__ import annotations

import pytest

from webrl.envs.browser import DEBIAN_CHROMIUM, resolve_executable, viewport_size
from webrl.envs.readiness import DOM_QUIET_MS, READINESS_PROBE, readiness_arg
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
@pytest.mark.parametrize("button, expected", [("fetch", "fetched"), ("xhr", "xhr done")])
def test_observation_waits_for_network(browser_session, fixture_server, button, expected):
    """The step returns only after the page's fetch/XHR finished (300 ms server delay); without
    the readiness wait the observation would still say "loading"."""
    env = make_env(browser_session)
    try:
        _, info = env.reset(options={"task": spec(fixture_server, "ready.html")})
        env.step(f"click({element_id(info, button)})")
        assert env.page.inner_text("#out") == expected
    finally:
        env.close()


@pytest.mark.browser
def test_observation_waits_for_dom_quiet(browser_session, fixture_server):
    """A click whose effect is deferred (it only starts a timer) and then five DOM updates 10 ms
    apart (under the 30 ms quiet window): the step returns after the last. The contract covers updates that come closer than the window; a loaded machine can
    delay the page's timers past it, so a burst whose recorded gaps exceeded the window does not
    count and is clicked again (at most five bursts; at least one must count)."""
    env = make_env(browser_session)
    try:
        _, info = env.reset(options={"task": spec(fixture_server, "ready.html")})
        counted = []
        for _ in range(5):
            env.step(f"click({element_id(info, 'burst')})")
            shown = env.page.inner_text("#out")
            times = env.page.evaluate("window.tickTimes")
            if max(b - a for a, b in zip(times, times[1:])) < DOM_QUIET_MS:
                counted.append(shown)
                if len(counted) == 2:
                    break
        assert counted and counted == ["tick 5"] * len(counted)
    finally:
        env.close()


@pytest.mark.browser
def test_quiet_across_a_stall_is_confirmed_by_another_poll(browser_session, fixture_server):
    """The probe itself, in a real page: a poll that comes more than the quiet window after the
    previous one (the page was not running) does not answer ready, even though the last mutation
    is older than the window; the next poll, finding no new mutation, does. A poll at the usual
    cadence answers at once."""
    env = make_env(browser_session)
    try:
        env.reset(options={"task": spec(fixture_server, "ready.html")})
        polls = env.page.evaluate(
            """([probe, arg]) => {
              const p = eval(probe), s = window.__webrl, now = performance.now();
              s.token = arg.token; s.waitStart = now - 200; s.lastMutation = now - 100;
              s.lastPoll = now - 80;          // the previous poll ran 80 ms ago: a stall
              const first = !!p(arg), second = !!p(arg);
              s.lastMutation = performance.now() - 100; s.lastPoll = performance.now() - 5;
              const cadence = !!p(arg);       // the previous poll 5 ms ago: no stall
              return [first, second, cadence];
            }""", [READINESS_PROBE, readiness_arg(7)])
        assert polls == [False, True, True]
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

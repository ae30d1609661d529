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
    with pytest.raises(ValueError, match=r"got \[332, 214\] \(list\); write e.g. '1280x720'"):
        viewport_size([332, 214])  # YAML's natural spelling is named, not a TypeError


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


def _counting_screenshots(page, change_after_first: str = "") -> list:
    """Wrap `page.screenshot` (on this Page object only) to count the calls; with
    `change_after_first`, run that script in the page right after the first screenshot returns
    (a change that comes after an early screenshot, inside the quiet window)."""
    calls, real = [], page.screenshot

    def counted(*args, **kwargs):
        png = real(*args, **kwargs)
        calls.append(1)
        if change_after_first and len(calls) == 1:
            page.evaluate(change_after_first)
        return png

    page.screenshot = counted
    return calls


@pytest.mark.browser
def test_a_screenshot_taken_in_the_quiet_window_is_kept_only_when_the_page_did_not_change(browser_session,
                                                                                          fixture_server):
    """A click that changes the page at once: the screenshot taken inside the DOM-quiet window is
    the observation (one screenshot, red; the page has a text field, whose caret Playwright hides
    for each screenshot by a style change that must not count as the page's). The same click with the page changing right after that
    screenshot (blue): the page's stamp moved, so the observation is a second screenshot, blue."""
    env = make_env(browser_session)
    try:
        _, info = env.reset(options={"task": spec(fixture_server, "early.html")})
        calls = _counting_screenshots(env.page)
        obs, _, _, _, info = env.step(f"click({element_id(info, 'now')})")
        assert tuple(obs["screenshot"][5, 5]) == (255, 0, 0)
        assert env.screenshot_early and len(calls) == 1
        calls = _counting_screenshots(env.page, "document.body.style.background = 'rgb(0, 0, 255)'")
        obs, _, _, _, info = env.step(f"click({element_id(info, 'now')})")
        assert tuple(obs["screenshot"][5, 5]) == (0, 0, 255)
        assert not env.screenshot_early and len(calls) == 2
    finally:
        env.close()


@pytest.mark.browser
def test_the_reset_takes_its_screenshot_early_and_its_miss_does_not_count_against_the_steps(browser_session,
                                                                                            fixture_server):
    """An entry page loaded (the task's setup waits for its load event, as MiniWoB++'s does) and
    calm: the reset's observation is the screenshot taken inside the readiness wait's quiet window
    (white) in at least one of 5 resets. (An entry page still loading when the wait starts gets no
    early screenshot.) An entry
    page whose DOM changes every 4 ms from its load on: the reset's early screenshot is outdated (a
    miss), yet the episode's miss count stays 0 (a page may still settle after its load); the
    first step's miss counts (1)."""
    from webrl.envs.task import BaseTask

    class Loaded(BaseTask):
        def setup(self, page):
            page.wait_for_load_state("load")

    env = make_env(browser_session)
    try:
        # a resource timing entry the browser delivers to the page after the arm call moves the
        # page's stamp (a miss, correctly answered by a second screenshot): a few % of resets here
        for _ in range(5):
            obs, _ = env.reset(options={"task": Loaded(spec(fixture_server, "early.html"))})
            if env.screenshot_early:
                break
        assert env.screenshot_early and tuple(obs["screenshot"][5, 5]) == (255, 255, 255)
        _, info = env.reset(options={"task": Loaded(spec(fixture_server, "early_restless.html"))})
        assert not env.screenshot_early and env._episode.early_misses == 0
        env.step(f"click({element_id(info, 'go')})")
        assert not env.screenshot_early and env._episode.early_misses == 1
    finally:
        env.close()


@pytest.mark.browser
def test_a_page_that_never_goes_quiet_stops_the_early_screenshots(browser_session, fixture_server):
    """A DOM changing every 4 ms outdates every early screenshot; after two misses in a row the
    episode stops taking them: one screenshot per step again."""
    from webrl.envs.episode import EARLY_MISS_LIMIT

    env = make_env(browser_session)
    try:
        _, info = env.reset(options={"task": spec(fixture_server, "early.html")})
        env.step(f"click({element_id(info, 'restless')})")
        assert env._episode.early_misses == 1
        calls = _counting_screenshots(env.page)
        for _ in range(EARLY_MISS_LIMIT):  # the first misses again; the second is not tried
            _, _, _, _, info = env.step(f"click({element_id(info, 'now')})")
        assert env._episode.early_misses == EARLY_MISS_LIMIT and not env.screenshot_early
        calls.clear()
        env.step(f"click({element_id(info, 'now')})")
        assert len(calls) == 1 and env._episode.early_misses == EARLY_MISS_LIMIT
    finally:
        env.close()

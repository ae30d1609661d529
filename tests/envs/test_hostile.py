"""Hostile pages served locally: each ends in a clear error or a truncation within the time
limit, and the same env then serves a normal episode.

The "outside" host is 127.0.0.2 (another loopback address): no test traffic leaves the machine.
Time bounds asserted here are the safety guarantee (step limit + the time to close a tab), with
a wide margin for a loaded machine; they are not speed measurements.
"""
from __future__ import annotations

import time

import pytest

from tests.envs.helpers import element_id, make_env, spec
from webrl.envs import safety
from webrl.envs.observation import MAX_ELEMENTS

pytestmark = pytest.mark.browser

STEP_LIMIT_S = 8.0
SAFETY = dict(step_timeout_s=STEP_LIMIT_S)
MARGIN_S = 10.0  # closing a stuck tab (the watchdog's grace, 5 s by default), a loaded CI machine


@pytest.fixture(scope="module", autouse=True)
def tight_limits():
    """2 s per element action and at most 2 tabs (module constants of webrl.envs.safety) here."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(safety, "ACTION_TIMEOUT_S", 2.0)
        patch.setattr(safety, "MAX_TABS", 2)
        yield


@pytest.fixture(scope="module")
def env(browser_session):
    env = make_env(browser_session, **SAFETY)
    yield env
    env.close()


def timed_step(env, action):
    started = time.monotonic()
    result = env.step(action)
    return result, time.monotonic() - started


def serves_a_normal_episode(env, server) -> None:
    _, info = env.reset(options={"task": spec(server)})
    obs, reward, terminated, truncated, _ = env.step(f"click({element_id(info, 'btn')})")
    assert obs["last_action_error"] == "" and not truncated
    assert env.page.inner_text("#out") == "clicked 1"


def test_outside_host_is_blocked(env, fixture_server, outside_server):
    before = len(outside_server.requests)
    obs, info = env.reset(options={"task": spec(fixture_server, f"outside.html?to={outside_server.base_url}")})
    # the <img> to the outside host was blocked while loading
    assert f"Blocked image request to {outside_server.netloc}" in obs["feedback"]
    obs, _, _, truncated, _ = env.step(f"click({element_id(info, 'out-link')})")
    assert f"Blocked navigation to {outside_server.netloc}: outside the allowed domains" in obs["feedback"]
    assert not truncated and not obs["url"].startswith(outside_server.base_url)
    obs, *_ = env.step(f'goto("{outside_server.url("page2.html")}")')
    assert obs["last_action_error"].startswith(f"navigation to {outside_server.url('page2.html')} blocked")
    for url in ("file:///etc/passwd", "chrome://version", "data:text/html,hi", "javascript:alert(1)"):
        obs, *_ = env.step(f'goto("{url}")')
        assert "blocked" in obs["last_action_error"] and "URLs are not allowed" in obs["last_action_error"]
    assert len(outside_server.requests) == before  # nothing reached the outside host
    serves_a_normal_episode(env, fixture_server)


def test_fetch_to_outside_host_fails_in_page(env, fixture_server, outside_server):
    before = len(outside_server.requests)
    _, info = env.reset(options={"task": spec(fixture_server, f"outside.html?to={outside_server.base_url}")})
    obs, *_ = env.step(f"click({element_id(info, 'fetch')})")
    assert env.page.inner_text("#out") == "fetch failed"
    assert f"Blocked fetch request to {outside_server.netloc}" in obs["feedback"]
    assert len(outside_server.requests) == before


def test_file_and_data_links_do_not_leave_the_site(env, fixture_server):
    _, info = env.reset(options={"task": spec(fixture_server, "outside.html")})
    for link in ("file-link", "data-link"):
        obs, _, _, truncated, _ = env.step(f"click({element_id(info, link)})")
        assert not truncated
        assert obs["url"].startswith(fixture_server.base_url), obs["url"]


def test_redirect_chain(env, fixture_server, outside_server):
    _, info = env.reset(options={"task": spec(fixture_server)})
    obs, *_ = env.step(f'goto("{fixture_server.url("__redirect/5")}")')  # 5 hops, then basic.html
    assert obs["url"] == fixture_server.url("basic.html") and obs["last_action_error"] == ""
    obs, *_ = env.step(f'goto("{fixture_server.url("__redirect/40")}")')  # Chromium stops at 20
    assert obs["last_action_error"].endswith("ERR_TOO_MANY_REDIRECTS")
    before = len(outside_server.requests)
    obs, _, _, truncated, _ = env.step(
        f'goto("{fixture_server.url("__redirect_to?url=" + outside_server.url("page2.html"))}")')
    assert "ERR_BLOCKED_BY_CLIENT" in obs["last_action_error"]
    assert f"Blocked navigation to {outside_server.netloc}" in obs["feedback"]
    assert len(outside_server.requests) == before and not truncated
    serves_a_normal_episode(env, fixture_server)


def test_a_later_redirect_hop_out_is_refused_before_it_is_sent(env, fixture_server, outside_server):
    """allowed -> allowed -> outside: Chromium checks every hop against the proxy guard's bypass
    list, so the outside host never sees the request (the route guard's pre-fetch checked only
    the first hop and reset the tab after the second one loaded)."""
    from urllib.parse import quote
    env.reset(options={"task": spec(fixture_server)})
    inner = fixture_server.url("__redirect_to") + "?url=" + quote(outside_server.url("page2.html"), safe="")
    before = len(outside_server.requests)
    obs, _, _, truncated, _ = env.step(f'goto("{fixture_server.url("__redirect_to")}?url={quote(inner, safe="")}")')
    assert len(outside_server.requests) == before, outside_server.requests[before:]
    assert "ERR_BLOCKED_BY_CLIENT" in obs["last_action_error"]
    assert f"Blocked navigation to {outside_server.netloc}: a redirect outside the allowed domains" in obs["feedback"]
    assert obs["url"] != outside_server.url("page2.html") and not truncated


def test_popup_flood(env, fixture_server):
    obs, info = env.reset(options={"task": spec(fixture_server, "popups.html")})
    assert len(obs["tabs"].splitlines()) == 1  # the onload / timer popups were all blocked
    (obs, _, _, truncated, _), elapsed = timed_step(env, f"click({element_id(info, 'flood')})")
    # one user gesture opens one window; the other 49 are blocked
    assert len(obs["tabs"].splitlines()) == 2 and "New tab opened (tab 1)" in obs["feedback"]
    assert not truncated and elapsed < STEP_LIMIT_S + MARGIN_S
    env.step("switch_tab(0)")
    obs, _, _, truncated, _ = env.step(f"click({element_id(info, 'flood')})")
    assert "limit of 2 tabs reached" in obs["feedback"] and len(obs["tabs"].splitlines()) == 2
    serves_a_normal_episode(env, fixture_server)


def test_dialogs_are_handled_and_reported(env, fixture_server):
    _, info = env.reset(options={"task": spec(fixture_server, "dialogs.html")})
    obs, *_ = env.step(f"click({element_id(info, 'alert')})")
    assert "Dialog alert 'hello there' accepted" in obs["feedback"]
    obs, *_ = env.step(f"click({element_id(info, 'confirm')})")
    assert env.page.inner_text("#out") == "confirmed"
    env.step(f"click({element_id(info, 'prompt')})")
    assert env.page.inner_text("#out") == "prompt:bob"  # accepted with its default text


def test_alert_loop_truncates(env, fixture_server):
    _, info = env.reset(options={"task": spec(fixture_server, "dialogs.html")})
    (obs, reward, terminated, truncated, info), elapsed = timed_step(env, f"click({element_id(info, 'loop')})")
    assert truncated and not terminated and reward == 0.0
    assert info["infra_error"].startswith("page_unresponsive")
    assert elapsed < STEP_LIMIT_S + MARGIN_S
    serves_a_normal_episode(env, fixture_server)


@pytest.mark.parametrize("button", ["now", "later", "while-waiting"])
def test_infinite_loop_truncates(env, fixture_server, button):
    """A script that loops in the click handler, right after it, or once the env is waiting for
    the page to settle (Playwright's own wait_for_function timeout never returns then: the step
    watchdog closes the episode's context)."""
    _, info = env.reset(options={"task": spec(fixture_server, "loop.html")})
    (obs, reward, terminated, truncated, info), elapsed = timed_step(env, f"click({element_id(info, button)})")
    assert truncated and info["infra_error"].startswith("page_unresponsive"), info.get("infra_error")
    assert info["truncation_reason"] == "infra_error" and obs["last_action_error"] == info["infra_error"]
    assert elapsed < STEP_LIMIT_S + MARGIN_S
    serves_a_normal_episode(env, fixture_server)


def test_downloads_are_refused(env, fixture_server, tmp_path):
    _, info = env.reset(options={"task": spec(fixture_server, "download.html")})
    obs, _, _, truncated, _ = env.step(f"click({element_id(info, 'attach')})")
    assert "Download refused: payload.bin" in obs["feedback"] and not truncated
    obs, *_ = env.step(f"click({element_id(info, 'attr')})")
    assert "Download refused: copy.html" in obs["feedback"]
    assert obs["url"] == fixture_server.url("download.html")
    serves_a_normal_episode(env, fixture_server)


def test_fifty_thousand_elements(browser_session, fixture_server):
    env = make_env(browser_session, **SAFETY)
    env.config.browser.load_timeout_s = 60.0  # building 50k nodes takes long on a loaded CI box
    try:
        started = time.monotonic()
        obs, info = env.reset(options={"task": spec(fixture_server, "big_dom.html")})
        limit = MAX_ELEMENTS  # 400
        assert len(info["elements"]) == limit
        # candidates in DOM order: the #grid div (it has onclick) and its 5000 buttons; the scan
        # stops after `limit` kept ones (the div + 399 buttons): 5001 - 400 left unscanned
        assert obs["elements_text"].splitlines()[-1] == \
            f"... up to {5001 - limit} more elements not listed (element limit reached)"
        assert time.monotonic() - started < 2 * STEP_LIMIT_S + MARGIN_S + env.config.browser.load_timeout_s
        button = next(e["id"] for e in info["elements"] if e["name"] == "b3")
        env.step(f"click({button})")
        assert env.page.inner_text("#out") == "pressed b3"
        serves_a_normal_episode(env, fixture_server)
    finally:
        env.close()


def test_episode_time_limit_truncates(browser_session, fixture_server):
    # env time = time inside reset/step; a reset alone takes longer than 1 ms, so the first
    # step ends the episode
    env = make_env(browser_session, episode_timeout_s=0.001)
    try:
        env.reset(options={"task": spec(fixture_server)})
        obs, reward, terminated, truncated, info = env.step("wait(0)")
        assert truncated and not terminated and info["truncation_reason"] == "infra_error"
        assert info["infra_error"].startswith("episode_time_limit")
        assert obs["title"] == "Basic fixture"  # the last observation is still a real one
        serves_a_normal_episode(make_env(browser_session), fixture_server)
    finally:
        env.close()


def test_beforeunload_never_blocks_leaving(env, fixture_server):
    # Chromium under Playwright does not prompt on navigation (it would be accepted and reported
    # as a dialog if it did): either way the page cannot keep the agent
    _, info = env.reset(options={"task": spec(fixture_server, "dialogs.html")})
    env.step(f"click({element_id(info, 'arm')})")  # a real click: the page may now ask on leave
    assert env.page.inner_text("#out") == "armed"
    obs, _, _, truncated, _ = env.step(f"click({element_id(info, 'away')})")
    assert obs["title"] == "Page two" and not truncated

"""Context reuse across episodes (`webrl.envs.context_pool`): nothing leaks from one episode to
the next, the guards act for the new task, and failures fall back to a fresh context.

The leak probe is checked three ways: a reused context must read exactly what a fresh context
reads (reference vs fast path), both must read the hand-written clean state, and a pool whose
scrub is skipped must read the leaks (so the probe can fail).
"""
from __future__ import annotations

import pytest

from tests.envs.helpers import make_env, spec
from webrl.envs.context_pool import ReusableContext

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Episode 1 leaves state behind in every store a page can write.
WRITE_STATE = """async () => {
  document.cookie = 'leak=1; max-age=3600';
  localStorage.setItem('leak', '1');
  sessionStorage.setItem('leak', '1');
  await new Promise((ok, fail) => {
    const open = indexedDB.open('leakdb', 1);
    open.onupgradeneeded = () => open.result.createObjectStore('s');
    open.onsuccess = () => { open.result.close(); ok(); };
    open.onerror = fail;
  });
  await (await caches.open('leakcache')).put('/leak', new Response('x'));
  history.pushState({}, '', '#pushed');
  const field = document.querySelector('input, button, a');
  if (field) field.focus();
  setTimeout(() => alert('late dialog'), 30);
  return true;
}"""
# What episode 2 sees. Clean: the values of CLEAN below (history: the new tab's about:blank, then
# the entry page, as Playwright's new_page + goto leave it).
READ_STATE = """async () => ({
  cookie: document.cookie,
  local: localStorage.getItem('leak'),
  session: sessionStorage.getItem('leak'),
  indexedDB: (await indexedDB.databases()).map((d) => d.name),
  cacheStorage: await caches.keys(),
  serviceWorkers: (await navigator.serviceWorker.getRegistrations()).length,
  historyLength: history.length,
  focusOnBody: document.activeElement === document.body,
  geolocation: (await navigator.permissions.query({name: 'geolocation'})).state,
  readinessProbe: typeof window.__webrl,
  listenerRegistry: typeof window.__webrlListeners,
})"""
CLEAN = {"cookie": "", "local": None, "session": None, "indexedDB": [], "cacheStorage": [],
         "serviceWorkers": 0, "historyLength": 2, "focusOnBody": True, "geolocation": "prompt",
         "readinessProbe": "object", "listenerRegistry": "object"}


def two_episodes(env, server) -> tuple[dict, dict]:
    """Episode 1 writes everything and opens a second tab; episode 2's reset observation and state."""
    task = spec(server)
    env.reset(options={"task": task})
    page = env.page
    assert page.evaluate(WRITE_STATE)
    page.context.grant_permissions(["geolocation"], origin=server.base_url)
    page.context.new_page()  # a tab left open
    obs, _ = env.reset(options={"task": task})
    state = env.page.evaluate(READ_STATE)
    state["tabs"] = len(env.page.context.pages)
    return obs, state


def with_reuse(env, on: bool):
    env.reuse_context = on
    return env


def test_reused_context_reads_like_a_fresh_one(browser_session, fixture_server):
    fresh_env = with_reuse(make_env(browser_session), False)
    reused_env = with_reuse(make_env(browser_session), True)
    try:
        fresh_obs, fresh = two_episodes(fresh_env, fixture_server)
        first_context = reused_env._contexts
        reused_obs, reused = two_episodes(reused_env, fixture_server)
        assert first_context.reuses == 1  # episode 2 really ran in episode 1's context
    finally:
        fresh_env.close()
        reused_env.close()
    assert reused == fresh == {**CLEAN, "tabs": 1}
    assert "late dialog" not in reused_obs["feedback"]
    assert reused_obs["elements_text"] == fresh_obs["elements_text"]
    assert (reused_obs["screenshot"] == fresh_obs["screenshot"]).all()


def test_the_probe_sees_leaks_when_the_scrub_is_skipped(browser_session, fixture_server, monkeypatch):
    def no_scrub(self):
        self._dirty = False
        return True

    monkeypatch.setattr(ReusableContext, "_scrub", no_scrub)
    env = with_reuse(make_env(browser_session), True)
    try:
        _, state = two_episodes(env, fixture_server)
    finally:
        env.close()
    leaked = {k for k in CLEAN if state[k] != CLEAN[k]}
    assert leaked == {"cookie", "local", "session", "indexedDB", "cacheStorage", "geolocation",
                      "historyLength"}, state
    assert state["tabs"] == 2


def test_route_guard_follows_the_new_tasks_allowlist(browser_session, fixture_server, outside_server):
    """Under the route guard ("any": documents are checked by a Python route) the kept context's
    guard answers with the current task's allowlist (test-side `goto` reaches the guard without
    the env's own navigation check)."""
    outside = outside_server.url("page2.html")
    env = with_reuse(make_env(browser_session, subresource_policy="any"), True)
    try:
        env.reset(options={"task": spec(fixture_server, allowed_domains=(fixture_server.netloc,
                                                                           outside_server.netloc))})
        count = len(outside_server.requests)
        env.page.goto(outside)  # allowed in episode 1
        assert "/page2.html" in outside_server.requests[count:]
        env.reset(options={"task": spec(fixture_server)})  # only the fixture host now
        assert env._contexts.reuses == 1
        count = len(outside_server.requests)
        with pytest.raises(Exception, match="ERR_BLOCKED_BY_CLIENT"):
            env.page.goto(outside)
        assert len(outside_server.requests) == count
        notes = env._episode.events.notes  # reported to the new episode's events
        assert f"Blocked navigation to {outside_server.netloc}: outside the allowed domains" in notes, notes
    finally:
        env.close()


def test_proxy_guard_takes_a_new_context_for_a_new_allowlist(browser_session, fixture_server, outside_server):
    """Under "allowlist" Chromium enforces the allowlist (a bypass list fixed with the context):
    a task with other allowed domains gets a fresh context, whose proxy refuses the host the
    previous task allowed; the same allowlist again reuses it."""
    outside = outside_server.url("page2.html")
    env = with_reuse(make_env(browser_session), True)
    try:
        env.reset(options={"task": spec(fixture_server, allowed_domains=(fixture_server.netloc,
                                                                           outside_server.netloc))})
        first = env.page.context
        count = len(outside_server.requests)
        env.page.goto(outside)  # allowed in episode 1
        assert "/page2.html" in outside_server.requests[count:]
        env.reset(options={"task": spec(fixture_server)})  # only the fixture host now
        assert env._contexts.reuses == 0 and env.page.context is not first
        env.reset(options={"task": spec(fixture_server)})  # the same allowlist again
        assert env._contexts.reuses == 1
        count = len(outside_server.requests)
        with pytest.raises(Exception, match="ERR_PROXY_CONNECTION_FAILED"):
            env.page.goto(outside)
        assert len(outside_server.requests) == count
        env.page.wait_for_timeout(50)  # the requestfailed event
        notes = env._episode.events.notes
        assert f"Blocked navigation to {outside_server.netloc}: outside the allowed domains" in notes, notes
    finally:
        env.close()


def test_a_crashed_episode_gets_a_fresh_context(browser_session, fixture_server):
    env = with_reuse(make_env(browser_session, step_timeout_s=10.0), True)
    try:
        env.reset(options={"task": spec(fixture_server)})
        crashed_context = env.page.context
        try:  # test-side navigation (the env itself refuses chrome:// URLs)
            env.page.goto("chrome://crash", timeout=5000)
        except Exception:
            pass
        _, _, _, truncated, info = env.step("wait(0)")
        assert truncated and info["infra_error"].startswith("page_crashed"), info["infra_error"]
        obs, _ = env.reset(options={"task": spec(fixture_server)})
        assert env.page.context is not crashed_context and env._contexts.reuses == 0
        assert obs["title"] == "Basic fixture"
        kept = env.page.context
        env.reset(options={"task": spec(fixture_server)})  # a clean episode's context is kept
        assert env.page.context is kept and env._contexts.reuses == 1
    finally:
        env.close()


def test_recorded_episodes_get_their_own_context(browser_session, fixture_server, tmp_path):
    env = make_env(browser_session)
    env.config.recording.mode, env.config.recording.dir = "record", str(tmp_path)
    with_reuse(env, True)
    try:
        env.reset(options={"task": spec(fixture_server)})
        first = env.page.context
        env.reset(options={"task": spec(fixture_server)})
        assert env.page.context is not first and env._contexts.context is None
    finally:
        env.close()
    assert len(list(tmp_path.glob("*.har"))) == 2  # each context wrote its own HAR on close


def test_a_task_that_configures_the_browser_gets_a_fresh_context_next(browser_session, fixture_server):
    """Playwright-level state (here extra headers set on the context and an init script on the
    tab) is not scrubbed, so using it marks the context and the next episode starts fresh."""
    env = with_reuse(make_env(browser_session), True)
    try:
        task = spec(fixture_server)
        env.reset(options={"task": task})
        env.reset(options={"task": task})
        assert env._contexts.reuses == 1  # a plain episode leaves the context reusable
        env.page.context.set_extra_http_headers({"x-leak": "1"})
        env.page.add_init_script("window.__leak = 1")
        first = env.page.context
        env.reset(options={"task": task})
        assert env._contexts.reuses == 1 and env.page.context is not first
        assert env.page.evaluate("typeof window.__leak") == "undefined"
        env.reset(options={"task": task})  # the fresh context is itself reusable again
        assert env._contexts.reuses == 2
    finally:
        env.close()


def test_elements_collected_in_the_readiness_wait_equal_a_separate_collection(browser_session, fixture_server):
    """The step's one-round-trip collection (`wait_ready_and_collect`) vs `collect_elements`."""
    from webrl.envs.observation import collect_elements, wait_ready_and_collect

    env = make_env(browser_session)
    try:
        _, info = env.reset(options={"task": spec(fixture_server, "elements.html")})
        assert len(info["elements"]) > 5
        separate = collect_elements(env.page, env.config.observation, 10.0)
        ready, together = wait_ready_and_collect(env.page, env.config.observation, 10.0, token=99)
        stamp = ready.pop("stamp")  # the page's document, DOM mutations seen, last network answer
        assert ready == {"popup": False, "blockedPopups": 0} and len(stamp) == 3
        assert together["elements"] == separate["elements"] == info["elements"]
        assert together["title"] == separate["title"]
    finally:
        env.close()

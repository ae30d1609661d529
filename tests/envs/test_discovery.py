"""Element discovery beyond CSS selectors (`ObservationConfig.discovery`, envs/som.js,
envs/listeners.js).

Fixture pages under tests/envs/fixtures/discovery/ reproduce what front-end frameworks
produce: handlers delegated to a root (a React-style dispatcher written for the test), direct
listeners, `cursor: pointer` tiles, tabindex items, an open shadow root, a modal over content,
and decoys. Each page's expected list is written by hand from the page source. The sandbox
sites must list exactly the same elements in both modes (the shipped checkpoints were trained
on the "selectors" lists).
"""
from __future__ import annotations

import pytest

from webrl.envs import ObservationConfig, WebEnvConfig
from webrl.envs.observation import collect_elements
from tests.envs.helpers import make_env, spec

pytestmark = pytest.mark.browser


def names(elements) -> list[str]:
    return [e["name"] for e in elements]


def tags_and_names(elements) -> list[str]:
    return [f'{e["tag"]} {e["name"]}' for e in elements]


@pytest.fixture(scope="module")
def env(browser_session):
    env = make_env(browser_session)
    yield env
    env.close()


def observe(env, server, page: str, discovery: str = "full"):
    env.config.observation.discovery = discovery
    try:
        return env.reset(options={"task": spec(server, page)})
    finally:
        env.config.observation.discovery = "full"


def element_named(info, name: str) -> int:
    matches = [e["id"] for e in info["elements"] if e["name"] == name]
    assert len(matches) == 1, (name, names(info["elements"]))
    return matches[0]


# -- configuration ---------------------------------------------------------------------------

def test_discovery_defaults_to_full_and_a_typo_is_refused():
    assert ObservationConfig().discovery == "full"
    with pytest.raises(ValueError, match=r"ObservationConfig\.discovery must be one of \('selectors', 'full'\), got 'ful'"):
        ObservationConfig(discovery="ful")
    with pytest.raises(ValueError, match="ObservationConfig.discovery"):
        WebEnvConfig.from_dict({"observation": {"discovery": "css"}})


# -- fixture pages: exact recall and precision ------------------------------------------------

# (page, "selectors" list, "full" list) as "tag name", in DOM order, worked out from the page source
EXPECTED = [
    # the #app root holds the dispatcher's listeners but is React's container, not a control;
    # "Just text" has props but no handler; "Broken prop" has onClick that is not a function
    ("discovery/delegated.html", ["button Native button"],
     ["div Add to basket", "div Open menu", "div Row actions", "span Like", "button Native button"]),
    # "Removed listener" lost its listener; plain text and tabindex=-1 are not controls; the
    # tiles' children inherit cursor:pointer (only the outermost is listed); #wrap and #outer
    # have the same box as their child, so the child is listed, not the wrapper; the shadow
    # root's text div is plain
    ("discovery/mixed.html", ["button Go"],
     ["div Direct listener", "div Handler property", "div Tile one", "div Tile two", "div Focusable item",
      "button Go", "div Menu", "button Shadow action", "div Shadow tile"]),
    # Card A and B (extras) and the link (a native) are covered by the backdrop: "full"
    # hit-tests every candidate, "selectors" none (its lists do not change); the backdrop (a
    # listener on a large element that holds controls) is not listed
    ("discovery/modal.html", ["a Covered link", "button Accept"],
     ["button Accept", "div Manage choices"]),
    # "full" drops what cannot be used now: rows 5-6 clipped by their scroll box (row 4 shows in
    # part), the button slid out of its overflow:hidden strip, the disabled button, input in a
    # disabled fieldset and aria-disabled div, the extra under the popup and both elements under
    # the fixed banner; it keeps the absolute button whose containing block is above its clipping
    # box and the link under the in-flow popup (only fixed / sticky layers drop natives)
    ("discovery/usable.html",
     ["button Row 1", "button Row 2", "button Row 3", "button Row 4", "button Row 5", "button Row 6",
      "button Slid away", "button Escaped", "button Disabled", "input In disabled fieldset", "div ARIA disabled",
      "button Enabled", "a Under popup", "button Under banner", "button Accept all"],
     ["button Row 1", "button Row 2", "button Row 3", "button Row 4", "button Escaped", "button Enabled",
      "a Under popup", "button Accept all"]),
    # the document listener's closest('[data-cmd]') lists the row and "Star" (not "Plain"); the
    # tree and the chip box serve their items (tabindex -1 included, .chip from the listener's
    # source) and are not listed; the card's plain button has no role, so the card stays; the
    # hover-only trigger is listed
    ("discovery/delegation.html", ["button Buy"],
     ["tr Order 7", "span Star", "div Inbox", "div Sent", "span Red", "span Blue", "div Lamp Buy", "button Buy",
      "div Account"]),
]


@pytest.mark.parametrize("page,selectors,full", EXPECTED, ids=[p for p, *_ in EXPECTED])
def test_fixture_pages_list_exactly_the_usable_elements(env, fixture_server, page, selectors, full):
    _, info = observe(env, fixture_server, page, "selectors")
    assert tags_and_names(info["elements"]) == selectors
    obs, info = observe(env, fixture_server, page, "full")
    assert tags_and_names(info["elements"]) == full
    assert [e["id"] for e in info["elements"]] == list(range(len(full)))
    for element in info["elements"]:  # every listed id resolves to one element, shadow roots included
        assert env.page.locator(f'[data-webrl-id="{element["id"]}"]').count() == 1
    assert obs["elements_text"].count("\n") == len(full) - 1


def test_a_native_nested_in_a_same_box_extra_in_a_native_is_listed_once(env, fixture_server):
    """The nested-duplicate rule of natives looks past extras to the nearest native ancestor."""
    lists = {mode: [e["dom_id"] for e in observe(env, fixture_server, "discovery/nesting.html", mode)[1]["elements"]]
             for mode in ("selectors", "full")}
    assert lists == {"selectors": ["outer", "plain"], "full": ["outer", "plain"]}


def test_click_a_delegated_div_and_a_shadow_root_button(env, fixture_server):
    _, info = observe(env, fixture_server, "discovery/delegated.html")
    obs, *_ = env.step(f"click({element_named(info, 'Add to basket')})")
    assert obs["last_action_error"] == "" and env.page.inner_text("#out") == "basket"
    _, info = observe(env, fixture_server, "discovery/mixed.html")
    obs, *_ = env.step(f"click({element_named(info, 'Shadow action')})")
    assert obs["last_action_error"] == "" and env.page.inner_text("#out") == "shadow"


def test_delegated_targets_and_hover_triggers_take_actions(env, fixture_server):
    _, info = observe(env, fixture_server, "discovery/delegation.html")
    obs, *_ = env.step(f"click({element_named(info, 'Order 7')})")
    assert obs["last_action_error"] == "" and env.page.inner_text("#out") == "open"
    obs, *_ = env.step(f"click({element_named(info, 'Sent')})")
    assert obs["last_action_error"] == "" and env.page.inner_text("#out") == "Sent"
    obs, *_ = env.step(f"hover({element_named(info, 'Account')})")
    assert obs["last_action_error"] == "" and env.page.inner_text("#out") == "hover"


def test_same_origin_frames_are_listed_in_page_coordinates_and_acted_on(env, fixture_server):
    _, info = observe(env, fixture_server, "discovery/frames.html", "selectors")
    assert tags_and_names(info["elements"]) == ["button Top"]
    _, info = observe(env, fixture_server, "discovery/frames.html")
    # the sandboxed frame is unreadable: one coordinate target; the 1x1 one is not listed
    assert tags_and_names(info["elements"]) == ["button Top", "input Name", "button Send", "div Vote",
                                                "iframe Payment"]
    frame = env.page.frame_locator("#form")
    for name, dom_id in (("Name", "name"), ("Send", "send"), ("Vote", "vote")):
        box = frame.locator(f"#{dom_id}").bounding_box()  # Playwright's, in top-page coordinates
        expected = [round(box["x"]), round(box["y"]), round(box["width"]), round(box["height"])]
        assert all(abs(a - b) <= 1 for a, b in zip(info["elements"][element_named(info, name)]["bbox"], expected))
    obs, *_ = env.step(f'type({element_named(info, "Name")}, "Ada")')
    assert obs["last_action_error"] == ""
    obs, *_ = env.step(f"click({element_named(info, 'Send')})")
    assert obs["last_action_error"] == "" and env.page.inner_text("#out") == "sent:Ada"
    x, y, w, h = info["elements"][element_named(info, "Vote")]["bbox"]
    obs, *_ = env.step(f"click_at({x + w // 2}, {y + h // 2})")
    assert obs["last_action_error"] == "" and env.page.inner_text("#out") == "vote"
    x, y, w, h = info["elements"][element_named(info, "Name")]["bbox"]
    env.step(f"click_at({x + w // 2}, {y + h // 2})")  # focus inside the frame, then type with no id
    obs, *_ = env.step('type("Bob")')
    assert obs["last_action_error"] == ""
    obs, _, _, _, info = env.step(f"click({element_named(info, 'Send')})")
    assert obs["last_action_error"] == "" and env.page.inner_text("#out") == "sent:Bob"
    obs, *_ = env.step(f"click({element_named(info, 'Payment')})")
    assert obs["last_action_error"] == ""


def test_the_frame_search_runs_only_where_the_page_has_frames(env, fixture_server, monkeypatch):
    """An element action looks for its mark through same-origin frames (FRAME_PATH_JS, a round
    trip trio) only when the observed top document holds a frame: frames.html has 3 (the form,
    the sandboxed payment frame and the 1x1 one), delegated.html none."""
    from webrl.envs import execute
    searches = []
    real = execute.evaluate_with_timeout

    def counting(page, source, arg, timeout_s):
        searches.append(source == execute.FRAME_PATH_JS)
        return real(page, source, arg, timeout_s)

    monkeypatch.setattr(execute, "evaluate_with_timeout", counting)
    _, info = observe(env, fixture_server, "discovery/frames.html")
    assert env._episode.top_frames == 3
    obs, *_ = env.step(f"click({element_named(info, 'Send')})")
    assert obs["last_action_error"] == "" and searches.count(True) == 1
    _, info = observe(env, fixture_server, "discovery/delegated.html")
    assert env._episode.top_frames == 0
    obs, *_ = env.step(f"click({info['elements'][0]['id']})")
    assert obs["last_action_error"] == "" and searches.count(True) == 1  # no further search


def test_marks_inside_shadow_roots_are_renewed(env, fixture_server):
    _, info = observe(env, fixture_server, "discovery/mixed.html")
    shadow_id = element_named(info, "Shadow action")
    env.page.evaluate("() => document.getElementById('direct').remove()")  # ids shift by one
    obs, _, _, _, info = env.step("wait(0)")
    assert element_named(info, "Shadow action") == shadow_id - 1
    assert env.page.locator(f'[data-webrl-id="{shadow_id}"]').count() == 1  # "Shadow tile" now
    assert env.page.locator(f'[data-webrl-id="{shadow_id}"]').inner_text() == "Shadow tile"


def test_throwing_getters_and_absurd_boxes_give_a_normal_observation(env, fixture_server):
    # innerText throws everywhere (names fall back to textContent); one element's onclick
    # getter throws (still listed by its tabindex); one's React props getter throws (nothing
    # else makes it a control); one's getBoundingClientRect throws (skipped); the 1e9px button is
    # listed with its box clamped; the scale(1e30) div cannot be hit-tested, so it is dropped
    obs, info = observe(env, fixture_server, "discovery/hostile.html")
    assert tags_and_names(info["elements"]) == ["button OK", "div Throwing onclick getter", "button Huge"]
    assert all(isinstance(v, int) and abs(v) <= 10_000_000 for e in info["elements"] for v in e["bbox"])
    obs, reward, terminated, truncated, info = env.step(f"click({element_named(info, 'OK')})")
    assert obs["last_action_error"] == "" and not truncated and "infra_error" not in info
    assert env.page.inner_text("#out") == "clicked 1"


def test_a_page_that_breaks_the_walk_gets_the_selector_list(env, fixture_server):
    # createTreeWalker throws: "full" falls back to the selector candidates (the tabindex div,
    # an extra, is lost) instead of failing the observation
    obs, info = observe(env, fixture_server, "discovery/broken_walk.html")
    assert names(info["elements"]) == ["OK"]
    obs, reward, terminated, truncated, info = env.step(f"click({element_named(info, 'OK')})")
    assert obs["last_action_error"] == "" and not truncated
    assert env.page.inner_text("#out") == "clicked"


def test_fifty_thousand_nodes_list_the_same_in_both_modes(browser_session, fixture_server):
    # big_dom.html: 50k nodes, 5001 candidates (the #grid div with onclick and 5000 buttons),
    # none of them extras: both modes keep the first 400 and leave 4601 unscanned
    context = browser_session.new_context((800, 600))
    try:
        page = context.new_page()
        page.goto(fixture_server.url("big_dom.html"), timeout=60_000)
        full = collect_elements(page, ObservationConfig(discovery="full"), 30.0)
        selectors = collect_elements(page, ObservationConfig(discovery="selectors"), 30.0)
        assert full["elements"] == selectors["elements"] and len(full["elements"]) == 400
        assert full["truncated"] == selectors["truncated"] == 5001 - 400
    finally:
        context.close()


# -- listeners.js keeps addEventListener's behaviour ------------------------------------------

LISTENER_PROBE = """() => {
  const el = document.createElement('div');
  document.body.appendChild(el);
  const seen = {once: 0, plain: 0, aborted: 0, passiveReads: 0};
  const results = {};
  results.returned = String(el.addEventListener('click', () => { seen.once += 1; }, {once: true}));
  el.addEventListener('click', () => { seen.plain += 1; });
  const controller = new AbortController();
  el.addEventListener('click', () => { seen.aborted += 1; }, {signal: controller.signal});
  controller.abort();
  const options = {get passive() { seen.passiveReads += 1; return false; }};
  el.addEventListener('mousedown', () => {}, options);
  el.click(); el.click();
  try { el.addEventListener('click', 5); results.badListener = 'no error'; }
  catch (e) { results.badListener = e.constructor.name; }
  el.addEventListener('click', null);
  results.seen = seen;
  results.length = EventTarget.prototype.addEventListener.length;
  results.name = EventTarget.prototype.addEventListener.name;
  results.removeReturned = String(el.removeEventListener('click', () => {}));
  results.enumerable = Object.keys(window).includes('__webrlListeners');
  return results;
}"""


def test_listener_registry_keeps_add_event_listener_behaviour(browser_session, fixture_server):
    plain = browser_session.browser.new_context()  # no init scripts: the reference
    wrapped = browser_session.new_context((800, 600))
    try:
        results = []
        for context in (plain, wrapped):
            page = context.new_page()
            page.goto(fixture_server.url("basic.html"))
            results.append(page.evaluate(LISTENER_PROBE))
        assert results[0] == results[1]
        # by hand: `once` fires on the first of two clicks, the plain listener on both, the
        # aborted one never; the browser reads `passive` once; a number is not a listener
        assert results[1]["seen"] == {"once": 1, "plain": 2, "aborted": 0, "passiveReads": 1}
        assert results[1]["returned"] == "undefined" and results[1]["badListener"] == "TypeError"
        assert results[1]["length"] == 2 and results[1]["name"] == "addEventListener"
        assert results[1]["enumerable"] is False
    finally:
        plain.close()
        wrapped.close()


REGISTRY_PROBE = """() => {
  const has = (el) => window.__webrlListeners.has(el);
  const el = document.createElement('div');
  const f = () => {}, g = () => {};
  const states = [has(el)];
  el.addEventListener('keydown', f); states.push(has(el));            // not a pointer event
  el.addEventListener('click', f, true); states.push(has(el));
  el.removeEventListener('click', f); states.push(has(el));           // other capture flag: still there
  el.removeEventListener('click', f, {capture: true}); states.push(has(el));
  el.addEventListener('pointerdown', f); el.addEventListener('contextmenu', g);
  el.removeEventListener('pointerdown', f); states.push(has(el));     // g remains
  el.removeEventListener('contextmenu', g); states.push(has(el));
  window.addEventListener('click', f); states.push(has(window));      // only elements are noted
  return states;
}"""


SELECTOR_PROBE = """() => {
  const registry = window.__webrlListeners;
  const el = document.createElement('div');
  el.addEventListener('click', (e) => e.target.closest('[data-x]') && e.target.dataset.fooBar
    && e.target.matches('li') && e.target.getAttribute('data-y') && e.target.closest(".row"));
  el.addEventListener('mousedown', function () { return this; }.bind(null));   // no readable source
  const hover = document.createElement('div');
  hover.addEventListener('mouseenter', () => {});
  document.addEventListener('click', (e) => e.target.closest('[data-cmd]'));
  return {el: registry.delegateSelectors(el), hover: [registry.has(hover), registry.delegateSelectors(hover)],
          document: [registry.has(document), registry.delegateSelectors(document)],
          none: registry.delegateSelectors(document.createElement('div'))};
}"""


def test_listener_registry_reads_delegation_selectors_and_hover_listeners(browser_session, fixture_server):
    context = browser_session.new_context((800, 600))
    try:
        page = context.new_page()
        page.goto(fixture_server.url("basic.html"))
        # by hand: closest/matches arguments that name an attribute or class ('li' is a bare tag),
        # then dataset.fooBar as [data-foo-bar], then getAttribute('data-y'); the bound function
        # adds nothing; a hover listener is noted; the document is not an element for has()
        assert page.evaluate(SELECTOR_PROBE) == {
            "el": ["[data-x]", ".row", "[data-foo-bar]", "[data-y]"], "hover": [True, []],
            "document": [False, ["[data-cmd]"]], "none": []}
    finally:
        context.close()


def test_listener_registry_notes_adds_and_removals(browser_session, fixture_server):
    context = browser_session.new_context((800, 600))
    try:
        page = context.new_page()
        page.goto(fixture_server.url("basic.html"))
        assert page.evaluate(REGISTRY_PROBE) == [False, False, True, True, False, True, False, False]
    finally:
        context.close()


# -- keep what works: the sandbox sites list the same elements in both modes -----------------

SANDBOX_EPISODES = [(site, level, seed) for site in ("shop", "travel", "wiki", "widgets")
                    for level, seed in ((0, 11), (1, 12), (2, 13))]


@pytest.fixture(scope="module")
def site_page(browser_session):
    context = browser_session.new_context((640, 480))
    yield context.new_page()
    context.close()


def both_modes(page) -> list:
    """The element list in "full" then "selectors" mode (the latter's marks stay on the page)."""
    page.wait_for_load_state("load")
    return [collect_elements(page, ObservationConfig(discovery=mode), 10.0)
            for mode in ("full", "selectors")]


@pytest.mark.parametrize("site,level,seed", SANDBOX_EPISODES)
def test_sandbox_pages_list_the_same_elements_in_both_modes(site_page, site, level, seed):
    # start page, then every page the oracle reaches by clicking, typing and selecting
    from webrl.envs.sites.source import make_task
    from tests.envs.sites.helpers import _execute

    task = make_task(site, level, "train", seed)
    task.setup(site_page)
    try:
        for step in range(task.spec.max_steps):
            full, selectors = both_modes(site_page)
            assert full["elements"] == selectors["elements"], site_page.url
            assert full["truncated"] == selectors["truncated"]
            assert selectors["elements"], site_page.url
            obs = {"url": site_page.url, "title": selectors["title"], "goal": task.spec.goal,
                   "elements": selectors["elements"], "step": step, "feedback": "", "last_action_error": ""}
            action = task.oracle_action(obs)
            if action.kind in ("stop", "answer"):
                break
            _execute(site_page, action, selectors["elements"])
        assert action.kind in ("stop", "answer"), "the oracle did not finish"
    finally:
        task.teardown(site_page)

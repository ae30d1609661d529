"""Readiness instead of sleeps: when a page is ready to be observed after an action.

The OpenWebRL reproduction measured 11.5 s/step with fixed sleeps and networkidle waits, 4.2
s/step with readiness checks. After an action, `wait_until_ready` waits for (1) the document
load state, (2) no in-flight fetch/XHR, capped by a short network-quiet limit (long-polling
pages never go quiet), and (3) a short window with no DOM mutation, counted from the later of
the last mutation and the start of the wait (an effect deferred by a timer has not started yet
when the action returns). A DOM that never goes quiet (requestAnimationFrame loops, tickers)
waives (3) `DOM_RESTLESS_CAP_S` after the last network activity: without that bound such a page
waited out the whole 10 s load timeout on every reset. A poll that comes late (the page was not running: a loaded machine)
does not count the stall as quiet until one more poll has seen no new mutation. All three are read from
one in-page probe (`READINESS_INIT_SCRIPT`, installed in every context by `BrowserSession`),
polled by Playwright's `wait_for_function`, whose timeout is enforced outside the page, so a
page that loops forever cannot hang the caller. Playwright's `networkidle` (500 ms of silence,
always paid) is not used.
"""
from __future__ import annotations

from typing import Any, Optional

from playwright.sync_api import Page
from playwright.sync_api import TimeoutError as PlaywrightTimeout

READY_TIMEOUT_S = 3.0
"""Cap for the whole readiness wait after an action; past it the page is observed as it is
(the first observation of an episode waits up to the navigation's `load_timeout_s` instead)."""
NETWORK_QUIET_CAP_S = 0.5
"""Stop waiting for in-flight fetch/XHR after this long (long-polling pages never go quiet)."""
DOM_QUIET_MS = 30.0
"""The DOM must stay unchanged this long (from the action on) before the page counts as ready."""
DOM_RESTLESS_CAP_S = 0.8
"""A page whose DOM never goes quiet (an animation, a requestAnimationFrame loop, a ticking clock)
counts as ready this long after its last network activity (document load, fetch/XHR, any
resource it loaded) or the start of the wait, whichever is later: a bounded rule instead of the
whole load timeout on every reset."""
NAVIGATION_GRACE_S = 1.0
"""After a page starts navigating away, wait at most this long for the next document."""
RESPONSIVE_PROBE_S = 2.0
"""A page that does not run a trivial script within this long after a timed-out action or
readiness wait counts as stuck (its tab is closed, the episode truncated)."""
POPUP_WAIT_S = 1.0
"""After a click on a target=_blank link or a window.open call, wait this long for the tab."""

# Installed in every document before page scripts run: the readiness probe's state.
# lastMutation ignores our own data-webrl-* marks and the screenshots' caret hiding; inflight counts fetch/XHR
# started by the page.
READINESS_INIT_SCRIPT = r"""
(() => {
  if (window.__webrl) return;
  const s = window.__webrl = {lastMutation: performance.now(), mutations: 0, inflight: 0, lastNet: 0,
                              navigating: -1e9, popupHint: -1e9, blockedPopups: 0, popupBudget: 0, lastGesture: -1e9,
                              token: null, waitStart: 0, lastPoll: 0, stallSeen: null};
  const touch = () => { s.lastNet = performance.now(); };
  // Playwright's screenshots hide the caret: caret-color set on every field, then restored.
  // Such a style change (nothing but caret-color differs) is the observer's own, not the page's.
  const noCaret = (v) => (v || '').replace(/caret-color\s*:[^;]*;?/gi, '').trim();
  new MutationObserver((records) => {
    for (const r of records) {
      const name = r.attributeName || '';
      if (name.startsWith('data-webrl-')) continue;
      if (name === 'style' && noCaret(r.oldValue) === noCaret(r.target.getAttribute('style'))) continue;
      s.lastMutation = performance.now(); s.mutations += 1; return;
    }
  }).observe(document, {subtree: true, childList: true, attributes: true, characterData: true,
                        attributeOldValue: true});
  // Any resource the document loads (images, scripts, styles, beacons) counts as network
  // activity too: the bounded rule for pages that never go DOM-quiet counts from the last of it.
  try {
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) s.lastNet = Math.max(s.lastNet, e.responseEnd || e.startTime);
    }).observe({type: 'resource', buffered: true});
  } catch (e) { /* no PerformanceObserver: fetch/XHR and the load event still count */ }
  const origFetch = window.fetch;
  if (origFetch) {
    window.fetch = function (...args) {
      s.inflight += 1; touch();
      return origFetch.apply(this, args).finally(() => { s.inflight -= 1; touch(); });
    };
  }
  const origSend = XMLHttpRequest.prototype.send;
  XMLHttpRequest.prototype.send = function (...args) {
    s.inflight += 1; touch();
    this.addEventListener('loadend', () => { s.inflight -= 1; touch(); }, {once: true});
    return origSend.apply(this, args);
  };
  // A click on a link/form that targets another window, or window.open: a tab may be coming.
  const hintPopup = () => { s.popupHint = performance.now(); };
  addEventListener('click', (e) => {
    const t = e.target && e.target.closest && e.target.closest('a[target], area[target], form[target], button, input');
    const target = t && (t.getAttribute('target') || (t.form && t.form.getAttribute('target')) || '');
    if (target && !['_self', '_top', '_parent'].includes(target.toLowerCase())) hintPopup();
  }, true);
  // Our own popup blocker: one window.open per trusted click / key press, within 1 s of it; any
  // other call returns null. (Chromium's blocker stops applying to a page once Playwright has
  // taken a screenshot of it, and its 5 s user activation lets a timer flood through.)
  const grant = (e) => { if (e.isTrusted) { s.popupBudget = 1; s.lastGesture = performance.now(); } };
  addEventListener('click', grant, true);
  addEventListener('keydown', grant, true);
  const origOpen = window.open;
  window.open = function (...args) {
    if (s.popupBudget < 1 || performance.now() - s.lastGesture > 1000) { s.blockedPopups += 1; return null; }
    s.popupBudget -= 1;
    hintPopup();
    return origOpen.apply(this, args);
  };
  // A navigation away from this document started: the next document is coming.
  addEventListener('beforeunload', () => { s.navigating = performance.now(); });
  addEventListener('pagehide', () => { s.navigating = performance.now(); });
  // A click on <a download> fires no beforeunload, yet a download event follows from the
  // browser: hold the wait like a navigation so it is reported in this step's feedback.
  addEventListener('click', (e) => {
    const a = e.target && e.target.closest ? e.target.closest('a[download]') : null;
    if (a) s.navigating = performance.now();
  }, true);
})();
"""

# Truthy when the page is ready: {popup: whether a new tab may have been requested since the
# last ready answer, blockedPopups: window.open calls refused since then}. arg: {token, quietMs, networkCapMs,
# navigationGraceMs, restlessCapMs}. A navigation that
# has not replaced this document within navigationGraceMs (blocked, turned into a download, or a
# slow server) stops holding the wait: the page is then observed as it is.
READINESS_PROBE = r"""
(arg) => {
  const s = window.__webrl;
  if (!s) return document.readyState === 'complete' && {popup: false, blockedPopups: 0};
  const now = performance.now();
  if (s.token !== arg.token) { s.token = arg.token; s.waitStart = now; s.lastPoll = now; }
  // A poll that comes more than quietMs after the previous one found a page that was not
  // running (a loaded machine, a long task): timers that were due during the stall run after
  // this poll, so quiet measured across it is confirmed by one more poll first.
  const stalled = now - s.lastPoll > arg.quietMs;
  s.lastPoll = now;
  if (stalled && s.stallSeen !== s.lastMutation) { s.stallSeen = s.lastMutation; return false; }
  if (now - s.navigating < arg.navigationGraceMs || document.readyState !== 'complete') return false;
  if (s.inflight > 0 && now - s.waitStart < arg.networkCapMs) return false;
  // Quiet from the action on, too: an action whose effect comes from a timer (a debounce, a
  // deferred render) has changed nothing yet at the first poll.
  // A DOM that never goes quiet (an animation loop) is ready restlessCapMs after the last
  // network activity (the load event included) or the start of the wait, whichever is later.
  const nav = performance.getEntriesByType('navigation')[0];
  const lastActivity = Math.max(s.waitStart, s.lastNet, nav ? nav.loadEventEnd : 0);
  const restless = now - lastActivity >= arg.restlessCapMs;  // in-flight requests were capped above
  if (!restless && now - Math.max(s.lastMutation, s.waitStart) < arg.quietMs) return false;
  const result = {popup: s.popupHint > -1e9, blockedPopups: s.blockedPopups};
  s.popupHint = -1e9;
  s.blockedPopups = 0;
  return result;
}
"""


# What a screenshot taken now would show, as far as the page can tell: its document, how many DOM
# mutations it has seen and when its network last answered. Equal stamps before a screenshot and
# at the ready answer: the DOM the screenshot shows is the DOM the page was ready with.
PAGE_STAMP = "[performance.timeOrigin, s.mutations, s.lastNet]"

# Starts the readiness wait of `token` now (the quiet window counts from here, as from the probe's
# first poll) and answers {calm, stamp}: calm when the document is loaded, nothing is in flight,
# no navigation or tab is coming, and a screenshot taken now may be the one observed.
ARM_PROBE = r"""
(arg) => {
  const s = window.__webrl;
  if (!s || s.mutations === undefined) return {calm: false, stamp: null};
  const now = performance.now();
  if (s.token !== arg.token) { s.token = arg.token; s.waitStart = now; s.lastPoll = now; }
  const calm = document.readyState === 'complete' && s.inflight === 0 && s.popupHint <= -1e9
    && now - s.navigating >= arg.navigationGraceMs;
  return {calm, stamp: """ + PAGE_STAMP + r"""};
}
"""


def arm_and_stamp(page: Page, timeout_s: float, token: int) -> dict:
    """Start the readiness wait of `token` (`ARM_PROBE`): {"calm": bool, "stamp": list or None}.
    Raises playwright's TimeoutError after `timeout_s` (a page stuck in a script)."""
    return evaluate_with_timeout(page, ARM_PROBE, readiness_arg(token), timeout_s)


def wait_until_ready(page: Page, timeout_s: float, token: int) -> Optional[dict]:
    """Wait until `page` is loaded, network-quiet (capped) and DOM-quiet.

    Returns {"popup": bool (a click or window.open may be opening a tab), "blockedPopups": int},
    or None when
    `timeout_s` ran out first (the caller observes the page as it is). Raises Playwright
    errors (closed / crashed page) to the caller.
    """
    try:
        handle = page.wait_for_function(READINESS_PROBE, arg=readiness_arg(token), polling=10,
                                        timeout=max(1.0, timeout_s * 1000))
    except PlaywrightTimeout:
        return None
    try:
        value = handle.json_value()
    finally:
        handle.dispose()
    return readiness_result(value)


def readiness_arg(token: int) -> dict[str, Any]:
    """The probe's argument: the action's token and the quiet / cap / grace times (ms)."""
    return {"token": token, "quietMs": DOM_QUIET_MS, "networkCapMs": NETWORK_QUIET_CAP_S * 1000,
            "navigationGraceMs": NAVIGATION_GRACE_S * 1000, "restlessCapMs": DOM_RESTLESS_CAP_S * 1000}


def readiness_result(value: Any) -> dict:
    """The probe's truthy answer as {"popup", "blockedPopups"} (a bare `true`: neither)."""
    return value if isinstance(value, dict) else {"popup": False, "blockedPopups": 0}


def evaluate_with_timeout(page: Page, function_source: str, arg: Any, timeout_s: float) -> Any:
    """`page.evaluate(function_source, arg)` whose timeout is enforced outside the page.

    `page.evaluate` has no timeout and never returns from a page stuck in a script; Playwright's
    `wait_for_function` does time out, so the function runs inside it wrapped to return a truthy
    box. Raises playwright's TimeoutError after `timeout_s`.
    """
    wrapped = f"(arg) => ({{value: ({function_source})(arg)}})"
    handle = page.wait_for_function(wrapped, arg=arg, timeout=max(1.0, timeout_s * 1000))
    try:
        return handle.json_value().get("value")
    finally:
        handle.dispose()


def is_responsive(page: Page, timeout_s: float = 1.0) -> bool:
    """Whether the page's main thread answers a trivial script within `timeout_s`."""
    try:
        page.wait_for_function("() => true", timeout=max(1.0, timeout_s * 1000))
        return True
    except PlaywrightTimeout:
        return False

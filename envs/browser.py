"""Browser session lifecycle: one Chromium per worker, one BrowserContext per episode.

`BrowserSession` owns a sync-Playwright Chromium. Every episode opens a fresh `BrowserContext`
(isolated cookies, storage, cache), so episodes cannot leak state into each other, and several
env slots can share one browser (`EnvWorker`). If Chromium dies, `relaunch()` starts a new one
and bumps `generation`, which tells every slot that its context belongs to a dead browser.

Readiness instead of sleeps (the OpenWebRL reproduction measured 11.5 s/step with fixed sleeps
and networkidle waits, 4.2 s/step with readiness checks): after an action, `wait_until_ready`
waits for (1) the document load state, (2) no in-flight fetch/XHR, capped by a short
network-quiet limit (long-polling pages never go quiet), and (3) a short window with no DOM
mutation. All three are read from one in-page probe installed as an init script, polled by
Playwright's `wait_for_function`, whose timeout is enforced outside the page, so a page that
loops forever cannot hang the caller.

Departures from common practice: Playwright's default `--disable-popup-blocking` flag is dropped,
so Chromium's own popup blocker stops `window.open` floods without a user gesture; Playwright's
`networkidle` (500 ms of silence, always paid) is not used.
"""
from __future__ import annotations

import os
import shutil
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

from playwright.sync_api import Browser, BrowserContext, Page, Playwright, sync_playwright
from playwright.sync_api import Error as PlaywrightError

CHROMIUM_FLAGS = (
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
    "--num-raster-threads=1", "--disable-partial-raster",
)
VIEWPORT_PRESETS = {"openwebrl": (1280, 1000), "cpu": (800, 600), "small": (640, 480)}
DEBIAN_CHROMIUM = "/usr/bin/chromium"

# Installed in every document before page scripts run: the readiness probe's state.
# lastMutation ignores our own data-webrl-* marks; inflight counts fetch/XHR started by the page.
READINESS_INIT_SCRIPT = r"""
(() => {
  if (window.__webrl) return;
  const s = window.__webrl = {lastMutation: performance.now(), inflight: 0, lastNet: 0,
                              navigating: -1e9, popupHint: -1e9, blockedPopups: 0, popupBudget: 0, lastGesture: -1e9,
                              token: null, waitStart: 0};
  const touch = () => { s.lastNet = performance.now(); };
  new MutationObserver((records) => {
    for (const r of records) {
      if (!(r.attributeName || '').startsWith('data-webrl-')) { s.lastMutation = performance.now(); return; }
    }
  }).observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
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
# last ready answer, blockedPopups: window.open calls refused since then}. arg: {token, quietMs, networkCapMs, navigationGraceMs}. A navigation that
# has not replaced this document within navigationGraceMs (blocked, turned into a download, or a
# slow server) stops holding the wait: the page is then observed as it is.
READINESS_PROBE = r"""
(arg) => {
  const s = window.__webrl;
  if (!s) return document.readyState === 'complete' && {popup: false, blockedPopups: 0};
  const now = performance.now();
  if (s.token !== arg.token) { s.token = arg.token; s.waitStart = now; }
  if (now - s.navigating < arg.navigationGraceMs || document.readyState !== 'complete') return false;
  if (s.inflight > 0 && now - s.waitStart < arg.networkCapMs) return false;
  if (now - s.lastMutation < arg.quietMs) return false;
  const result = {popup: s.popupHint > -1e9, blockedPopups: s.blockedPopups};
  s.popupHint = -1e9;
  s.blockedPopups = 0;
  return result;
}
"""


class InfraError(RuntimeError):
    """The browser, a page or the harness failed (not the agent): the episode must end truncated."""


@dataclass
class BrowserConfig:
    """How Chromium is found, launched and waited on."""

    executable_path: str = ""
    """Chromium binary; "" = $WEBRL_CHROMIUM, else Playwright's own browser if installed,
    else /usr/bin/chromium."""
    headless: bool = True
    """Run without a window (the only mode tested)."""
    viewport: str = "openwebrl"
    """Viewport preset: "openwebrl" (1280x1000, the OpenWebRL recipe), "cpu" (800x600),
    "small" (640x480), or "WxH" such as "1024x768"."""
    extra_args: tuple[str, ...] = ()
    """Chromium flags added after CHROMIUM_FLAGS."""
    launch_timeout_s: float = 30.0
    """Give up launching Chromium after this long."""
    load_timeout_s: float = 10.0
    """Cap for one navigation (goto / back / forward) to reach DOMContentLoaded."""
    ready_timeout_s: float = 3.0
    """Cap for the whole readiness wait after an action; past it the page is observed as is."""
    network_quiet_cap_s: float = 0.5
    """Stop waiting for in-flight fetch/XHR after this long (long-polling pages never go quiet)."""
    dom_quiet_ms: float = 30.0
    """The DOM must stay unchanged this long before the page counts as ready."""
    responsive_probe_s: float = 2.0
    """A page that does not run a trivial script within this long after a timed-out action or
    readiness wait counts as stuck (its tab is closed, the episode truncated)."""
    popup_wait_s: float = 1.0
    """After a click on a target=_blank link or a window.open call, wait this long for the tab."""
    navigation_grace_s: float = 1.0
    """After a page starts navigating away, wait at most this long for the next document."""

    def __post_init__(self) -> None:
        viewport_size(self.viewport)  # raises with the allowed values
        for name in ("launch_timeout_s", "load_timeout_s", "ready_timeout_s", "network_quiet_cap_s",
                     "navigation_grace_s", "popup_wait_s", "responsive_probe_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"BrowserConfig.{name} must be > 0, got {getattr(self, name)!r}")
        if self.dom_quiet_ms < 0:
            raise ValueError(f"BrowserConfig.dom_quiet_ms must be >= 0, got {self.dom_quiet_ms!r}")
        self.extra_args = tuple(self.extra_args)


def viewport_size(viewport: str) -> tuple[int, int]:
    """(width, height) of a preset name or a "WxH" string."""
    if viewport in VIEWPORT_PRESETS:
        return VIEWPORT_PRESETS[viewport]
    parts = viewport.lower().split("x")
    if len(parts) == 2 and all(p.isdigit() and 100 <= int(p) <= 8192 for p in parts):
        return int(parts[0]), int(parts[1])
    raise ValueError(f"BrowserConfig.viewport must be one of {sorted(VIEWPORT_PRESETS)} or 'WxH' "
                     f"with sides in 100..8192, got {viewport!r}")


def resolve_executable(configured: str, playwright: Optional[Playwright] = None) -> Optional[str]:
    """Path to launch, or None for Playwright's own downloaded Chromium.

    Order: the config value, $WEBRL_CHROMIUM, Playwright's browser when it exists on disk,
    /usr/bin/chromium (Debian's), then `chromium` on PATH.
    """
    for candidate in (configured, os.environ.get("WEBRL_CHROMIUM", "")):
        if candidate:
            if not os.path.exists(candidate):
                raise FileNotFoundError(f"Chromium executable {candidate!r} does not exist")
            return candidate
    if playwright is not None:
        try:
            if os.path.exists(playwright.chromium.executable_path):
                return None
        except PlaywrightError:
            pass
    if os.path.exists(DEBIAN_CHROMIUM):
        return DEBIAN_CHROMIUM
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    raise FileNotFoundError("no Chromium found: set BrowserConfig.executable_path or $WEBRL_CHROMIUM")


@dataclass
class EpisodeEvents:
    """What happened in the browser since it was last drained (filled by event handlers)."""

    notes: list[str] = field(default_factory=list)
    """Feedback lines: dialogs handled, downloads refused, requests blocked, tabs opened."""
    new_pages: list[Any] = field(default_factory=list)
    """Pages (tabs) opened since the last drain, in order."""
    crashed: bool = False
    """A renderer of this episode crashed."""
    flooded_pages: list[Any] = field(default_factory=list)
    """Tabs left blocked by a dialog flood (the env closes them)."""
    dialogs_this_step: int = 0
    """Dialogs seen during the current step (flood guard)."""

    def drain(self) -> tuple[list[str], list[Any]]:
        notes, pages = self.notes, self.new_pages
        self.notes, self.new_pages = [], []
        return notes, pages


# Sync Playwright allows one driver per thread; every BrowserSession of a thread shares it.
_THREAD_DRIVER = threading.local()


def _acquire_playwright() -> Playwright:
    state = getattr(_THREAD_DRIVER, "state", None)
    if state is None:
        manager = sync_playwright()
        state = {"manager": manager, "playwright": manager.start(), "users": 0}
        _THREAD_DRIVER.state = state
    state["users"] += 1
    return state["playwright"]


def _release_playwright() -> None:
    state = getattr(_THREAD_DRIVER, "state", None)
    if state is None:
        return
    state["users"] -= 1
    if state["users"] <= 0:
        _THREAD_DRIVER.state = None
        try:
            state["manager"].__exit__(None, None, None)
        except Exception:  # the driver may already be gone
            pass


class BrowserSession:
    """One Chromium for one worker process; `new_context()` per episode.

    Not thread-safe (sync Playwright): use it from one thread, as Ray sync actors do
    (max_concurrency=1). Sessions of one thread share one Playwright driver (sync Playwright
    allows one per thread), each with its own Chromium.
    """

    def __init__(self, config: Optional[BrowserConfig] = None):
        self.config = config or BrowserConfig()
        self.viewport = viewport_size(self.config.viewport)
        self.generation = 0
        self._playwright: Optional[Playwright] = None
        self._browser: Optional[Browser] = None
        self._marker = ""

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        if self._playwright is None:
            self._playwright = _acquire_playwright()
        if self._browser is None:
            executable = resolve_executable(self.config.executable_path, self._playwright)
            # a switch Chromium ignores, so that browser_pid() finds this session's process among
            # the others of this process (sessions of a thread share one Playwright driver)
            self._marker = f"--webrl-session={uuid.uuid4().hex}"
            self._browser = self._playwright.chromium.launch(
                executable_path=executable, headless=self.config.headless,
                args=[*CHROMIUM_FLAGS, *self.config.extra_args, self._marker],
                ignore_default_args=["--disable-popup-blocking"],
                timeout=self.config.launch_timeout_s * 1000)
            self.generation += 1

    @property
    def browser(self) -> Browser:
        if self._browser is None:
            self.start()
        assert self._browser is not None
        return self._browser

    def is_alive(self) -> bool:
        return self._browser is not None and self._browser.is_connected()

    def relaunch(self) -> None:
        """Throw away the current Chromium (dead or not) and start a new one."""
        if self._browser is not None:
            try:
                self._browser.close()
            except Exception:  # already dead: nothing to close
                pass
            self._browser = None
        self.start()

    def ensure_alive(self) -> None:
        if not self.is_alive():
            self.relaunch()

    def close(self) -> None:
        if self._browser is not None:
            try:
                self._browser.close()
            except Exception:
                pass
            self._browser = None
        if self._playwright is not None:
            self._playwright = None
            _release_playwright()

    def browser_pid(self) -> Optional[int]:
        """PID of the Chromium browser process this session launched (None if not running)."""
        if not self.is_alive():
            return None
        return next(iter(_browser_pids(os.getpid(), self._marker)), None)

    # -- episodes ----------------------------------------------------------------------------
    def new_context(self, viewport: Optional[tuple[int, int]] = None) -> BrowserContext:
        """A fresh isolated context with the readiness probe installed; downloads refused.

        `viewport` (width, height) defaults to this session's config; envs sharing a session
        pass their own.
        """
        self.ensure_alive()
        width, height = viewport or self.viewport
        context = self.browser.new_context(
            viewport={"width": width, "height": height}, device_scale_factor=1,
            accept_downloads=False, service_workers="block", locale="en-US",
            timezone_id="UTC")
        context.add_init_script(READINESS_INIT_SCRIPT)
        return context


def wait_until_ready(page: Page, config: BrowserConfig, timeout_s: float, token: int) -> Optional[dict]:
    """Wait until `page` is loaded, network-quiet (capped) and DOM-quiet.

    Returns {"popup": bool (a click or window.open may be opening a tab), "blockedPopups": int},
    or None when
    `timeout_s` ran out first (the caller observes the page as it is). Raises Playwright
    errors (closed / crashed page) to the caller.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    arg = {"token": token, "quietMs": config.dom_quiet_ms,
           "networkCapMs": config.network_quiet_cap_s * 1000,
           "navigationGraceMs": config.navigation_grace_s * 1000}
    try:
        handle = page.wait_for_function(READINESS_PROBE, arg=arg, polling=10,
                                        timeout=max(1.0, timeout_s * 1000))
    except PlaywrightTimeout:
        return None
    try:
        value = handle.json_value()
    finally:
        handle.dispose()
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
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function("() => true", timeout=max(1.0, timeout_s * 1000))
        return True
    except PlaywrightTimeout:
        return False


def _browser_pids(root_pid: int, marker: str = "") -> set[int]:
    """Chromium main processes among `root_pid`'s descendants (renderers carry --type=) whose
    command line holds `marker`."""
    children: dict[int, list[int]] = {}
    cmdlines: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdlines[int(entry)] = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, stack = set(), list(children.get(root_pid, []))
    while stack:
        pid = stack.pop()
        cmd = cmdlines.get(pid, "")
        if "chrom" in cmd and "--type=" not in cmd and "--remote-debugging-pipe" in cmd and marker in cmd:
            found.add(pid)
        stack.extend(children.get(pid, []))
    return found

"""One reusable BrowserContext per env slot: episodes after the first skip `new_context` + `new_page`.

Opening a context costs little; its first tab costs a renderer process (measured under load on
2 cores: `new_context` ~40 ms, `new_context` + `new_page` ~400-500 ms). A `ReusableContext`
keeps the slot's context and its first tab between episodes and scrubs them before the next
one starts, so a reset pays a navigation, not a process start.

Between two episodes `scrub()` removes what one episode could hand to the next:
- tabs: every tab but the first is closed; the first goes to about:blank (which also ends
  focus, scroll, timers, open WebSockets and the document's in-memory state) and the mouse is
  moved off the page (no element keeps :hover);
- cookies (`clear_cookies`) and permissions (`clear_permissions`);
- per-origin storage of every origin the episode's documents came from (localStorage,
  sessionStorage, IndexedDB, Cache Storage, service workers, file systems; DevTools
  `Storage.clearDataForOrigin` with all storage types) and the HTTP cache
  (`Network.clearBrowserCache`);
- navigation history: once on about:blank the tab's back/forward entries are dropped
  (`Page.resetNavigationHistory`), so the next episode's history is [about:blank, entry] as in
  a fresh tab, and `go_back` cannot reach the previous episode's pages.

What is kept on purpose: the readiness probe and listener registry (init scripts, identical for
every episode) and the safety guards. The guards are installed once per context with the slot's
own `EpisodeEvents` and `DomainAllowlist` objects; `begin()` resets the events in place and puts
the new task's allowed domains into the allowlist, so the route handler, the tab cap and the
dialog/download/crash handlers of the kept tab act for the new episode.

A context is not reused (the next episode gets a fresh one) when the episode ended on an infra
error, a renderer crashed, a dialog flood left a tab blocked, the browser was relaunched, the kept
tab is gone, the scrub itself failed, or the key (viewport, safety config, browser generation)
changed; under the proxy guard (`webrl.envs.safety.guard_proxy`, fixed when the context is made)
a new allowlist is a new key too. Recorded or replayed episodes (`webrl.envs.recording`) never use the pool: a HAR is
written when its own context closes, and replay routes belong to one recording.

State a task (or anything else) installs through Playwright rather than through the page is
not scrubbed but watched: once the guards are installed, a call on the context or the kept tab
to one of `STATEFUL_METHODS` (init scripts, routes, bindings, geolocation, offline mode, extra
headers, default timeouts, viewport, media emulation) marks the context as used, and the next
episode gets a fresh one. So a Task whose `setup` configures the browser works unchanged; only
its own episodes lose the reuse.
"""
from __future__ import annotations

from typing import Any, Optional
from urllib.parse import urlsplit

from webrl.envs.browser import BrowserSession, EpisodeEvents
from webrl.envs.safety import DomainAllowlist, SafetyConfig, close_page_quietly, guard_proxy, install_guards

STATEFUL_METHODS = ("add_init_script", "route", "route_from_har", "route_web_socket", "expose_binding",
                    "expose_function", "set_geolocation", "set_offline", "set_extra_http_headers",
                    "set_default_timeout", "set_default_navigation_timeout", "set_viewport_size", "emulate_media",
                    "set_http_credentials")
"""Playwright calls whose effect outlives an episode and that the scrub does not undo."""
SCRUB_TIMEOUT_S = 5.0
"""Cap of the about:blank navigation of a scrub; past it the context is replaced."""


def _origin(url: str) -> Optional[str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc.lower()}"


class ReusableContext:
    """The context and first tab of one env slot, handed to one episode at a time.

    `acquire()` returns (context, kept page or None, events, allowlist); None for the page means
    the context is new and the episode opens its first tab itself. `release(clean)` after the
    episode; `close()` when the env closes.
    """

    def __init__(self, session: BrowserSession):
        self.session = session
        self.context: Any = None
        self.page: Any = None
        self.events = EpisodeEvents()
        self.allowlist = DomainAllowlist(())
        self.reuses = 0  # episodes served by a reused context (tests, benchmarks)
        self._key: Optional[tuple] = None
        self._cdp: Any = None
        self._origins: set[str] = set()
        self._dirty = False
        self._used = False  # a STATEFUL_METHODS call since the guards went in

    def acquire(self, viewport: tuple[int, int], safety: SafetyConfig, allowed_domains: tuple[str, ...],
                http_tools: bool = False):
        proxy = guard_proxy(allowed_domains, safety, self.session.own_proxy, http_tools)
        key = (self.session.generation, tuple(viewport), id(safety), safety.subresource_policy,
               proxy and proxy["bypass"])
        if self.context is not None and (key != self._key or self._used or not self._scrub()):
            self.close()
        if self.context is not None:
            self.reuses += 1
            self._begin(allowed_domains)
            return self.context, self.page, self.events, self.allowlist
        self.events, self.allowlist = EpisodeEvents(), DomainAllowlist(())
        self._begin(allowed_domains)
        self.context = self.session.new_context(viewport, proxy=proxy)
        self._key, self.page, self._cdp, self._origins = key, None, None, set()
        # origins to scrub: every frame's documents, from navigation events (not a callback per request)
        self.context.on("page", lambda page: page.on("framenavigated", self._note_origin))
        install_guards(self.context, self.allowlist, self.events, safety, proxy)
        self._used = False
        self._watch(self.context)
        return self.context, None, self.events, self.allowlist

    def adopt_first_page(self, page: Any) -> None:
        """The episode opened the new context's first tab: keep it for the next episodes."""
        self.page = page
        self._watch(page)

    def release(self, clean: bool) -> None:
        """End of an episode: keep the context for a scrub at the next `acquire` if `clean`."""
        if self.context is None:
            return
        events = self.events
        healthy = (clean and not events.crashed and not events.flooded_pages and self.page is not None
                   and not self.page.is_closed() and self.session.generation == self._key[0])
        if healthy:
            self._dirty = True
        else:
            self.close()

    def close(self) -> None:
        context, self.context, self.page, self._cdp, self._dirty = self.context, None, None, None, False
        if context is not None:
            try:
                context.close()
            except Exception:  # browser already gone
                pass

    # -- internals ---------------------------------------------------------------------------
    def _watch(self, target: Any) -> None:
        """Wrap `target`'s STATEFUL_METHODS (instance attributes over Playwright's methods) so
        that calling one marks the context as used."""
        for name in STATEFUL_METHODS:
            method = getattr(target, name, None)
            if method is not None:
                setattr(target, name, self._marking(method))

    def _marking(self, method: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self._used = True
            return method(*args, **kwargs)
        return call

    def _begin(self, allowed_domains: tuple[str, ...]) -> None:
        vars(self.events).update(vars(EpisodeEvents()))  # same object: the installed handlers hold it
        self.allowlist.entries = DomainAllowlist(allowed_domains).entries

    def _note_origin(self, frame: Any) -> None:
        origin = _origin(frame.url)
        if origin:
            self._origins.add(origin)

    def _scrub(self) -> bool:
        """Make the kept context look fresh; False if that failed (the caller replaces it)."""
        if not self._dirty or self.page is None or self.page.is_closed():
            return False
        try:
            for page in list(self.context.pages):
                if page is not self.page and not close_page_quietly(page):
                    return False
            if self._cdp is None:
                self._cdp = self.context.new_cdp_session(self.page)
            self.page.goto("about:blank", timeout=SCRUB_TIMEOUT_S * 1000)
            self._cdp.send("Page.resetNavigationHistory")
            self.page.mouse.move(-1, -1)
            self.context.clear_cookies()
            self.context.clear_permissions()
            for origin in sorted(self._origins):
                self._cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "all"})
            self._cdp.send("Network.clearBrowserCache")
        except Exception:  # a closed, crashed or stuck tab: start over with a fresh context
            return False
        self._origins.clear()
        self._dirty = False
        return True

"""Safety guards for one episode: domain allowlist, dialogs, downloads, popups, time limits.

Everything here is installed per `BrowserContext` (= per episode) and reports through
`EpisodeEvents.notes`, which the env turns into the text feedback of the step.

- Domain allowlist. Under "allowlist" (the default) Chromium enforces it itself: the context
  gets a proxy that accepts no connection (`BLOCKING_PROXY`) and the allowlist as the proxy's
  bypass list (`guard_proxy`), so every request to an allowed host goes direct and every other
  one fails in the network stack: subresources, XHR/fetch, WebSockets, popups' first documents
  and every hop of a redirect, with no round trip to Python (a Python route handler costs
  ~5-8 ms per request under load: about 48 ms of a MiniWoB++ reset, 2026-12-07b). A failed
  request is reported from the context's `requestfailed` event (`ProxyBlockNotes`). An
  allowlist Chromium's bypass rules cannot express, a browser launched with its own
  `--proxy-server`, and the "any" policy use the route guard instead (`RequestGuard`, a
  `context.route`): outside requests are aborted (`blockedbyclient`); redirect hops are not
  routed by Playwright, so GET documents are fetched with `route.fetch(max_redirects=0)` and a
  redirect to an outside host is refused, a second or later hop that leaves the allowlist only
  after it loaded (`guard_tab_urls` resets the tab), a known gap of that path. `goto` and new-tab URLs are
  checked before navigating; only http(s) (and about:blank) top-level URLs are allowed, so
  file://, chrome://, data: and javascript: navigations are refused. Chromium itself refuses
  renderer-initiated top-level navigations to file:// and data: from web pages.
- Dialogs (alert / confirm / prompt / beforeunload) are accepted (or dismissed, by config) and
  reported. Past `MAX_DIALOGS_PER_STEP` in one step (an alert loop) they are left open, which
  stalls the page; the env then closes the tab as unresponsive.
- Downloads are refused (`accept_downloads=False`) and reported.
- Popup floods: Chromium's popup blocker stays on (see browser.py), and a tab opened past
  `MAX_TABS` is closed at once.
- Time: every Playwright call of a step gets `Deadline.timeout_ms(...)`, so a step ends within
  `step_timeout_s` plus the time to close a stuck tab; episodes end after `episode_timeout_s`
  of env time (time spent inside reset/step, not the policy's thinking time, so a slow
  inference queue does not truncate episodes).
"""
from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence
from urllib.parse import urljoin, urlsplit

from webrl.envs.browser import EpisodeEvents
from webrl.envs.network import NetworkPolicyConfig, install_public_web_guard

DIALOG_POLICIES = ("accept", "dismiss")
SUBRESOURCE_POLICIES = ("allowlist", "any", "public")
ACTION_TIMEOUT_S = 3.0
"""Cap for one element action to find its target and act (Playwright actionability); the step's
`step_timeout_s` bounds the whole step."""
MAX_TABS = 8
"""Tabs an episode may have open; tabs opened past this are closed at once."""
MAX_DIALOGS_PER_STEP = 5
"""Dialogs handled in one step; more means an alert loop and the tab is closed."""
BLOCKING_PROXY = "http://127.0.0.1:1"
"""The proxy of `guard_proxy`: port 1 of the browser's own loopback, where nothing listens (a
listener there needs root), so a request sent to it fails at once with `PROXY_BLOCK_ERROR`."""
PROXY_BLOCK_ERROR = "net::ERR_PROXY_CONNECTION_FAILED"
_BYPASS_ENTRY = re.compile(r"(\*\.)?[a-z0-9_-]+(\.[a-z0-9_-]+)*(:[0-9]{1,5})?|\[[0-9a-f:.]+\](:[0-9]{1,5})?")
_IPV4 = re.compile(r"[0-9]+(\.[0-9]+){3}")
REDIRECT_CHECK_TIMEOUT_S = 10.0
"""Timeout of the redirect check's document fetch: top-level documents are fetched without
following redirects, and a redirect whose Location is outside the allowlist is refused
(Playwright does not route redirect hops). Only the first hop is checked at request level;
later hops are caught after loading (the tab is reset)."""


@dataclass
class SafetyConfig:
    """Limits and guards applied to every episode."""

    step_timeout_s: float = 20.0
    """Hard limit for one step (action + readiness + observation)."""
    episode_timeout_s: float = 600.0
    """Env time (inside reset/step) after which the episode is truncated."""
    dialog_policy: str = "accept"
    """"accept" (prompt: its default text) or "dismiss" every dialog."""
    subresource_policy: str = "allowlist"
    """"allowlist": every request must target an allowed domain; "any": only navigations
    (documents) are checked, images/scripts/XHR may come from any host; "public" (live web):
    top-level navigations stay on the allowed domains, everything else may reach public hosts
    only, WebSockets and redirect hops included (`webrl.envs.network`)."""
    network: NetworkPolicyConfig = field(default_factory=NetworkPolicyConfig)
    """Internal address ranges and name resolution of the "public" policy (a dict is accepted)."""

    def __post_init__(self) -> None:
        for name in ("step_timeout_s", "episode_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"SafetyConfig.{name} must be > 0, got {getattr(self, name)!r}")
        if self.dialog_policy not in DIALOG_POLICIES:
            raise ValueError(f"SafetyConfig.dialog_policy must be one of {DIALOG_POLICIES}, got {self.dialog_policy!r}")
        if self.subresource_policy not in SUBRESOURCE_POLICIES:
            raise ValueError(f"SafetyConfig.subresource_policy must be one of {SUBRESOURCE_POLICIES}, "
                             f"got {self.subresource_policy!r}")
        if isinstance(self.network, dict):
            names = {f.name for f in dataclasses.fields(NetworkPolicyConfig)}
            unknown = sorted(set(self.network) - names)
            if unknown:
                raise ValueError(f"SafetyConfig.network: unknown keys {unknown}; allowed: {sorted(names)}")
            self.network = NetworkPolicyConfig(**self.network)
        elif not isinstance(self.network, NetworkPolicyConfig):
            raise TypeError(f"SafetyConfig.network must be a NetworkPolicyConfig or a dict, "
                            f"got {type(self.network).__name__}")
        if self.subresource_policy != "public":  # only resolver_overrides also applies (to Chromium)
            default = NetworkPolicyConfig()
            unused = [f.name for f in dataclasses.fields(NetworkPolicyConfig) if f.name != "resolver_overrides"
                      and getattr(self.network, f.name) != getattr(default, f.name)]
            if unused:
                raise ValueError(f"SafetyConfig.network.{unused[0]} applies only with subresource_policy='public' "
                                 f"(got {self.subresource_policy!r})")


class StepTimeLimit(RuntimeError):
    """The per-step time limit ran out."""


class Deadline:
    """A monotonic deadline; hands out Playwright timeouts that never overrun it."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def timeout_s(self, cap_s: Optional[float] = None) -> float:
        """min(cap, remaining) seconds; raises StepTimeLimit once nothing remains."""
        left = self.remaining()
        if left <= 0.05:
            raise StepTimeLimit(f"the step ran past its {self.seconds:g} s limit")
        return left if cap_s is None else min(cap_s, left)

    def timeout_ms(self, cap_s: Optional[float] = None) -> float:
        return self.timeout_s(cap_s) * 1000


class DomainAllowlist:
    """Which hosts an episode may reach.

    Entries: "*" (any host), "host:port" (exactly that netloc), "host" (that host on any port,
    and its subdomains), "*.example.com" (example.com and its subdomains).
    """

    def __init__(self, entries: Sequence[str]):
        self.entries = tuple(e.strip().lower() for e in entries if e.strip())

    def allows_host(self, netloc: str) -> bool:
        netloc = netloc.lower().rsplit("@", 1)[-1]
        host = urlsplit(f"//{netloc}").hostname or ""
        for entry in self.entries:
            if entry in ("*", netloc):
                return True
            base = entry[2:] if entry.startswith("*.") else entry
            if ":" not in base and (host == base or host.endswith("." + base)):
                return True
        return False

    def check_navigation(self, url: str) -> Optional[str]:
        """None if a top-level navigation to `url` is allowed, else the reason it is not."""
        try:
            parts = urlsplit(url)
        except ValueError:
            return f"{url!r} is not a valid URL"
        if url == "about:blank":
            return None
        if parts.scheme not in ("http", "https"):
            return f"{parts.scheme or 'scheme-less'}: URLs are not allowed (only http and https)"
        if not parts.netloc:
            return f"{url!r} has no host"
        if not self.allows_host(parts.netloc):
            return f"host {parts.netloc} is outside the allowed domains ({', '.join(self.entries) or 'none'})"
        return None


def proxy_bypass_rules(entries: Sequence[str]) -> Optional[str]:
    """Chromium proxy bypass rules that let through exactly the hosts `DomainAllowlist(entries)`
    allows, or None when an entry has a form the rules cannot say (the route guard takes over).

    "*" -> "*"; "host:port" -> itself; "host" -> "host,*.host" (any port, its subdomains; an
    IPv4 literal has none); "*.example.com" -> "example.com,*.example.com"; "[v6]" (no port,
    so the default ports, as DomainAllowlist reads it) -> "http://[v6]:80,https://[v6]:443".
    "<-loopback>" comes first: without it Chromium sends every loopback host direct.
    One difference, on the allowing side: "host:80" also matches "http://host/" here.
    """
    rules = ["<-loopback>"]
    for entry in DomainAllowlist(entries).entries:
        if entry == "*":
            rules.append("*")
        elif not _BYPASS_ENTRY.fullmatch(entry):
            return None
        elif entry.startswith("*.") and ":" in entry:
            continue  # DomainAllowlist matches no host with it
        elif entry.startswith("["):
            rules += [entry] if "]:" in entry else [f"http://{entry}:80", f"https://{entry}:443"]
        elif ":" in entry or _IPV4.fullmatch(entry):
            rules.append(entry)
        else:
            base = entry[2:] if entry.startswith("*.") else entry
            rules += [base, f"*.{base}"]
    return ",".join(rules)


def guard_proxy(allowed_domains: Sequence[str], config: SafetyConfig, browser_proxied: bool = False,
                http_tools: bool = False) -> Optional[dict]:
    """The `proxy` option for the episode's `new_context` that enforces the allowlist inside
    Chromium, or None where the route guard enforces it (`install_guards` takes the same value).

    None under the "any" and "public" policies; when the browser was launched with its own proxy
    (`browser_proxied`: its allowed sites may need it); for an episode with http tools
    (`http_tools`: they fetch through `BrowserContext.request`, whose Node-side proxy matches
    bypass rules by host suffix without ports, Playwright 1.65 `shouldBypassProxy`, so an
    allowed "host:port" would go to the blocking proxy); and when `proxy_bypass_rules` cannot
    say the allowlist. With an empty allowlist every request goes to the blocking proxy."""
    if config.subresource_policy != "allowlist" or browser_proxied or http_tools:
        return None
    bypass = proxy_bypass_rules(allowed_domains)
    return None if bypass is None else {"server": BLOCKING_PROXY, "bypass": bypass}


class ProxyBlockNotes:
    """The context's `requestfailed` handler under `guard_proxy`: reports each request the
    blocking proxy refused, or that failed on a host outside the allowlist before reaching it
    (Chromium refuses unsafe ports such as :9 first), in the route guard's words."""

    def __init__(self, events: EpisodeEvents, allowlist: DomainAllowlist):
        self.events, self.allowlist = events, allowlist

    def __call__(self, request: Any) -> None:
        netloc = urlsplit(request.url).netloc
        if request.failure != PROXY_BLOCK_ERROR and (self.allowlist.allows_host(netloc)
                                                     or not request.url.lower().startswith(("http:", "https:"))):
            return
        if not request.is_navigation_request():
            self.events.notes.append(f"Blocked {request.resource_type} request to {netloc}: outside the allowed domains")
        elif request.redirected_from is not None:
            self.events.notes.append(f"Blocked navigation to {netloc}: a redirect outside the allowed domains")
        else:
            self.events.notes.append(f"Blocked navigation to {netloc}: outside the allowed domains")


class RequestGuard:
    """The `context.route` handler: lets allowed requests through, aborts and reports the rest."""

    def __init__(self, allowlist: DomainAllowlist, events: EpisodeEvents, config: SafetyConfig):
        self.allowlist, self.events, self.config = allowlist, events, config

    def __call__(self, route: Any) -> None:
        request = route.request
        url = request.url
        if url.split(":", 1)[0].lower() not in ("http", "https"):
            route.continue_()
            return
        netloc = urlsplit(url).netloc
        is_document = request.is_navigation_request()
        if self.allowlist.allows_host(netloc):
            if is_document and request.method == "GET":
                self._fetch_document(route)
            else:
                route.continue_()
        elif self.config.subresource_policy == "any" and not is_document:
            route.continue_()
        else:
            kind = "navigation" if is_document else f"{request.resource_type} request"
            self.events.notes.append(f"Blocked {kind} to {netloc}: outside the allowed domains")
            route.abort("blockedbyclient")

    def _fetch_document(self, route: Any) -> None:
        # Playwright does not route the hops of a redirect: fetch the document without following
        # redirects and refuse a Location outside the allowlist before the browser goes there.
        try:
            response = route.fetch(max_redirects=0, timeout=REDIRECT_CHECK_TIMEOUT_S * 1000)
        except Exception:  # connection refused, timeout...: let the browser fail on its own
            route.continue_()
            return
        location = response.headers.get("location", "")
        if 300 <= response.status < 400 and location:
            target = urlsplit(urljoin(route.request.url, location))
            if target.scheme in ("http", "https") and not self.allowlist.allows_host(target.netloc):
                self.events.notes.append(
                    f"Blocked navigation to {target.netloc}: a redirect outside the allowed domains")
                route.abort("blockedbyclient")
                return
        route.fulfill(response=response)


def install_guards(context: Any, allowlist: DomainAllowlist, events: EpisodeEvents,
                   config: SafetyConfig, proxy: Optional[dict] = None) -> None:
    """Request guard, popup cap, dialog/download/crash handlers on `context` and its pages.

    `proxy`: what `guard_proxy` gave for the context's `new_context` (it must have been created
    with it); then Chromium enforces the allowlist and only the block reports are installed."""

    def on_page(page: Any) -> None:
        attach_page_handlers(page, events, config)
        if len(context.pages) > MAX_TABS:
            events.notes.append(f"Closed a tab opened by the page ({page.url}): limit of "
                                f"{MAX_TABS} tabs reached")
            close_page_quietly(page)
            return
        events.new_pages.append(page)

    if config.subresource_policy == "public":
        install_public_web_guard(context, allowlist, events, config.network, REDIRECT_CHECK_TIMEOUT_S)
    elif proxy is not None:
        context.on("requestfailed", ProxyBlockNotes(events, allowlist))
    else:
        context.route("**/*", RequestGuard(allowlist, events, config))
    context.on("page", on_page)


def attach_page_handlers(page: Any, events: EpisodeEvents, config: SafetyConfig) -> None:
    """Dialog, download and crash handlers for one tab."""

    def on_dialog(dialog: Any) -> None:
        events.dialogs_this_step += 1
        if events.dialogs_this_step > MAX_DIALOGS_PER_STEP:
            if events.dialogs_this_step == MAX_DIALOGS_PER_STEP + 1:
                events.notes.append(f"Dialog flood: more than {MAX_DIALOGS_PER_STEP} "
                                    "dialogs in one step; the tab is left blocked")
                events.flooded_pages.append(page)
            return  # left open: the page stalls until the env closes the tab
        message = " ".join(dialog.message.split())[:200]
        try:
            if config.dialog_policy == "accept":
                dialog.accept(dialog.default_value) if dialog.type == "prompt" else dialog.accept()
                verdict = "accepted"
            else:
                dialog.dismiss()
                verdict = "dismissed"
        except Exception:  # the page went away meanwhile
            verdict = "closed"
        events.notes.append(f"Dialog {dialog.type} {message!r} {verdict}")

    def on_download(download: Any) -> None:
        events.notes.append(f"Download refused: {download.suggested_filename} ({download.url[:200]})")

    def on_crash(_page: Any) -> None:
        events.crashed = True

    page.on("dialog", on_dialog)
    page.on("download", on_download)
    page.on("crash", on_crash)


def close_page_quietly(page: Any) -> bool:
    """Close a (possibly stuck) tab without running unload handlers; False if that failed."""
    try:
        page.close(run_before_unload=False)
        return True
    except Exception:
        return False


def guard_tab_urls(pages: Sequence[Any], allowlist: DomainAllowlist,
                   note: Callable[[str], None]) -> None:
    """Send any tab that ended up on a disallowed top-level URL back to about:blank."""
    for index, page in enumerate(pages):
        reason = allowlist.check_navigation(page.url) if page.url else None
        if reason and not page.url.startswith("chrome-error://"):
            note(f"Tab {index} was on a disallowed URL ({reason}); it was reset to about:blank")
            try:
                page.goto("about:blank", timeout=2000)
            except Exception:
                close_page_quietly(page)

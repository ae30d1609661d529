"""The live-web network policy (`SafetyConfig.subresource_policy = "public"`).

What it enforces, per episode (`PublicWebGuard` on `context.route`, `WebSocketGuard` on
`context.route_web_socket`):
- Top-level navigations stay on the task's sites: its allowed domains. The live-web loaders add
  each start host's registrable domain (`site_domains`), so "www.shop.example" also allows
  "cdn.shop.example" and "shop.example".
- Subresources (and subframes) may come from any public host, so real pages render.
- No request of any kind (WebSockets included, every redirect hop) goes to an internal address:
  loopback, RFC 1918, ULA, link-local (cloud metadata 169.254.169.254, fd00:ec2::254), CGNAT,
  multicast, reserved. The check is on the address the host RESOLVES to (every address
  getaddrinfo returns), so a public name pointing inside is refused; literal IPs in any form
  Chromium accepts (2130706433, 0x7f.1, 0177.0.0.1) are parsed as such.

How: a request is fetched by the guard with `route.fetch(max_redirects=0)` and every redirect
hop is checked before it is fetched (Playwright does not route hops the browser follows).
Subresources are answered with the final response; documents with the first (redirect)
response, so the page keeps its real URL, and the browser then repeats the checked hops itself.
Bodies stay in the Playwright driver (`fulfill(response=...)`); only headers cross into Python.

Known gaps: names are resolved by Python and again by Chromium (or the driver), so a DNS answer
that changes between the two (rebinding) is not caught, except for `resolver_overrides` names
on http, which are fetched at the checked address; a server that answers a repeated document
hop differently is not re-checked.

Registrable domains come from a small built-in rule set (`MULTI_PART_SUFFIXES`: co.uk, com.au,
...) instead of the Public Suffix List, which would have to be downloaded or added as a
dependency; a suffix missing from it makes the site one label too wide (e.g. "a.example.ua" ->
"example.ua"). Extend the set where a task needs it.
"""
from __future__ import annotations

import ipaddress
import re
import socket
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Union
from urllib.parse import urljoin, urlsplit

from webrl.config import fixed

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

DEFAULT_INTERNAL_NETWORKS = (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24",
    "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
    "::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8", "100::/64", "2001:db8::/32",
)
MULTI_PART_SUFFIXES = frozenset({
    "co.uk", "org.uk", "ac.uk", "gov.uk", "me.uk", "com.au", "net.au", "org.au", "edu.au",
    "gov.au", "co.nz", "org.nz", "co.jp", "ne.jp", "or.jp", "co.kr", "or.kr", "co.in", "net.in",
    "org.in", "co.za", "co.il", "com.br", "com.mx", "com.ar", "com.cn", "com.hk", "com.tw",
    "com.sg", "com.my", "com.tr", "com.sa", "com.eg", "com.ua", "com.pl", "co.id", "co.th",
})
DNS_CACHE_SIZE = 256
"""Host names whose resolution an `AddressPolicy` remembers (one policy per episode)."""
MAX_REDIRECTS = 10
"""Redirect hops the public-web guard follows (each one checked) before it refuses the request."""
HTTP_URL = re.compile(r"^https?://", re.IGNORECASE)
WEBSOCKET_URL = re.compile(r"^wss?://", re.IGNORECASE)


@dataclass
class NetworkPolicyConfig:
    """Address ranges and name resolution of the "public" policy (`SafetyConfig.network`)."""

    internal_networks: tuple[str, ...] = DEFAULT_INTERNAL_NETWORKS
    """CIDRs no request may reach (checked on resolved addresses)."""
    public_stand_ins: tuple[str, ...] = ()
    """CIDRs inside `internal_networks` that count as public anyway: tests serve the "public"
    web from ("127.0.0.1/32",) and keep the rest of 127.0.0.0/8 internal."""
    local_sites: tuple[str, ...] = ()
    """The user's own sites on loopback or a private network that tasks may reach anyway: "host"
    (any port) or "host:port" entries, e.g. ("127.0.0.1:8080", "wiki.lan"). Requests to a listed
    host skip the internal-address check; every other host is checked as before."""
    resolver_overrides: dict[str, str] = fixed({}, "runs resolve names through DNS; code that builds the env maps stand-in hosts")
    """Host name -> IP used instead of DNS, by this guard and (through `--host-resolver-rules`,
    added by `WebEnvConfig`) by Chromium, so both agree: {"public.test": "127.0.0.1"}."""

    def __post_init__(self) -> None:
        self.internal_networks = tuple(self.internal_networks)
        self.public_stand_ins = tuple(self.public_stand_ins)
        self.local_sites = tuple(str(site).strip().lower().rstrip("/") for site in self.local_sites)
        for site in self.local_sites:
            if not re.fullmatch(r"(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(:[0-9]{1,5})?", site):
                raise ValueError(f"NetworkPolicyConfig.local_sites: {site!r} must be a host or host:port "
                                 "such as '127.0.0.1:8080' or 'wiki.lan' (no scheme, no path)")
        for name in ("internal_networks", "public_stand_ins"):
            for cidr in getattr(self, name):
                try:
                    ipaddress.ip_network(cidr, strict=False)
                except ValueError:
                    raise ValueError(f"NetworkPolicyConfig.{name}: {cidr!r} is not a CIDR "
                                     "such as '10.0.0.0/8' or 'fc00::/7'") from None
        self.resolver_overrides = {str(k).lower(): v for k, v in dict(self.resolver_overrides).items()}
        for host, address in self.resolver_overrides.items():
            if parse_ip_literal(address) is None or not re.fullmatch(r"[a-z0-9.-]+", host):
                raise ValueError(f"NetworkPolicyConfig.resolver_overrides: {host!r}: {address!r} must "
                                 "map a host name to an IP address")


def chromium_resolver_rules(overrides: dict[str, str]) -> str:
    """The Chromium flag mapping the same names as `resolver_overrides` ("" if none)."""
    if not overrides:
        return ""
    rules = ", ".join(f"MAP {host} {address}" for host, address in sorted(overrides.items()))
    return f"--host-resolver-rules={rules}"


def parse_ip_literal(host: str) -> Optional[IPAddress]:
    """The address a URL host denotes if it is an IP literal, in the forms Chromium accepts.

    IPv6 ("::1", brackets stripped), dotted IPv4 with 1 to 4 parts, each decimal, 0x-hex or
    0-octal, the last filling the remaining bytes (WHATWG URL): "2130706433", "0x7f.1" and
    "0177.0.0.1" are all 127.0.0.1. None for a host name.
    """
    host = host.strip("[]").rstrip(".").lower()
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or not all(re.fullmatch(r"0x[0-9a-f]*|[0-9]+", p) for p in parts):
        return None
    try:
        numbers = [int(p, 16) if p.startswith("0x") else int(p, 8) if len(p) > 1 and p[0] == "0"
                   else int(p) for p in (p if p != "0x" else "0x0" for p in parts)]
    except ValueError:  # "09": not octal, and Chromium refuses it too
        return None
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for index, number in enumerate(head):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def registrable_domain(host: str) -> str:
    """"www.shop.example" -> "shop.example", "a.b.amazon.co.uk" -> "amazon.co.uk"; an IP or a
    single label is returned as is. Suffix rules: MULTI_PART_SUFFIXES (see the module doc)."""
    host = host.lower().rstrip(".")
    labels = host.split(".")
    if parse_ip_literal(host) is not None or len(labels) < 2:
        return host
    keep = 3 if ".".join(labels[-2:]) in MULTI_PART_SUFFIXES else 2
    return ".".join(labels[-keep:])


def site_domains(domains: Sequence[str]) -> tuple[str, ...]:
    """`domains` plus the registrable domain of each host entry (its sites), in order, no repeats.
    "host:port" entries stay exact (a port pins one server)."""
    result: list[str] = []
    for entry in domains:
        candidates = [entry] if ":" in entry or entry.startswith("*") else [entry, registrable_domain(entry)]
        result.extend(c for c in candidates if c and c not in result)
    return tuple(result)


class AddressPolicy:
    """Which addresses are internal, and what a URL's host resolves to (cached per instance)."""

    def __init__(self, config: NetworkPolicyConfig,
                 resolve: Optional[Callable[[str], Sequence[str]]] = None, *, cache_size: int = DNS_CACHE_SIZE):
        self.config = config
        self.cache_size = cache_size
        self.internal = [ipaddress.ip_network(c, strict=False) for c in config.internal_networks]
        self.stand_ins = [ipaddress.ip_network(c, strict=False) for c in config.public_stand_ins]
        self._resolve = resolve or _system_addresses
        self._cache: OrderedDict[str, tuple[IPAddress, ...]] = OrderedDict()

    def is_internal(self, address: IPAddress) -> bool:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # ::ffff:10.0.0.1 reaches 10.0.0.1
        def within(networks: list) -> bool:
            return any(address.version == n.version and address in n for n in networks)
        return within(self.internal) and not within(self.stand_ins)

    def addresses(self, host: str) -> tuple[IPAddress, ...]:
        """Every address `host` denotes or resolves to; () if it does not resolve."""
        literal = parse_ip_literal(host)
        if literal is not None:
            return (literal,)
        host = host.lower().rstrip(".")
        if host in self._cache:
            self._cache.move_to_end(host)
            return self._cache[host]
        if host in self.config.resolver_overrides:
            found = (ipaddress.ip_address(self.config.resolver_overrides[host]),)
        else:
            found = tuple(dict.fromkeys(ipaddress.ip_address(a.split("%", 1)[0]) for a in self._resolve(host)))
        self._cache[host] = found
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return found

    def is_local_site(self, url: str) -> bool:
        """Whether `url` is on one of `local_sites` (its host, and its port where the entry names one)."""
        parts = urlsplit(url)
        host = (parts.hostname or "").rstrip(".")
        if ":" in host:
            host = f"[{host}]"
        try:
            port = parts.port or {"http": 80, "https": 443, "ws": 80, "wss": 443}.get(parts.scheme.lower())
        except ValueError:
            return False
        return bool(host) and any(site in (host, f"{host}:{port}") for site in self.config.local_sites)

    def refusal(self, url: str) -> Optional[str]:
        """None if `url`'s host is public (or a listed local site), else why not ("resolves to an
        internal address ...")."""
        host = urlsplit(url).hostname or ""
        if not host:
            return "the URL has no host"
        if self.is_local_site(url):
            return None
        found = self.addresses(host)
        if not found:
            return f"{host} does not resolve"
        bad = next((a for a in found if self.is_internal(a)), None)
        if bad is None:
            return None
        return f"{host} is an internal address" if parse_ip_literal(host) else \
            f"{host} resolves to an internal address ({bad})"

    def pinned_url(self, url: str) -> Optional[str]:
        """For an http URL whose host is a resolver override: the URL at the checked address
        (fetched with the original Host header, so the connection cannot go elsewhere)."""
        parts = urlsplit(url)
        address = self.config.resolver_overrides.get((parts.hostname or "").lower())
        if parts.scheme != "http" or address is None:
            return None
        host = f"[{address}]" if ":" in address else address
        return parts._replace(netloc=host + (f":{parts.port}" if parts.port else "")).geturl()


def _system_addresses(host: str) -> list[str]:
    try:
        return [info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)]
    except (OSError, UnicodeError):
        return []


class PublicWebGuard:
    """The `context.route` handler of the "public" policy (see the module doc).

    `allowlist` (a `DomainAllowlist`) bounds top-level navigations; `events.notes` (an
    `EpisodeEvents`, drained every step) receives one "Blocked <kind> to <netloc>: <reason>"
    line per refusal; `fetch_timeout_s` caps each hop.
    """

    def __init__(self, allowlist: Any, addresses: AddressPolicy, events: Any, fetch_timeout_s: float):
        self.allowlist, self.addresses, self.events = allowlist, addresses, events
        self.fetch_timeout_ms = fetch_timeout_s * 1000

    def __call__(self, route: Any) -> None:
        request = route.request
        top_level = request.is_navigation_request() and _is_main_frame(request)
        kind = "navigation" if top_level else f"{request.resource_type} request"
        reason = self._refusal(request.url, top_level)
        if reason:
            return self._block(route, kind, request.url, reason)
        try:
            first, final, reason, where = self._fetch_chain(route, top_level)
        except Exception:  # connection refused, timeout, page gone: the browser shows an error
            route.abort("failed")
            return
        if reason:
            return self._block(route, kind, where, f"a redirect to {reason}")
        route.fulfill(response=first if top_level else final)

    def _refusal(self, url: str, top_level: bool) -> Optional[str]:
        if top_level and not self.allowlist.allows_host(urlsplit(url).netloc):
            return "outside the allowed domains"
        return self.addresses.refusal(url)

    def _fetch_chain(self, route: Any, top_level: bool) -> tuple[Any, Any, Optional[str], str]:
        """(first response, final response, refusal of a hop or None, that hop's URL)."""
        request = route.request
        url, method, body = request.url, request.method, request.post_data_buffer
        first = None
        for _ in range(MAX_REDIRECTS + 1):
            response = self._fetch(route, url, method, body)
            first = first or response
            location = response.headers.get("location", "")
            if not (300 <= response.status < 400 and location):
                return first, response, None, url
            url = urljoin(url, location)
            if urlsplit(url).scheme not in ("http", "https"):
                return first, response, None, url  # the browser refuses file:, data: ... itself
            if response.status in (301, 302, 303) and method not in ("GET", "HEAD"):
                method, body = "GET", None
            reason = self._refusal(url, top_level)
            if reason:
                return first, response, reason, url
        return first, first, f"more than {MAX_REDIRECTS} redirects", url

    def _fetch(self, route: Any, url: str, method: str, body: Optional[bytes]) -> Any:
        headers = None
        pinned = self.addresses.pinned_url(url)
        if pinned:
            headers = {**route.request.headers, "host": urlsplit(url).netloc}
        return route.fetch(url=pinned or url, method=method, post_data=body, headers=headers,
                           max_redirects=0, timeout=self.fetch_timeout_ms)

    def _block(self, route: Any, kind: str, url: str, reason: str) -> None:
        self.events.notes.append(f"Blocked {kind} to {urlsplit(url).netloc}: {reason}")
        route.abort("blockedbyclient")


class WebSocketGuard:
    """The `context.route_web_socket` handler: connects public WebSockets, refuses the rest
    before any connection is made (the page sees the socket close)."""

    def __init__(self, addresses: AddressPolicy, events: Any):
        self.addresses, self.events = addresses, events

    def __call__(self, socket_route: Any) -> None:
        reason = self.addresses.refusal(socket_route.url)
        if reason is None:
            socket_route.connect_to_server()
            return
        self.events.notes.append(f"Blocked websocket to {urlsplit(socket_route.url).netloc}: {reason}")
        socket_route.close(code=1008, reason="blocked by the network policy")


def install_public_web_guard(context: Any, allowlist: Any, events: Any, config: NetworkPolicyConfig,
                             fetch_timeout_s: float) -> None:
    """Route http(s) and ws(s) of `context` through the policy. The patterns are regexes, which
    Playwright matches in the driver: other schemes (data:, blob:) never cross into Python."""
    addresses = AddressPolicy(config)
    context.route(HTTP_URL, PublicWebGuard(allowlist, addresses, events, fetch_timeout_s))
    context.route_web_socket(WEBSOCKET_URL, WebSocketGuard(addresses, events))


def _is_main_frame(request: Any) -> bool:
    try:
        return request.frame.parent_frame is None
    except Exception:  # a request without a frame (worker): not a top-level navigation
        return False

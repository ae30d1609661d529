"""The live-web network policy (`subresource_policy="public"`, `webrl.envs.network`).

Loopback stands in for the internet: 127.0.0.1 (the site) and 127.0.0.4 (a CDN) are declared
public stand-ins, the rest of 127.0.0.0/8 stays internal, so 127.0.0.2 and 127.0.0.3 play the
internal hosts. Names resolve through `resolver_overrides`, which Chromium receives as
`--host-resolver-rules`: evil.test -> 127.0.0.2, public.test -> 127.0.0.1. No traffic leaves
127.0.0.0/8. The internal servers count accepted connections, so "no request of any kind"
(documents, preflights, WebSocket handshakes) is what is asserted; the iframe's host
(127.0.0.5) is checked for requests only (see the known gap in the test).
"""
from __future__ import annotations

import ipaddress

import pytest

from tests.plugins.browser import LocalHTTPServer
from webrl.envs import TaskSpec, WebEnv, WebEnvConfig
from webrl.envs.network import (AddressPolicy, NetworkPolicyConfig, parse_ip_literal,
                                registrable_domain, site_domains)
from webrl.envs.safety import SafetyConfig

OVERRIDES = {"evil.test": "127.0.0.2", "public.test": "127.0.0.1"}
NETWORK = {"public_stand_ins": ["127.0.0.1/32", "127.0.0.4/32"], "resolver_overrides": OVERRIDES}

ATTACK_PAGE = """<!doctype html><title>Attack</title>
<link rel="stylesheet" href="{cdn}/style.css">
<link rel="stylesheet" href="http://public.test:{public_port}/named.css">
<p id="text">hello</p>
<img src="{internal}/img.png">
<script src="{internal2}/x.js"></script>
<iframe src="{frame_host}/frame.html"></iframe>
<img src="{public}/__redirect_to?url={internal}/redirected.png">
<img src="http://evil.test:{internal_port}/named.png">
<img src="http://2130706434:{internal_port}/decimal.png">
<a id="off" href="{cdn}/page2.html">off-site</a>
<script>
fetch("{internal}/fetch").catch(() => null);
const xhr = new XMLHttpRequest(); xhr.open("GET", "{internal}/xhr"); xhr.send();
const socket = new WebSocket("ws://127.0.0.3:{internal2_port}/ws");
socket.onclose = () => {{ document.title = "socket closed"; }};
</script>
"""


class CountingServer(LocalHTTPServer):
    """A LocalHTTPServer that also counts accepted TCP connections (any request at all)."""

    def __init__(self, directory, host):
        super().__init__(directory, host)
        self.connections = 0

        def verify_request(request, client_address) -> bool:
            self.connections += 1
            return True

        self.httpd.verify_request = verify_request


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("network_policy")
    (folder / "style.css").write_text("body { background-color: rgb(1, 2, 3); }")
    (folder / "named.css").write_text("#text { color: rgb(4, 5, 6); }")
    (folder / "page2.html").write_text("<title>Page 2</title><p>off-site page</p>")
    made = {name: CountingServer(folder, host) for name, host in
            (("public", "127.0.0.1"), ("cdn", "127.0.0.4"), ("internal", "127.0.0.2"),
             ("internal2", "127.0.0.3"), ("frame_host", "127.0.0.5"))}
    (folder / "attack.html").write_text(ATTACK_PAGE.format(
        **{name: server.base_url for name, server in made.items()},
        **{f"{name}_port": server.port for name, server in made.items()}))
    yield made
    for server in made.values():
        server.stop()


@pytest.fixture(scope="module")
def env():
    config = WebEnvConfig.from_dict({"browser": {"viewport": "cpu"}, "safety": {
        "subresource_policy": "public", "network": NETWORK}})
    env = WebEnv(config)  # its own Chromium: launched with the --host-resolver-rules
    yield env
    env.close()


def internal_connections(servers) -> int:
    return servers["internal"].connections + servers["internal2"].connections


@pytest.mark.browser
def test_page_attacks_reach_no_internal_host(env, servers):
    public, internal = servers["public"], servers["internal"]
    obs, _ = env.reset(options={"task": TaskSpec(id="net/attack", goal="g", start_url=public.url("attack.html"))})
    obs2, *_ = env.step("wait(1.0)")  # fetch / XHR / WebSocket may be refused after the load
    feedback = obs["feedback"] + "; " + obs2["feedback"]
    styles = env.page.evaluate("""() => [getComputedStyle(document.body).backgroundColor,
                                         getComputedStyle(document.getElementById('text')).color]""")
    assert styles == ["rgb(1, 2, 3)", "rgb(4, 5, 6)"]  # the CDN and the named public host served CSS
    assert "/named.css" in public.requests  # fetched at public.test's checked address
    assert env.page.title() == "socket closed"
    inside, inside2 = internal.netloc, servers["internal2"].netloc
    for line in (f"Blocked image request to {inside}: 127.0.0.2 is an internal address",
                 f"Blocked script request to {inside2}: 127.0.0.3 is an internal address",
                 f"Blocked document request to {servers['frame_host'].netloc}: 127.0.0.5 is an internal address",
                 f"Blocked image request to {inside}: a redirect to 127.0.0.2 is an internal address",
                 f"Blocked image request to evil.test:{internal.port}: evil.test resolves to an internal "
                 "address (127.0.0.2)",
                 f"Blocked fetch request to {inside}", f"Blocked xhr request to {inside}",
                 f"Blocked websocket to {inside2}: 127.0.0.3 is an internal address"):
        assert line in feedback, line
    assert internal_connections(servers) == 0
    # Known gap: Chromium opens a TCP connection to a subframe's host before the request is
    # routed (and refused); no HTTP request is sent on it.
    assert servers["frame_host"].requests == []


@pytest.mark.browser
def test_top_level_navigation_stays_on_the_site(env, servers):
    public, cdn, internal = servers["public"], servers["cdn"], servers["internal"]
    cdn_documents = cdn.requests.count("/page2.html")
    # the internal host is even listed as a site: its address still refuses it
    env.reset(options={"task": TaskSpec(id="net/basic", goal="g", start_url=public.url("attack.html"),
                                        allowed_domains=(public.netloc, internal.netloc))})
    obs, *_ = env.step(f'goto("{public.url("__redirect_to")}?url={internal.url("page2.html")}")')
    assert f"Blocked navigation to {internal.netloc}: a redirect to 127.0.0.2 is an internal address" \
        in obs["feedback"]
    obs, *_ = env.step(f'goto("{public.url("__redirect_to")}?url={cdn.url("page2.html")}")')
    assert f"Blocked navigation to {cdn.netloc}: a redirect to outside the allowed domains" in obs["feedback"]
    env.step(f'goto("{public.url("attack.html")}")')  # the refused navigations left an error page
    env.page.evaluate("document.getElementById('off').click()")
    obs, *_ = env.step("wait(0.5)")
    assert f"Blocked navigation to {cdn.netloc}: outside the allowed domains" in obs["feedback"]
    assert not obs["url"].startswith(cdn.base_url)
    assert cdn.requests.count("/page2.html") == cdn_documents  # the off-site page was never fetched
    assert internal_connections(servers) == 0


def test_literal_ip_forms_are_parsed_as_chromium_does():
    # 127.0.0.2 = 0x7f000002 = 2130706434; "127.2" fills the last three bytes with 2
    for form in ("127.0.0.2", "2130706434", "0x7f000002", "0177.0.0.2", "127.2", "0x7f.0.0.2"):
        assert parse_ip_literal(form) == ipaddress.ip_address("127.0.0.2"), form
    assert parse_ip_literal("[::1]") == ipaddress.ip_address("::1")
    for name in ("example.com", "1.2.3.4.5", "4294967296", "09.0.0.1", "256.0.0.1"):
        assert parse_ip_literal(name) is None, name


def test_address_classes_and_resolution():
    policy = AddressPolicy(NetworkPolicyConfig(public_stand_ins=("127.0.0.1/32",)),
                           resolve=lambda host: {"rebind.example": ["93.184.215.14", "10.1.2.3"],
                                                 "site.example": ["93.184.215.14"]}.get(host, []))
    internal = ("10.0.0.1", "172.16.5.4", "192.168.1.1", "100.64.0.1", "169.254.169.254", "127.0.0.2",
                "224.0.0.1", "240.0.0.1", "0.0.0.0", "fd00:ec2::254", "fe80::1", "::1", "::ffff:10.0.0.1")
    for address in internal:
        assert policy.is_internal(ipaddress.ip_address(address)), address
    for address in ("127.0.0.1", "93.184.215.14", "2606:4700::1111"):
        assert not policy.is_internal(ipaddress.ip_address(address)), address
    # one internal answer among public ones is enough to refuse (Chromium may pick either)
    assert policy.refusal("https://rebind.example/") == "rebind.example resolves to an internal address (10.1.2.3)"
    assert policy.refusal("https://site.example/a.css") is None
    assert policy.refusal("https://nowhere.example/") == "nowhere.example does not resolve"
    assert policy.refusal("http://2852039166/") == "2852039166 is an internal address"  # 169.254.169.254


def test_resolution_cache_is_bounded():
    calls = []
    policy = AddressPolicy(NetworkPolicyConfig(), resolve=lambda host: calls.append(host) or ["93.184.215.14"],
                           cache_size=2)
    for host in ("a.example", "b.example", "a.example", "c.example", "b.example"):
        policy.addresses(host)
    # a, b cached; a hit; c evicts b (least recently used); b is resolved again
    assert calls == ["a.example", "b.example", "c.example", "b.example"]


def test_registrable_domains_and_sites():
    assert registrable_domain("www.shop.example") == "shop.example"
    assert registrable_domain("a.b.amazon.co.uk") == "amazon.co.uk"
    assert registrable_domain("127.0.0.1") == "127.0.0.1"
    assert site_domains(("www.shop.example", "127.0.0.1:8080")) == ("www.shop.example", "shop.example",
                                                                  "127.0.0.1:8080")


def test_bad_network_settings_name_the_key():
    with pytest.raises(ValueError, match="subresource_policy must be one of .*'public'.*got 'open'"):
        SafetyConfig(subresource_policy="open")
    with pytest.raises(ValueError, match=r"internal_networks: '10.0.0.0/33' is not a CIDR"):
        NetworkPolicyConfig(internal_networks=("10.0.0.0/33",))
    with pytest.raises(ValueError, match=r"public_stand_ins: 'loopback' is not a CIDR"):
        NetworkPolicyConfig(public_stand_ins=("loopback",))
    with pytest.raises(ValueError, match="resolver_overrides: 'evil.test': 'nowhere' must map"):
        NetworkPolicyConfig(resolver_overrides={"evil.test": "nowhere"})
    with pytest.raises(ValueError, match=r"SafetyConfig.network: unknown keys \['internal'\]"):
        SafetyConfig(network={"internal": ["10.0.0.0/8"]})
    with pytest.raises(ValueError, match="extra_args has .* but safety.network.resolver_overrides needs"):
        WebEnvConfig.from_dict({"browser": {"extra_args": ["--host-resolver-rules=MAP a.test 127.0.0.1"]},
                                "safety": {"network": {"resolver_overrides": OVERRIDES}}})


def test_resolver_overrides_reach_chromium_flags():
    config = WebEnvConfig.from_dict({"safety": {"network": {"resolver_overrides": OVERRIDES}}})
    assert config.browser.extra_args == (
        "--host-resolver-rules=MAP evil.test 127.0.0.2, MAP public.test 127.0.0.1",)
    assert WebEnvConfig().browser.extra_args == ()  # sandbox and MiniWoB++ launch as before


def test_the_live_web_env_runs_under_the_public_policy_unless_its_config_sets_one():
    from webrl.envs.live_web import make_live_web_env

    env = make_live_web_env("find the docs", "http://public.test/")  # no browser starts before reset
    assert env.config.safety.subresource_policy == "public"
    env.close()
    strict = make_live_web_env("g", "http://public.test/", config={"safety": {"subresource_policy": "allowlist"}})
    assert strict.config.safety.subresource_policy == "allowlist"
    strict.close()


def test_network_settings_are_refused_where_the_policy_would_ignore_them():
    import pytest

    from webrl.envs.safety import SafetyConfig

    with pytest.raises(ValueError, match=r"SafetyConfig.network.internal_networks applies only with "
                                         r"subresource_policy='public' \(got 'allowlist'\)"):
        SafetyConfig(network={"internal_networks": ["10.0.0.0/8"]})
    SafetyConfig(network={"resolver_overrides": {"public.test": "127.0.0.1"}})  # Chromium uses it too
    SafetyConfig(subresource_policy="public", network={"internal_networks": ["10.0.0.0/8"]})

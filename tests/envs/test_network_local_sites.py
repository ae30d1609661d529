"""`env.network.local_sites` (issue 54): the user's own sites on loopback or a private network are
one key away under the live-web policy; every other internal address stays refused."""
import pytest

from webrl.envs.network import AddressPolicy, NetworkPolicyConfig


def _refusal(url, *sites):
    return AddressPolicy(NetworkPolicyConfig(local_sites=sites), resolve=lambda host: ["10.1.2.3"]).refusal(url)


def test_the_default_refuses_loopback_and_private_hosts():
    assert _refusal("http://127.0.0.1:8080/") == "127.0.0.1 is an internal address"
    assert _refusal("http://wiki.lan/") == "wiki.lan resolves to an internal address (10.1.2.3)"


def test_a_listed_host_port_is_reached_and_nothing_else():
    sites = ("127.0.0.1:8080",)
    assert _refusal("http://127.0.0.1:8080/shop?q=1", *sites) is None
    assert _refusal("ws://127.0.0.1:8080/socket", *sites) is None
    assert _refusal("http://127.0.0.1:8081/", *sites) == "127.0.0.1 is an internal address"  # another port
    assert _refusal("http://127.0.0.2:8080/", *sites) == "127.0.0.2 is an internal address"  # another host
    assert _refusal("http://169.254.169.254/latest", *sites) == "169.254.169.254 is an internal address"


def test_a_listed_host_without_a_port_is_reached_on_any_port_and_default_ports_match():
    assert _refusal("http://wiki.lan:8000/", "wiki.lan") is None
    assert _refusal("https://wiki.lan/", "WIKI.lan") is None  # entries are lower-cased
    assert _refusal("http://wiki.lan/", "wiki.lan:80") is None  # http's default port is 80
    assert _refusal("https://wiki.lan/", "wiki.lan:80") == "wiki.lan resolves to an internal address (10.1.2.3)"
    assert _refusal("http://[::1]:3000/", "[::1]:3000") is None


@pytest.mark.parametrize("entry", ["http://127.0.0.1:8080", "127.0.0.1/shop", "wiki lan", ""])
def test_an_entry_that_is_not_host_or_host_port_is_refused(entry):
    with pytest.raises(ValueError, match="local_sites: .* must be a host or host:port"):
        NetworkPolicyConfig(local_sites=(entry,))

"""The allowlist enforced by Chromium itself (`webrl.envs.safety.guard_proxy`): a context proxy
that accepts no connection, with the allowlist as its bypass list.

The rules are checked twice: written out by hand for each entry form, and against real Chromium,
where every (allowlist, URL) pair must be reached exactly when `DomainAllowlist.allows_host`
says so (a differential test of the two matchers over loopback hosts and ports).
"""
from __future__ import annotations

import pytest

from webrl.envs.safety import (BLOCKING_PROXY, DomainAllowlist, SafetyConfig, guard_proxy,
                               proxy_bypass_rules)


def test_bypass_rules_for_each_entry_form():
    assert proxy_bypass_rules(["127.0.0.1:8000"]) == "<-loopback>,127.0.0.1:8000"
    assert proxy_bypass_rules([" Shop.test "]) == "<-loopback>,shop.test,*.shop.test"
    assert proxy_bypass_rules(["*.example.com"]) == "<-loopback>,example.com,*.example.com"
    assert proxy_bypass_rules(["127.0.0.2"]) == "<-loopback>,127.0.0.2"  # an IPv4 literal has no subdomains
    assert proxy_bypass_rules(["[::1]"]) == "<-loopback>,http://[::1]:80,https://[::1]:443"
    assert proxy_bypass_rules(["[::1]:8000", "*"]) == "<-loopback>,[::1]:8000,*"
    assert proxy_bypass_rules(["*.example.com:80"]) == "<-loopback>"  # DomainAllowlist matches nothing with it
    assert proxy_bypass_rules([]) == "<-loopback>"  # every request to the blocking proxy
    for unsayable in (["a.test,b.test"], ["<loopback>"], ["a.test;b.test"], ["http://a.test"], ["a.test/x"]):
        assert proxy_bypass_rules(unsayable) is None, unsayable


def test_guard_proxy_only_under_the_allowlist_policy():
    allowlist = SafetyConfig()
    assert guard_proxy(["127.0.0.1:8000"], allowlist) == {"server": BLOCKING_PROXY,
                                                           "bypass": "<-loopback>,127.0.0.1:8000"}
    assert guard_proxy(["127.0.0.1:8000"], SafetyConfig(subresource_policy="any")) is None
    assert guard_proxy(["127.0.0.1:8000"], allowlist, browser_proxied=True) is None
    assert guard_proxy(["127.0.0.1:8000"], allowlist, http_tools=True) is None
    assert guard_proxy(["a.test,b.test"], allowlist) is None


@pytest.mark.browser
def test_chromium_reaches_exactly_what_the_allowlist_allows(chromium, http_server, tmp_path):
    """Hosts: 127.0.0.1 on two ports, 127.0.0.2, and localhost / a.localhost (Chromium resolves
    both to loopback, served here by the first server)."""
    (tmp_path / "index.html").write_text("<p>hi</p>")
    first, second, other = (http_server(tmp_path, "127.0.0.1"), http_server(tmp_path, "127.0.0.1"),
                            http_server(tmp_path, "127.0.0.2"))
    port = first.netloc.rsplit(":", 1)[1]
    netlocs = [first.netloc, second.netloc, other.netloc, f"localhost:{port}", f"a.localhost:{port}"]
    allowlists = [[first.netloc], ["127.0.0.1"], ["localhost"], ["*.localhost"], [f"localhost:{port}"],
                  ["127.0.0.2"], [], ["*"], [first.netloc, other.netloc]]
    disagreements = []
    for entries in allowlists:
        proxy = guard_proxy(entries, SafetyConfig())
        assert proxy is not None
        context = chromium.new_context(proxy=proxy)
        try:
            for netloc in netlocs:
                page = context.new_page()  # a fresh tab: a failed load leaves an error page behind
                try:
                    page.goto(f"http://{netloc}/index.html", timeout=5000)
                    reached = True
                except Exception as error:
                    assert "ERR_PROXY_CONNECTION_FAILED" in str(error), error
                    reached = False
                page.close()
                if reached != DomainAllowlist(entries).allows_host(netloc):
                    disagreements.append((entries, netloc, reached))
        finally:
            context.close()
    assert disagreements == []
    assert len(first.requests) > 0 and len(other.requests) > 0  # both outcomes happened

"""`webrl browser-server` has no open door: beyond loopback it needs a key, a client without the
key is refused (Playwright's own `/json`, which tells its WebSocket path, included), and a worker
with `env.connect_api_key_env` naming the key's variable drives the browser as before.

Servers bind 127.0.0.1; 127.0.0.2 stands for another interface (still loopback: nothing here
leaves the machine). Every server is started by the test and stopped by it."""
from __future__ import annotations

import socket
import threading

import pytest

from webrl.config import ConfigError
from webrl.envs import BrowserSession
from webrl.envs.browser import BrowserConfig, InfraError
from webrl.envs.browser_gate import KeyGate, check_head
from webrl.envs.remote_browser import BrowserServerConfig, start_browser_server

KEY = "a-test-key-of-32-characters-long"
OTHER_INTERFACE = "127.0.0.2"


# -- the bind rule -------------------------------------------------------------------------------
@pytest.mark.parametrize("host", [OTHER_INTERFACE, "0.0.0.0"])
def test_a_bind_beyond_loopback_without_a_key_is_refused_naming_the_key(host, monkeypatch):
    monkeypatch.delenv("WEBRL_BROWSER_API_KEY", raising=False)
    with pytest.raises(ConfigError, match=r"BrowserServerConfig.api_key_env='WEBRL_BROWSER_API_KEY': a browser "
                                          rf"server on host='{host}' \(not loopback\) needs a key.*"
                                          r"export WEBRL_BROWSER_API_KEY="):
        BrowserServerConfig(host=host)
    with pytest.raises(ConfigError, match=r"api_key_env='': .*needs a key.*name a variable"):
        BrowserServerConfig(host=host, api_key_env="")
    # the function refuses too, before it starts anything
    with pytest.raises(ValueError, match=r"start_browser_server\(api_key=...\): .*needs a key"):
        start_browser_server(host=host)


def test_a_key_opens_any_interface_and_loopback_needs_none(monkeypatch):
    monkeypatch.delenv("WEBRL_BROWSER_API_KEY", raising=False)
    for host in ("127.0.0.1", "localhost", "::1"):
        assert BrowserServerConfig(host=host).api_key() == ""
    monkeypatch.setenv("MY_BROWSER_KEY", KEY)
    assert BrowserServerConfig(host="0.0.0.0", api_key_env="MY_BROWSER_KEY").api_key() == KEY


def test_a_short_key_is_refused(monkeypatch):
    monkeypatch.setenv("WEBRL_BROWSER_API_KEY", "hunter2")
    with pytest.raises(ConfigError, match=r"api_key_env='WEBRL_BROWSER_API_KEY': .* has 7 characters; use at least 16"):
        BrowserServerConfig()


# -- the gate, in front of a stand-in upstream (no browser) --------------------------------------
def test_check_head_admits_only_the_key_on_the_path():
    def head(path: str, *auth: str) -> bytes:
        lines = [f"GET {path} HTTP/1.1", "Host: 10.0.0.5:3000", "Upgrade: websocket", *auth]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def status(reply: bytes) -> str:
        return reply.split(b"\r\n")[0].decode()

    def reply(request: bytes) -> str:
        return status(check_head(request, "/webrl", KEY, 4000, "/up")[0])

    bearer = f"Authorization: Bearer {KEY}"
    assert reply(head("/webrl")) == "HTTP/1.1 401 Unauthorized"
    assert reply(head("/webrl", "Authorization: Bearer wrong")) == "HTTP/1.1 401 Unauthorized"
    assert reply(head("/webrl", bearer, bearer)) == "HTTP/1.1 401 Unauthorized"  # one key, not a choice of keys
    assert reply(head("/json", bearer)) == "HTTP/1.1 404 Not Found"  # Playwright's path-telling page
    assert reply(b"nonsense\r\n\r\n") == "HTTP/1.1 400 Bad Request"
    reply, forwarded = check_head(head("/webrl?browser=chromium", bearer), "/webrl", KEY, 4000, "/up")
    # path rewritten to the upstream's (query kept), Host to the loopback upstream, the key dropped
    assert reply == b"" and forwarded == (b"GET /up?browser=chromium HTTP/1.1\r\nHost: 127.0.0.1:4000\r\n"
                                          b"Upgrade: websocket\r\n\r\n")


def _exchange(port: int, request: bytes) -> bytes:
    with socket.create_connection((OTHER_INTERFACE, port), timeout=10) as client:
        client.sendall(request)
        chunks = []
        while chunk := client.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_the_gate_relays_a_keyed_client_and_refuses_the_others():
    upstream = socket.socket()
    upstream.bind(("127.0.0.1", 0))
    upstream.listen(4)
    received: list[bytes] = []

    def serve_once() -> None:  # answers one connection, after the forwarded head and 4 body bytes
        connection, _ = upstream.accept()
        with connection:
            data = b""
            while not data.endswith(b"\r\n\r\nping"):
                data += connection.recv(65536)
            received.append(data)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\npong")

    thread = threading.Thread(target=serve_once, daemon=True)
    thread.start()
    gate = KeyGate(OTHER_INTERFACE, 0, "/webrl", KEY, upstream.getsockname()[1], "/up").start()
    try:
        assert _exchange(gate.port, b"GET /webrl HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 401")
        assert _exchange(gate.port, b"GET /json HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 401")
        keyed = f"GET /webrl HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\r\nping".encode()
        assert _exchange(gate.port, keyed).endswith(b"\r\n\r\npong")
        thread.join(10)
        assert received == [f"GET /up HTTP/1.1\r\nHost: 127.0.0.1:{upstream.getsockname()[1]}\r\n\r\nping".encode()]
    finally:
        gate.close()
        upstream.close()
    with pytest.raises(ConnectionRefusedError):  # closed means no longer listening
        socket.create_connection((OTHER_INTERFACE, gate.port), timeout=5).close()


# -- a real keyed browser server ------------------------------------------------------------------
@pytest.mark.browser
@pytest.mark.slow
def test_a_keyed_server_refuses_clients_without_the_key(monkeypatch):
    monkeypatch.delenv("WEBRL_BROWSER_API_KEY", raising=False)
    monkeypatch.setenv("WRONG_BROWSER_KEY", "not-the-key-but-long-enough")
    monkeypatch.setenv("MY_BROWSER_KEY", KEY)
    server = start_browser_server(port=0, api_key=KEY)
    sessions = [BrowserSession(BrowserConfig(connect_url=server.endpoint, connect_api_key_env=name),
                               connect_timeout_s=10.0)
                for name in ("WEBRL_BROWSER_API_KEY", "WRONG_BROWSER_KEY", "MY_BROWSER_KEY")]
    try:
        for refused in sessions[:2]:
            with pytest.raises(InfraError, match=rf"connect_url='{server.endpoint}'.*401 Unauthorized"):
                refused.start()
        # Playwright's /json would tell its WebSocket path: behind the gate it is refused too
        reply = _raw_get(server.port, "/json")
        assert reply.startswith(b"HTTP/1.1 401") and server.gate.upstream_path.encode() not in reply
        keyed = sessions[2]
        keyed.start()
        context = keyed.browser.new_context()
        page = context.new_page()
        page.set_content("<button>Press me</button>")
        assert page.inner_text("button") == "Press me" and keyed.is_alive()
        context.close()
    finally:
        for session in sessions:
            session.close()
        server.stop()


def _raw_get(port: int, path: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        return client.recv(65536)

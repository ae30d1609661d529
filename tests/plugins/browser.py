"""Session fixtures for Chromium and local HTTP servers (owned by the envs work).

Fixtures:
  browser_session   a started `webrl.envs.BrowserSession` (Debian chromium unless configured),
                    shared by the whole run; `browser_session.browser` is the Playwright Browser.
  chromium          that Playwright `Browser`.
  http_server       factory: `http_server(folder, host="127.0.0.1")` -> LocalHTTPServer serving
                    `folder` on a free port (stopped at the end of the run).
  fixture_server    LocalHTTPServer for tests/envs/fixtures on 127.0.0.1.
  outside_server    the same folder on 127.0.0.2: the "outside" host of the allowlist tests
                    (a loopback address, so tests never send traffic off the machine).

`start_http_server` works without pytest (benchmarks). Besides files, the server answers:
  /__redirect/<n>        302 to /__redirect/<n-1>; /__redirect/0 -> 302 to /basic.html
  /__redirect_to?url=U   302 to U
  /__download            a file with Content-Disposition: attachment
  /__slow?ms=N           an HTML page after N milliseconds
and records every request path in `LocalHTTPServer.requests`.
"""
from __future__ import annotations

import functools
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Optional
from urllib.parse import parse_qs, urlsplit

import pytest

FIXTURES_DIR = Path(__file__).resolve().parents[1] / "envs" / "fixtures"


class _Handler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:
        return None

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):  # the browser dropped the connection
            pass

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def do_GET(self) -> None:
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        if parts.path == "/favicon.ico":
            return self._html(b"")
        if parts.path.startswith("/__redirect/"):
            n = int(parts.path.rsplit("/", 1)[1] or 0)
            return self._redirect("/basic.html" if n <= 0 else f"/__redirect/{n - 1}")
        if parts.path == "/__redirect_to":
            return self._redirect(query.get("url", ["/basic.html"])[0])
        if parts.path == "/__download":
            body = b"not for you\n" * 100
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Disposition", 'attachment; filename="payload.bin"')
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return None
        if parts.path == "/__slow":
            time.sleep(int(query.get("ms", ["500"])[0]) / 1000)
            return self._html(b"<title>Slow</title><p>slow page</p>")
        return super().do_GET()

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _html(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class LocalHTTPServer:
    """A threaded HTTP server for `directory` on `host` and a free port."""

    def __init__(self, directory: Path | str, host: str = "127.0.0.1"):
        self.directory = Path(directory)
        handler = functools.partial(_Handler, directory=str(self.directory))
        self.httpd = ThreadingHTTPServer((host, 0), handler)
        self.httpd.daemon_threads = True
        self.httpd.requests = []  # type: ignore[attr-defined]
        self.host, self.port = host, self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name=f"http-{host}:{self.port}",
                                        daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def netloc(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def requests(self) -> list[str]:
        return self.httpd.requests  # type: ignore[attr-defined]

    def url(self, path: str = "") -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def start_http_server(directory: Path | str = FIXTURES_DIR, host: str = "127.0.0.1") -> LocalHTTPServer:
    return LocalHTTPServer(directory, host)


@pytest.fixture(scope="session")
def http_server() -> Callable[..., LocalHTTPServer]:
    servers: list[LocalHTTPServer] = []

    def start(directory: Path | str = FIXTURES_DIR, host: str = "127.0.0.1") -> LocalHTTPServer:
        server = LocalHTTPServer(directory, host)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def fixture_server(http_server) -> LocalHTTPServer:
    return http_server(FIXTURES_DIR, "127.0.0.1")


@pytest.fixture(scope="session")
def outside_server(http_server) -> LocalHTTPServer:
    return http_server(FIXTURES_DIR, "127.0.0.2")


@pytest.fixture(scope="session")
def browser_session():
    from webrl.envs.browser import BrowserSession

    session = BrowserSession()
    session.start()
    yield session
    session.close()


@pytest.fixture(scope="session")
def chromium(browser_session):
    return browser_session.browser


def fixture_url(server: LocalHTTPServer, name: str, query: Optional[str] = None) -> str:
    return server.url(name) + (f"?{query}" if query else "")

"""A key check in front of a Playwright browser server (`webrl browser-server` beyond loopback).

Playwright's `launch-server` has no authentication, and a secret WebSocket path is no lock: its
HTTP server answers `GET /json` with `{"wsEndpointPath": ...}` to anyone who asks. So a keyed
server runs Playwright on 127.0.0.1 (a random port and path) and `KeyGate` listens on the
address the user asked for: it reads each connection's HTTP request head and admits only a
WebSocket upgrade to `path` that carries `Authorization: Bearer <key>` (the header
`BrowserSession` sends from the variable `env.connect_api_key_env` names). An admitted request
is passed on with its path rewritten to Playwright's, its Host set to the loopback address and
its Authorization header removed; after that the gate copies bytes both ways. Anything else gets
401 (no key or a wrong one) or 404 (another path, `/json` included) and is closed.

The gate runs an asyncio loop on a daemon thread of the process that started the server, so
`RemoteBrowserProcess.kill()` / `stop()` close it with the server (a killed browser pod drops
its clients and frees its port).
"""
from __future__ import annotations

import asyncio
import hmac
import threading
from typing import Optional
from urllib.parse import urlsplit

HEAD_LIMIT_BYTES = 64 * 1024
"""Largest request head read before a connection is refused (a WebSocket upgrade is < 2 KiB)."""
HEAD_TIMEOUT_S = 10.0
"""A client that has not sent its request head within this long is closed."""
UPSTREAM_HOST = "127.0.0.1"


def _response(status: str, message: str) -> bytes:
    body = message.encode()
    return (f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode() + body


UNAUTHORIZED = _response("401 Unauthorized", "this browser server needs 'Authorization: Bearer <key>' "
                                             "(env.connect_api_key_env names the variable holding it)\n")
NOT_FOUND = _response("404 Not Found", "no such endpoint\n")
BAD_REQUEST = _response("400 Bad Request", "malformed request\n")


def check_head(head: bytes, path: str, key: str, upstream_port: int, upstream_path: str) -> tuple[bytes, bytes]:
    """(reply, forwarded head) for one request head: reply is b"" when the request is admitted,
    and then the forwarded head is the one to send to Playwright; otherwise the refusal to send."""
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
        headers = [line.split(":", 1) for line in lines[1:] if line]
        headers = [(name.strip(), value.strip()) for name, value in headers]
    except ValueError:
        return BAD_REQUEST, b""
    sent = [value for name, value in headers if name.lower() == "authorization"]
    expected = f"Bearer {key}".encode()
    if len(sent) != 1 or not hmac.compare_digest(sent[0].encode("latin-1"), expected):
        return UNAUTHORIZED, b""
    parts = urlsplit(target)
    if parts.path != path:
        return NOT_FOUND, b""
    query = f"?{parts.query}" if parts.query else ""
    kept = [f"{name}: {value}" for name, value in headers if name.lower() not in ("authorization", "host")]
    forwarded = [f"{method} {upstream_path}{query} {version}", f"Host: {UPSTREAM_HOST}:{upstream_port}", *kept]
    return b"", ("\r\n".join(forwarded) + "\r\n\r\n").encode("latin-1")


class KeyGate:
    """Listens on `host:port` (0 = a free port, see `port` after `start`) and admits keyed
    WebSocket upgrades to `path`, forwarded to a Playwright server at 127.0.0.1:`upstream_port`
    `upstream_path` (module docstring)."""

    def __init__(self, host: str, port: int, path: str, key: str, upstream_port: int, upstream_path: str):
        if not key:
            raise ValueError("KeyGate needs a non-empty key")
        self.host, self.port, self.path, self._key = host, port, path, key
        self.upstream_port, self.upstream_path = upstream_port, upstream_path
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._server: Optional[asyncio.AbstractServer] = None
        self._tasks: set[asyncio.Task] = set()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "KeyGate":
        """Bind and serve on a daemon thread; returns once listening (raises OSError if the bind fails)."""
        # bound from the gate's own thread: the caller's may already run a loop (Playwright's sync API)
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="webrl-browser-gate", daemon=True)
        self._thread.start()
        bind = asyncio.start_server(self._handle, self.host, self.port, limit=HEAD_LIMIT_BYTES, reuse_address=True)
        try:
            self._server = asyncio.run_coroutine_threadsafe(bind, loop).result(timeout=30.0)
        except BaseException:
            self._stop_loop()
            raise
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def close(self) -> None:
        """Stop listening and drop every open connection (idempotent)."""
        if self._loop is None:
            return

        async def shut() -> None:
            assert self._server is not None
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._server.wait_closed()

        try:
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(timeout=10.0)
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10.0)
        loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        upstream_writer: Optional[asyncio.StreamWriter] = None
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError):
                writer.write(BAD_REQUEST)
                return
            refusal, forwarded = check_head(head, self.path, self._key, self.upstream_port, self.upstream_path)
            if refusal:
                writer.write(refusal)
                return
            upstream_reader, upstream_writer = await asyncio.open_connection(UPSTREAM_HOST, self.upstream_port)
            upstream_writer.write(forwarded)
            await asyncio.gather(_pump(reader, upstream_writer), _pump(upstream_reader, writer))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            for stream in (writer, upstream_writer):
                if stream is not None:
                    stream.close()


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy `source` to `sink` until either side closes; then close `sink` so the other pump ends."""
    try:
        while chunk := await source.read(65536):
            sink.write(chunk)
            await sink.drain()
    finally:
        sink.close()

"""`ServerHTTP` after a 500: uvicorn closes the kept-alive connection when the app raised (vLLM's
weight routes answer a worker's error that way), and the next request must not read that close
as the server being down."""
import socket
import threading

import pytest

from webrl.chat.server_http import ServerEngineError, ServerHTTP, ServerUnreachableError


class ClosingServer:
    """A raw HTTP/1.1 server on 127.0.0.1: answers `first` (a status) to the first request on a
    connection, keeps the connection open, and closes it without an answer when a second request
    comes on it (what a client meets when it reuses the connection before the close arrives);
    every later connection's first request gets 200 {}."""

    def __init__(self, first_status: int):
        self.first_status, self.requests = first_status, []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._conn, args=(conn,), daemon=True).start()

    def _conn(self, conn):
        served = 0
        with conn:
            while True:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                self.requests.append(data.split(b" ")[1].decode())
                if served == 1:
                    return  # the close of a connection the server gave up after its 500
                status = self.first_status if len(self.requests) == 1 else 200
                body = b"{}"
                conn.sendall(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (status, len(body), body))
                served += 1

    def close(self):
        self.sock.close()


def test_a_request_after_a_500_is_sent_again_on_a_new_connection():
    server = ClosingServer(500)
    http = ServerHTTP([server.url], 10.0)
    with pytest.raises(ServerEngineError, match="/pause: HTTP 500"):
        http.post(server.url, "/pause", {})
    assert http.request(server.url, "POST", "/resume", want_json=False) is None
    # /resume reached the server twice: on the closed connection, then on a new one
    assert server.requests == ["/pause", "/resume", "/resume"]
    server.close()


def test_without_a_500_before_it_a_closed_connection_is_the_server_down():
    server = ClosingServer(200)
    http = ServerHTTP([server.url], 10.0)
    assert http.post(server.url, "/a", {}) == {}
    with pytest.raises(ServerUnreachableError, match="/b: server unreachable"):
        http.post(server.url, "/b", {})
    assert server.requests == ["/a", "/b"]  # not sent again
    server.close()

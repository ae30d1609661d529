"""A stub OpenAI-compatible /v1/chat/completions server on 127.0.0.1 for tests.

    with chat_server(lambda path, body: {"choices": [...]}) as url:   # url = http://127.0.0.1:PORT/v1
        ...

`respond(path, body)` gets the request path and JSON body and returns the JSON reply (a dict).
"""
from __future__ import annotations

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator


def chat_reply(content: str, **extra: Any) -> dict:
    """The reply body of one assistant message (`extra` goes into the choice, e.g. logprobs)."""
    return {"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": "stop", **extra}]}


@contextlib.contextmanager
def chat_server(respond: Callable[[str, dict], dict]) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            data = json.dumps(respond(self.path, body)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, name="chat-stub", daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()

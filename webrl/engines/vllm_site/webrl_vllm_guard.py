"""A key on every route of a launched vLLM server that listens beyond loopback.

Loaded by the server itself (`--middleware webrl_vllm_guard.KeyOnEveryRoute`, with this folder
on the server's PYTHONPATH: `webrl.engines.vllm_launch`); it imports nothing of webrl, because
it runs in vLLM's own environment.

Why: vLLM 0.32.0's `--api-key` guards only paths under /v1, /v2, /inference and /cohere
(entrypoints/serve/middleware/authenticate.py `GUARDED_PREFIX`). The dev routes a run drives
(/pause, /collective_rpc, /update_weight_version, /init_weight_transfer_engine, /update_weights,
...) take no key, so anyone who reaches the port could load weights into the server or run a
method on its workers. This middleware asks every request except GET /health (which reveals
nothing and is what the launcher polls) for `Authorization: Bearer <key>`, the key read from
$WEBRL_VLLM_GUARD_KEY at start-up; a server started without one refuses to start.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os

KEY_VARIABLE = "WEBRL_VLLM_GUARD_KEY"
OPEN = {("GET", "/health")}


class KeyOnEveryRoute:
    """Pure ASGI middleware: 401 for any HTTP or websocket request without the bearer key."""

    def __init__(self, app, key: str = "") -> None:
        key = key or os.environ.get(KEY_VARIABLE, "")
        if not key:
            raise RuntimeError(f"webrl_vllm_guard: ${KEY_VARIABLE} is empty; the server would listen without a key")
        self.app = app
        self._digest = hashlib.sha256(key.encode()).digest()

    def allowed(self, method: str, path: str, authorization: str) -> bool:
        if (method, path) in OPEN or method == "OPTIONS":
            return True
        scheme, _, token = authorization.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            hashlib.sha256(token.encode()).digest(), self._digest)

    async def __call__(self, scope, receive, send) -> None:
        if scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        path = scope.get("path", "").removeprefix(scope.get("root_path", "")) or "/"
        if self.allowed(scope.get("method", "GET"), path, headers.get("authorization", "")):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": "Unauthorized: this server asks for a bearer key on every route"}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

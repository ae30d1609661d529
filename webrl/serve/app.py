"""`webrl serve`: an OpenAI-compatible `/v1/chat/completions` server for a local Qwen-VL model.

Built on FastAPI + uvicorn. Endpoints:

    POST /v1/chat/completions   OpenAI chat request -> chat.completion (non-streaming)
    GET  /v1/models             the one served model
    GET  /health                {"status": "ok"} (no key needed)
    POST /generate, weight updates (disk and distributed), GET /model_info, GET /server_info
                                SGLang's native token-in/token-out subset (`webrl.serve.native`),
                                for engines with a local model

Requests carry text and images as OpenAI content parts; images must be inline
`data:image/png|jpeg|webp;base64,...` URLs (the server never fetches a remote URL: it may run
offline and must not become a proxy). Sampling: temperature, top_p, top_k (vLLM's extension),
max_tokens / max_completion_tokens, stop, seed; n must be 1 and stream false. With
`logprobs: true` each generated token comes back with its log-prob (`top_logprobs` is not
supported); with vLLM's `return_tokens_as_token_ids: true` tokens read "token_id:N", so a
policy endpoint (`webrl.policy.endpoint.EndpointPolicy`) gets exact ids and log-probs.

Safety defaults: binds 127.0.0.1 (`serve_main` refuses any other host while the key below is
unset); a bearer key is required when the environment variable named by `api_key_env` is set;
request bytes, images per request, pixels per image, prompt tokens and new tokens are capped.
The weight routes take the admin key when
`admin_api_key_env` names a set variable (else the API key). Every rejected request gets a 4xx with an OpenAI-style body
`{"error": {"message", "type", "param", "code"}}` saying what was wrong.
"""
from __future__ import annotations

import hmac
import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Optional

from fastapi import Request  # module level: FastAPI resolves the endpoints' string annotations here

from webrl.chat.local import ChatEngine
from webrl.config import LOOPBACK_HOSTS
from webrl.chat.messages import SamplingParams
from webrl.serve.protocol import RequestError, parse_chat_request


@dataclass
class ServeConfig:
    model_path: str = ""
    """Checkpoint folder of a Qwen2.5-VL / Qwen3-VL model (required by `serve_main`)."""
    served_model_name: str = ""
    """Name clients pass as `model`; empty = the checkpoint folder's name."""
    host: str = "127.0.0.1"
    """Interface to bind. Anything but 127.0.0.1, localhost or ::1 exposes the model to the
    network and is refused unless `api_key_env`'s variable holds a key."""
    port: int = 8000
    """TCP port; 0 = any free port (printed at start)."""
    api_key_env: str = "WEBRL_SERVE_API_KEY"
    """Environment variable holding the bearer key; when it is set and non-empty, every /v1
    request must send `Authorization: Bearer <key>`. The key itself never goes in a config."""
    admin_api_key_env: str = "WEBRL_SERVE_ADMIN_API_KEY"
    """Environment variable holding the admin key (SGLang's `--admin-api-key`); when it is set,
    the weight-update routes accept only `Authorization: Bearer <admin key>` and the other
    routes keep `api_key_env`'s key."""
    max_request_bytes: int = 32 * 1024 * 1024
    """Largest request body accepted (413 above)."""
    max_images: int = 64
    """Most images in one request (400 above)."""
    max_image_pixels: int = 4096 * 4096
    """Most pixels (width x height) of one decoded image (400 above)."""
    max_prompt_tokens: int = 32768
    """Longest prompt after templating and image expansion (400 above)."""
    max_new_tokens: int = 4096
    """Largest `max_tokens` a request may ask for (400 above)."""
    default_max_tokens: int = 512
    """`max_tokens` when the request gives none."""
    dtype: str = "float32"
    """Model dtype: float32 | bfloat16 | float16."""
    device: str = ""
    """Device for the model ("cpu", "cuda", "cuda:1"); empty = where it loads (CPU)."""
    log_level: str = "warning"
    """uvicorn log level: critical | error | warning | info | debug."""
    image_min_pixels: int = 0
    image_max_pixels: int = 0
    """Pixel bounds the native /generate resizes images to before expanding each image's single
    `<|image_pad|>` (SGLang's `--mm-process-config '{"image": {"min_pixels", "max_pixels"}}'`);
    0 = the checkpoint's image processor's. A client must count image tokens at the same bounds."""

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"ServeConfig.port must be in [0, 65535], got {self.port}")
        for name in ("max_request_bytes", "max_images", "max_image_pixels", "max_prompt_tokens",
                     "max_new_tokens", "default_max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"ServeConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.default_max_tokens > self.max_new_tokens:
            raise ValueError(f"ServeConfig.default_max_tokens ({self.default_max_tokens}) must be <= "
                             f"max_new_tokens ({self.max_new_tokens})")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"ServeConfig.dtype must be float32 | bfloat16 | float16, got {self.dtype!r}")
        if self.image_min_pixels < 0 or self.image_max_pixels < 0 or (
                self.image_max_pixels and self.image_min_pixels > self.image_max_pixels):
            raise ValueError(f"ServeConfig.image_min_pixels / image_max_pixels must be >= 0 with min <= max "
                             f"(0 = the checkpoint's), got {self.image_min_pixels}, {self.image_max_pixels}")
        if self.log_level not in ("critical", "error", "warning", "info", "debug"):
            raise ValueError(f"ServeConfig.log_level must be critical | error | warning | info | debug, "
                             f"got {self.log_level!r}")

    def api_key(self) -> str:
        return os.environ.get(self.api_key_env, "") if self.api_key_env else ""

    def admin_api_key(self) -> str:
        return os.environ.get(self.admin_api_key_env, "") if self.admin_api_key_env else ""


def _error(status: int, message: str, param: Optional[str] = None, code: Optional[str] = None):
    from fastapi.responses import JSONResponse

    kind = {401: "authentication_error", 404: "not_found_error", 413: "invalid_request_error",
            429: "rate_limit_error"}.get(status, "invalid_request_error" if status < 500 else "server_error")
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}},
                        status_code=status)


async def _read_body(request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise RequestError(400, "invalid Content-Length header")
        if int(declared) > limit:
            raise RequestError(413, f"request body has {declared} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(engine: ChatEngine, config: Optional[ServeConfig] = None):
    """The FastAPI app serving `engine` under `config`'s limits and key."""
    from fastapi import FastAPI
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException as StarletteHTTPException

    config = config or ServeConfig()
    model_name = config.served_model_name or engine.model_name
    key = config.api_key()
    app = FastAPI(title="webrl serve", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request, exc):  # unknown routes / methods in the same error format
        return _error(exc.status_code, str(exc.detail))

    def _bearer(request, want: str) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), want.encode())

    def _authorised(request) -> bool:
        return not key or _bearer(request, key)

    admin_key = config.admin_api_key()

    def _admin(request) -> bool:  # as SGLang: with an admin key, only it opens the weight routes
        return _bearer(request, admin_key) if admin_key else _authorised(request)

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    from webrl.serve.native import NativeBackend, mount_native_routes

    native = NativeBackend.from_chat_engine(engine, config.model_path,
                                           (config.image_min_pixels, config.image_max_pixels))
    if native is not None:  # a local model: SGLang-native /generate, weight updates (webrl.serve.native)
        mount_native_routes(app, native, config, _authorised, _error, _read_body, _admin)

    @app.get("/server_info")
    async def server_info(request: Request):  # the SGLang fields a client reads; one process, no TP
        if not _authorised(request):
            return _error(401, "missing or wrong bearer key (send 'Authorization: Bearer <key>')")
        return {"model_path": config.model_path, "tp_size": 1, "dp_size": 1, "host": config.host,
                "port": config.port, "version": "webrl serve"}

    @app.get("/v1/models")
    async def models(request: Request):
        if not _authorised(request):
            return _error(401, "missing or wrong bearer key (send 'Authorization: Bearer <key>')")
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "webrl"}]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        if not _authorised(request):
            return _error(401, "missing or wrong bearer key (send 'Authorization: Bearer <key>')")
        try:
            body = await _read_body(request, config.max_request_bytes)
            parsed = parse_chat_request(body, config, model_name)
            prompt = await run_in_threadpool(engine.prepare, parsed.messages)
            if prompt.num_tokens > config.max_prompt_tokens:
                raise RequestError(400, f"the prompt has {prompt.num_tokens} tokens; the limit is "
                                        f"{config.max_prompt_tokens}", "messages", "context_length_exceeded")
            completion = await run_in_threadpool(engine.generate, prompt, parsed.sampling)
        except RequestError as e:
            return _error(e.status, e.message, e.param, e.code)
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": completion.text},
                                  "finish_reason": completion.finish_reason}
        if parsed.sampling.logprobs:
            names = ([f"token_id:{i}" for i in completion.token_ids] if parsed.tokens_as_ids
                     else completion.tokens)
            choice["logprobs"] = {"content": [{"token": t, "logprob": lp, "bytes": None, "top_logprobs": []}
                                              for t, lp in zip(names, completion.logprobs)]}
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model_name, "choices": [choice],
            "usage": {"prompt_tokens": completion.prompt_tokens,
                      "completion_tokens": completion.completion_tokens,
                      "total_tokens": completion.prompt_tokens + completion.completion_tokens},
        }

    return app


class ServerThread:
    """Run an ASGI app with uvicorn in a background thread (tests, in-process judges).

        with ServerThread(app) as server:      # port 0: any free port
            client.post(server.url + "/v1/chat/completions", ...)
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        import socket

        import uvicorn

        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.host, self.port = host, self._sock.getsockname()[1]
        config = uvicorn.Config(app, log_level=log_level, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        daemon=True, name=f"webrl-serve-{self.port}")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> "ServerThread":
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server on {self.url} did not start within {timeout_s} s")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def serve_main(config: ServeConfig) -> int:
    """Entry point of `webrl serve`: load `config.model_path` and serve it until interrupted.

    Prints `webrl serve: model <name> on http://<host>:<port>/v1` once the socket is bound
    (with port=0 the port is the one the system picked) and then blocks.
    """
    import socket

    import uvicorn

    from webrl.chat.local import LocalChatEngine

    if not config.model_path:
        raise ValueError("ServeConfig.model_path is required: the checkpoint folder to serve")
    if config.host not in LOOPBACK_HOSTS and not config.api_key():
        # refused before the model loads: beyond loopback anyone who reaches the port could use
        # the model and, through the weight routes, replace it
        named = (f"export {config.api_key_env}=<key>" if config.api_key_env
                 else "set api_key_env to a variable holding a key")
        raise ValueError(f"webrl serve: host={config.host!r} is not loopback and needs a key: {named} "
                         f"(api_key_env names the variable), or bind 127.0.0.1")
    engine = LocalChatEngine.from_pretrained(config.model_path, config.served_model_name,
                                             config.dtype, config.device or None)
    app = create_app(engine, config)
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((config.host, config.port))
    port = sock.getsockname()[1]
    print(f"webrl serve: model {config.served_model_name or engine.model_name} on "
          f"http://{config.host}:{port}/v1", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level=config.log_level, lifespan="off"))
    server.run(sockets=[sock])
    return 0


__all__ = ["ServeConfig", "create_app", "ServerThread", "serve_main", "SamplingParams"]

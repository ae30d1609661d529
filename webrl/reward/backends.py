"""Judge backends: where a judge's chat messages go.

    OpenAIChatBackend(OpenAIBackendConfig(base_url=..., model=...))   any chat-completions server
    TransformersBackend(LocalChatEngine.from_pretrained(path))        in-process Qwen-VL model
    ScriptedBackend(lambda messages: "Verdict: SUCCESS")              deterministic, for tests

Every backend answers `chat(messages, max_tokens=, temperature=) -> Completion` or raises
`JudgeBackendError(category, message)`; judges turn that into a dropped sample with the
category as the drop reason (judge_timeout, judge_http_error, judge_connection_error,
judge_bad_response), never a 0 reward. `identity` names the model behind the backend and is
part of the verdict cache key, so two judge models never share cached verdicts.
"""
from __future__ import annotations

import base64
import io
import os
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence

from webrl.serve.chat import ChatMessage, Completion, SamplingParams
from webrl.types import Image


class JudgeBackendError(Exception):
    """The backend could not produce a reply. `category` becomes the drop reason's category."""

    def __init__(self, category: str, message: str):
        super().__init__(f"{category}: {message}")
        self.category, self.message = category, message


class ChatBackend(Protocol):
    identity: str

    def chat(self, messages: Sequence[ChatMessage], *, max_tokens: int, temperature: float) -> Completion: ...


def image_to_jpeg_base64(image: Image, quality: int = 90) -> str:
    """Base64 of the image as JPEG (JPEG bytes pass through unchanged; PNG is re-encoded)."""
    if image.format == "jpeg":
        data = image.data
    else:
        buf = io.BytesIO()
        image.to_pil().save(buf, format="JPEG", quality=quality)
        data = buf.getvalue()
    return base64.b64encode(data).decode("ascii")


def to_openai_messages(messages: Sequence[ChatMessage], jpeg_quality: int = 90) -> list[dict[str, Any]]:
    """OpenAI content-part messages with images as `data:image/jpeg;base64,...` URLs."""
    out = []
    for m in messages:
        if all(isinstance(p, str) for p in m.content):
            out.append({"role": m.role, "content": "".join(m.content)})
            continue
        parts = []
        for p in m.content:
            if isinstance(p, Image):
                url = f"data:image/jpeg;base64,{image_to_jpeg_base64(p, jpeg_quality)}"
                parts.append({"type": "image_url", "image_url": {"url": url}})
            else:
                parts.append({"type": "text", "text": p})
        out.append({"role": m.role, "content": parts})
    return out


@dataclass
class OpenAIBackendConfig:
    base_url: str = "http://127.0.0.1:8000/v1"
    """Server root including `/v1`; requests go to `<base_url>/chat/completions`."""
    model: str = ""
    """Model name sent in each request (e.g. "gpt-4.1", "o4-mini", or the name `webrl serve` prints)."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the API key; unset or empty = no Authorization header."""
    timeout_s: float = 120.0
    """Per-attempt timeout in seconds, applied to connecting and to each read (httpx semantics)."""
    max_retries: int = 3
    """Retries after a timeout, connection error, 429 or 5xx (other 4xx are not retried)."""
    backoff_s: float = 1.0
    """First retry waits about this long; each further retry doubles it (with jitter)."""
    backoff_max_s: float = 30.0
    """Longest wait between retries."""
    max_concurrency: int = 16
    """Most requests in flight at once from this backend (shared by all threads)."""
    jpeg_quality: int = 90
    """JPEG quality of images sent to the server."""

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"OpenAIBackendConfig.base_url must start with http:// or https://, got {self.base_url!r}")
        if self.timeout_s <= 0:
            raise ValueError(f"OpenAIBackendConfig.timeout_s must be > 0, got {self.timeout_s}")
        if self.max_retries < 0:
            raise ValueError(f"OpenAIBackendConfig.max_retries must be >= 0, got {self.max_retries}")
        if self.backoff_s < 0 or self.backoff_max_s < 0:
            raise ValueError("OpenAIBackendConfig.backoff_s and backoff_max_s must be >= 0")
        if self.max_concurrency < 1:
            raise ValueError(f"OpenAIBackendConfig.max_concurrency must be >= 1, got {self.max_concurrency}")
        if not 1 <= self.jpeg_quality <= 100:
            raise ValueError(f"OpenAIBackendConfig.jpeg_quality must be in [1, 100], got {self.jpeg_quality}")


_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class OpenAIChatBackend:
    """A chat-completions client (httpx) with timeout, retries with backoff and a concurrency cap."""

    def __init__(self, config: OpenAIBackendConfig, sleep: Callable[[float], None] = time.sleep):
        import httpx

        self.config = config
        self.identity = f"openai:{config.base_url.rstrip('/')}:{config.model}"
        self._slots = threading.BoundedSemaphore(config.max_concurrency)
        self._sleep = sleep
        self._client = httpx.Client(timeout=config.timeout_s, trust_env=False,
                                    limits=httpx.Limits(max_connections=config.max_concurrency))
        self.stats = {"requests": 0, "retries": 0}
        self._stats_lock = threading.Lock()

    def _count(self, name: str) -> None:
        with self._stats_lock:
            self.stats[name] += 1

    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.config.api_key_env, "") if self.config.api_key_env else ""
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _wait(self, attempt: int, retry_after: Optional[str]) -> None:
        delay = min(self.config.backoff_max_s, self.config.backoff_s * 2 ** attempt) * (0.5 + random.random() / 2)
        if retry_after and retry_after.replace(".", "", 1).isdigit():
            delay = min(self.config.backoff_max_s, max(delay, float(retry_after)))
        self._count("retries")
        self._sleep(delay)

    def chat(self, messages: Sequence[ChatMessage], *, max_tokens: int, temperature: float) -> Completion:
        import httpx

        payload = {"model": self.config.model, "messages": to_openai_messages(messages, self.config.jpeg_quality),
                   "max_tokens": max_tokens, "temperature": temperature}
        url = self.config.base_url.rstrip("/") + "/chat/completions"
        last: Optional[JudgeBackendError] = None
        for attempt in range(self.config.max_retries + 1):
            retry_after = None
            try:
                with self._slots:
                    self._count("requests")
                    response = self._client.post(url, json=payload, headers=self._headers())
            except httpx.TimeoutException as e:
                last = JudgeBackendError("judge_timeout", f"no reply from {url} within {self.config.timeout_s} s ({e!r})")
            except httpx.HTTPError as e:
                last = JudgeBackendError("judge_connection_error", f"{url}: {e!r}")
            else:
                if response.status_code == 200:
                    return _completion_from(response)
                last = JudgeBackendError("judge_http_error", f"HTTP {response.status_code} from {url}: "
                                                             f"{response.text[:300]}")
                if response.status_code not in _RETRY_STATUS:
                    raise last
                retry_after = response.headers.get("retry-after")
            if attempt < self.config.max_retries:
                self._wait(attempt, retry_after)
        assert last is not None
        raise JudgeBackendError(last.category, f"{last.message} (after {self.config.max_retries + 1} attempts)")

    def close(self) -> None:
        self._client.close()


def _completion_from(response: Any) -> Completion:
    try:
        body = response.json()
        text = body["choices"][0]["message"]["content"]
        usage = body.get("usage") or {}
        if not isinstance(text, str):
            raise TypeError(f"content is {type(text).__name__}")
        return Completion(text, int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)),
                          body["choices"][0].get("finish_reason") or "stop")
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise JudgeBackendError("judge_bad_response", f"not a chat completion: {e!r}: {response.text[:300]}") from None


class TransformersBackend:
    """A judge model in this process (`webrl.serve.LocalChatEngine`); greedy when temperature 0."""

    def __init__(self, engine: Any, max_prompt_tokens: int = 32768):
        self.engine = engine
        self.identity = f"local:{engine.model_name}"
        self.max_prompt_tokens = max_prompt_tokens

    @classmethod
    def from_pretrained(cls, path: str, dtype: str = "float32", device: Optional[str] = None) -> "TransformersBackend":
        from webrl.serve.chat import LocalChatEngine

        return cls(LocalChatEngine.from_pretrained(path, dtype=dtype, device=device))

    def chat(self, messages: Sequence[ChatMessage], *, max_tokens: int, temperature: float) -> Completion:
        try:
            prompt = self.engine.prepare(messages)
            if prompt.num_tokens > self.max_prompt_tokens:
                raise JudgeBackendError("judge_prompt_too_long", f"{prompt.num_tokens} > {self.max_prompt_tokens} tokens")
            return self.engine.generate(prompt, SamplingParams(max_tokens=max_tokens, temperature=temperature))
        except JudgeBackendError:
            raise
        except (RuntimeError, ValueError) as e:  # e.g. CUDA OOM, a processor rejecting an image
            raise JudgeBackendError("judge_backend_error", f"{type(e).__name__}: {e}") from e


class ScriptedBackend:
    """Replies computed by `reply(messages) -> str` (deterministic tests, dry runs).
    A reply that is an exception instance is raised instead."""

    def __init__(self, reply: Callable[[Sequence[ChatMessage]], Any], identity: str = "scripted"):
        self.reply, self.identity = reply, identity
        self.calls: list[list[ChatMessage]] = []
        self._lock = threading.Lock()

    def chat(self, messages: Sequence[ChatMessage], *, max_tokens: int, temperature: float) -> Completion:
        with self._lock:
            self.calls.append(list(messages))
        out = self.reply(messages)
        if isinstance(out, BaseException):
            raise out
        return Completion(str(out), 0, 0)

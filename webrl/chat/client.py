"""One client for OpenAI-compatible chat-completions servers (vLLM, SGLang, OpenAI, `webrl serve`).

    client = ChatClient("http://127.0.0.1:8000/v1", "my-model", api_key_env="OPENAI_API_KEY")
    completion = client.chat(messages, SamplingParams(max_tokens=64))   # or raises ChatClientError

A call POSTs `{base_url}/chat/completions` (non-streaming). An attempt that times out, cannot
connect, or gets HTTP 408, 409, 429 or 5xx is retried up to `max_retries` times; before retry
k (k = 0, 1, ...) it waits min(backoff_max_s, backoff_s * 2**k) times a jitter in [0.5, 1], or
the server's Retry-After when that is longer (still at most backoff_max_s). Any other status,
and a 200 whose body is not a chat completion, fail at once. A failure raises
`ChatClientError`; its `category` (ERROR_CATEGORIES) says what failed. Images travel as
base64 data URLs: as they are (PNG stays PNG), or re-encoded as JPEG at `jpeg_quality`.

httpx rather than urllib: connections are reused across calls and threads (a judge sends
thousands of requests to one host), and timeouts and connection failures are distinct
exception types, where urllib folds both into `URLError`. Proxy variables are ignored
(`trust_env=False`): the servers are named explicitly, often on loopback. The jitter has its
own random generator, so a retry never moves the global `random` state a run may seed.
"""
from __future__ import annotations

import base64
import io
import os
import random
import threading
import time
from typing import Any, Callable, Optional, Sequence

from webrl.chat.messages import ChatMessage, Completion, SamplingParams
from webrl.types import Image

ERROR_CATEGORIES = ("timeout", "http_error", "connection_error", "bad_response")
_RETRY_STATUS = (408, 409, 429)
"""Retried besides every 5xx: request timeout, conflict, rate limit."""


class ChatClientError(Exception):
    """A call that produced no completion. `category` is one of ERROR_CATEGORIES; `status` the
    HTTP status of an http_error (None otherwise)."""

    def __init__(self, category: str, message: str, status: Optional[int] = None):
        super().__init__(f"{category}: {message}")
        self.category, self.message, self.status = category, message, status


def image_data_url(image: Image, jpeg_quality: Optional[int] = None) -> str:
    """`data:image/<format>;base64,...` of the image's own bytes, or of a JPEG at `jpeg_quality`
    (JPEG bytes pass through unchanged; PNG is re-encoded)."""
    data, fmt = image.data, image.format
    if jpeg_quality is not None and fmt != "jpeg":
        buf = io.BytesIO()
        image.to_pil().save(buf, format="JPEG", quality=jpeg_quality)
        data, fmt = buf.getvalue(), "jpeg"
    return f"data:image/{fmt};base64,{base64.b64encode(data).decode('ascii')}"


def openai_messages(messages: Sequence[ChatMessage], jpeg_quality: Optional[int] = None) -> list[dict[str, Any]]:
    """OpenAI chat messages: a text-only message as one string, else content parts in order."""
    out = []
    for m in messages:
        if all(isinstance(p, str) for p in m.content):
            out.append({"role": m.role, "content": "".join(m.content)})
            continue
        parts = [{"type": "image_url", "image_url": {"url": image_data_url(p, jpeg_quality)}} if isinstance(p, Image)
                 else {"type": "text", "text": p} for p in m.content]
        out.append({"role": m.role, "content": parts})
    return out


def request_body(model: str, messages: list[dict[str, Any]], sampling: SamplingParams) -> dict[str, Any]:
    """The JSON body of one request. Settings at their OpenAI default are left out (top_p 1, no
    top_k, stop, seed or logprobs): some hosted models refuse fields they do not support."""
    body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": sampling.max_tokens,
                            "temperature": sampling.temperature}
    if sampling.top_p < 1.0:
        body["top_p"] = sampling.top_p
    if sampling.top_k:
        body["top_k"] = sampling.top_k  # vLLM / SGLang extension
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if sampling.logprobs:
        body["logprobs"] = True
    return body


def _count(usage: dict, key: str) -> Optional[int]:
    value = usage.get(key)
    return None if value is None else int(value)


def parse_completion(reply: Any) -> Completion:
    """A `Completion` from a chat.completion body; raises ValueError, KeyError, IndexError,
    TypeError or AttributeError when the body is not one. Log-probs are read from
    `choices[0].logprobs.content`; token ids only when every token reads "token_id:N" (vLLM's
    `return_tokens_as_token_ids`)."""
    choice = reply["choices"][0]
    text = choice["message"]["content"]
    if not isinstance(text, str):
        raise TypeError(f"content is {type(text).__name__}")
    entries = (choice.get("logprobs") or {}).get("content") or []
    logprobs = [float(t["logprob"]) for t in entries if "logprob" in t]
    tokens = [str(t.get("token", "")) for t in entries]
    ids = [int(t[len("token_id:"):]) for t in tokens if t.startswith("token_id:")]
    usage = reply.get("usage") or {}
    return Completion(text, _count(usage, "prompt_tokens"), _count(usage, "completion_tokens"),
                      choice.get("finish_reason") or "stop", ids if len(ids) == len(tokens) else [], logprobs, tokens)


class ChatClient:
    """Chat completions from one server and model, with retries and a cap on requests in flight.

    api_key_env: environment variable holding the key, read at each request; api_key: the key
    itself (a process that resolved it, e.g. a driver whose environment Ray actors do not
    share), used when given. No key: no Authorization header. timeout_s applies per attempt,
    to connecting and to each read. max_concurrency caps requests in flight over all threads.
    jpeg_quality: None sends images as they are, else as JPEG at that quality.
    """

    def __init__(self, base_url: str, model: str = "default", *, api_key_env: str = "", api_key: str = "",
                 timeout_s: float = 120.0, max_retries: int = 3, backoff_s: float = 1.0, backoff_max_s: float = 30.0,
                 max_concurrency: int = 16, jpeg_quality: Optional[int] = None,
                 sleep: Callable[[float], None] = time.sleep):
        import httpx

        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"ChatClient base_url must start with http:// or https://, got {base_url!r}")
        if timeout_s <= 0 or max_retries < 0 or backoff_s < 0 or backoff_max_s < 0 or max_concurrency < 1:
            raise ValueError(f"ChatClient needs timeout_s > 0, max_retries >= 0, backoff_s >= 0, backoff_max_s >= 0 "
                             f"and max_concurrency >= 1; got {timeout_s}, {max_retries}, {backoff_s}, "
                             f"{backoff_max_s}, {max_concurrency}")
        if jpeg_quality is not None and not 1 <= jpeg_quality <= 100:
            raise ValueError(f"ChatClient jpeg_quality must be None or in [1, 100], got {jpeg_quality}")
        self.url, self.model = base_url.rstrip("/") + "/chat/completions", model
        self.api_key_env, self.api_key, self.timeout_s = api_key_env, api_key, timeout_s
        self.max_retries, self.backoff_s, self.backoff_max_s = max_retries, backoff_s, backoff_max_s
        self.jpeg_quality = jpeg_quality
        self.stats = {"requests": 0, "retries": 0}
        self._sleep, self._jitter = sleep, random.Random()
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._lock = threading.Lock()
        self._http = httpx.Client(timeout=timeout_s, trust_env=False,
                                  limits=httpx.Limits(max_connections=max_concurrency))

    def _count(self, name: str) -> None:
        with self._lock:
            self.stats[name] += 1

    def _headers(self) -> dict[str, str]:
        key = self.api_key or (os.environ.get(self.api_key_env, "") if self.api_key_env else "")
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _wait(self, retry: int, retry_after: Optional[str]) -> None:
        with self._lock:
            jitter = 0.5 + self._jitter.random() / 2
        delay = min(self.backoff_max_s, self.backoff_s * 2 ** retry) * jitter
        if retry_after and retry_after.replace(".", "", 1).isdigit():
            delay = min(self.backoff_max_s, max(delay, float(retry_after)))
        self._count("retries")
        self._sleep(delay)

    def _attempt(self, body: dict[str, Any]) -> tuple[Optional[Completion], Optional[ChatClientError], Optional[str]]:
        """(completion, None, None), or (None, the error, Retry-After) for a failure worth retrying;
        raises a failure that is not."""
        import httpx

        try:
            with self._slots:
                self._count("requests")
                response = self._http.post(self.url, json=body, headers=self._headers())
        except httpx.TimeoutException as e:
            return None, ChatClientError("timeout", f"no reply from {self.url} within {self.timeout_s} s ({e!r})"), None
        except httpx.HTTPError as e:
            return None, ChatClientError("connection_error", f"{self.url}: {e!r}"), None
        status = response.status_code
        if status != 200:
            error = ChatClientError("http_error", f"HTTP {status} from {self.url}: {response.text[:300]}", status)
            if status in _RETRY_STATUS or status >= 500:
                return None, error, response.headers.get("retry-after")
            raise error
        try:
            return parse_completion(response.json()), None, None
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
            raise ChatClientError("bad_response", f"not a chat completion: {e!r}: {response.text[:300]}") from None

    def chat(self, messages: Sequence[ChatMessage], sampling: SamplingParams) -> Completion:
        """One completion; raises ChatClientError (see the module docstring for what is retried)."""
        body = request_body(self.model, openai_messages(messages, self.jpeg_quality), sampling)
        for retry in range(self.max_retries + 1):
            completion, error, retry_after = self._attempt(body)
            if completion is not None:
                return completion
            if retry < self.max_retries:
                self._wait(retry, retry_after)
        raise ChatClientError(error.category, f"{error.message} (after {self.max_retries + 1} attempts)", error.status)

    def close(self) -> None:
        self._http.close()

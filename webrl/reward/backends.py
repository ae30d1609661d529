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

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence

from webrl.chat.client import ChatClient, ChatClientError
from webrl.chat.messages import ChatMessage, Completion, SamplingParams


class JudgeBackendError(Exception):
    """The backend could not produce a reply. `category` becomes the drop reason's category."""

    def __init__(self, category: str, message: str):
        super().__init__(f"{category}: {message}")
        self.category, self.message = category, message


class ChatBackend(Protocol):
    identity: str

    def chat(self, messages: Sequence[ChatMessage], *, max_tokens: int, temperature: float) -> Completion: ...


BACKOFF_S = 1.0
"""First wait before a retried judge request; each further retry doubles it, with jitter (the
hosted APIs' Retry-After still wins when longer). Fixed: `reward.max_retries` is the knob."""
BACKOFF_MAX_S = 30.0
"""Longest wait between retried judge requests."""
JPEG_QUALITY = 90
"""JPEG quality at which PNG screenshots are re-encoded for a judge endpoint (JPEG screenshots
pass through unchanged): far smaller requests than PNG, at the quality image APIs expect."""


def local_judge_dtype() -> str:
    """dtype of an in-process judge model: bfloat16 on a GPU, float32 on the CPU."""
    import torch

    return "bfloat16" if torch.cuda.is_available() else "float32"


@dataclass
class OpenAIBackendConfig:
    """The judge endpoint client's settings; `RewardConfig` sets base_url, model, api_key_env,
    timeout_s, max_retries and max_concurrency, the rest are module constants tests can vary."""


    base_url: str = "http://127.0.0.1:8000/v1"
    """Server root including `/v1`; requests go to `<base_url>/chat/completions`."""
    model: str = ""
    """Model name sent in each request (e.g. "gpt-4.1", "o4-mini", or the name `webrl serve` prints)."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the API key; unset or empty = no Authorization header."""
    timeout_s: float = 120.0
    """Per-attempt timeout in seconds, applied to connecting and to each read (httpx semantics)."""
    max_retries: int = 3
    """Retries after a timeout, connection error, 408, 409, 429 or 5xx (other 4xx are not retried)."""
    backoff_s: float = BACKOFF_S
    """First retry waits about this long; each further retry doubles it (with jitter)."""
    backoff_max_s: float = BACKOFF_MAX_S
    """Longest wait between retries."""
    max_concurrency: int = 16
    """Most requests in flight at once from this backend (shared by all threads)."""
    jpeg_quality: int = JPEG_QUALITY
    """JPEG quality of images sent to the server (JPEG screenshots pass through unchanged)."""

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


class OpenAIChatBackend:
    """A judge model behind any chat-completions server (`webrl.chat.ChatClient`); a client error
    becomes `JudgeBackendError("judge_<category>", ...)`."""

    def __init__(self, config: OpenAIBackendConfig, sleep: Callable[[float], None] = time.sleep):
        self.config = config
        self.identity = f"openai:{config.base_url.rstrip('/')}:{config.model}"
        self.client = ChatClient(config.base_url, config.model, api_key_env=config.api_key_env,
                                 timeout_s=config.timeout_s, max_retries=config.max_retries,
                                 backoff_s=config.backoff_s, backoff_max_s=config.backoff_max_s,
                                 max_concurrency=config.max_concurrency, jpeg_quality=config.jpeg_quality,
                                 sleep=sleep)

    @property
    def stats(self) -> dict[str, int]:
        """Attempts sent ("requests") and waits before a retry ("retries")."""
        return self.client.stats

    def chat(self, messages: Sequence[ChatMessage], *, max_tokens: int, temperature: float) -> Completion:
        try:
            return self.client.chat(messages, SamplingParams(max_tokens=max_tokens, temperature=temperature))
        except ChatClientError as e:
            raise JudgeBackendError(f"judge_{e.category}", e.message) from None

    def close(self) -> None:
        self.client.close()


class TransformersBackend:
    """A judge model in this process (`webrl.chat.LocalChatEngine`); greedy when temperature 0."""

    max_concurrency = 1
    """One in-process model serves one call at a time (`build_reward` scores serially over it)."""

    def __init__(self, engine: Any, max_prompt_tokens: int = 32768):
        self.engine = engine
        self.identity = f"local:{engine.model_name}"
        self.max_prompt_tokens = max_prompt_tokens

    @classmethod
    def from_pretrained(cls, path: str, dtype: str = "", device: Optional[str] = None) -> "TransformersBackend":
        from webrl.chat.local import LocalChatEngine

        return cls(LocalChatEngine.from_pretrained(path, dtype=dtype or local_judge_dtype(), device=device))

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

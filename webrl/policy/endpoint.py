"""`EndpointPolicy`: the policy protocol over an OpenAI-compatible chat-completions server.

For evaluating hosted or vLLM-served models. Prompts come from the same `PromptBuilder` as
the local generator; messages go out in the OpenAI shape (images as PNG data URLs, `tool`
turns as user messages holding `<tool_response>` text, as the ChatML render has them).
Requests of a batch run concurrently on threads. The server stops at `</tool_call>` (a stop
string, which OpenAI servers leave out of the text: it is put back). Log-probs are taken
when the server returns them (`logprobs: true`); token ids only when it encodes tokens as
"token_id:N" (vLLM's `return_tokens_as_token_ids`). Prompt ids are unknown here.
A failed HTTP call becomes a `ParseError` decision with the error message and
`finish_reason="error"`, never an exception.
"""
from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from webrl.actions import ParseError
from webrl.policy.generator import SamplingConfig
from webrl.policy.prompt import Message, PromptBuilder, PromptConfig
from webrl.policy.types import Decision, DecisionStats, PolicyRequest
from webrl.types import Image


@dataclass
class EndpointConfig:
    """An OpenAI-compatible server and how to sample from it."""

    base_url: str = "http://127.0.0.1:8000/v1"
    """Server root including /v1."""
    model: str = "default"
    """Model name sent in each request."""
    family: str = "qwen3-vl"
    """Qwen family of the served model (fixes computer-use coordinates): "qwen2.5-vl" or "qwen3-vl"."""
    api_key: str = "EMPTY"
    """Bearer token sent to the server (local servers ignore it)."""
    timeout_s: float = 120.0
    """Per-request timeout."""
    max_concurrency: int = 8
    """Requests in flight at once."""
    logprobs: bool = True
    """Ask for per-token log-probs."""
    prompt: PromptConfig = field(default_factory=PromptConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"EndpointConfig.base_url must start with http:// or https://, got {self.base_url!r}")
        if self.family not in ("qwen2.5-vl", "qwen3-vl"):
            raise ValueError(f"EndpointConfig.family must be 'qwen2.5-vl' or 'qwen3-vl', got {self.family!r}")
        if self.max_concurrency < 1 or self.timeout_s <= 0:
            raise ValueError("EndpointConfig.max_concurrency must be >= 1 and timeout_s > 0")


def openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """OpenAI chat messages; images become base64 data URLs."""
    out = []
    for m in messages:
        parts = []
        for p in m.parts:
            if isinstance(p, Image):
                url = f"data:image/{p.format};base64,{base64.b64encode(p.data).decode()}"
                parts.append({"type": "image_url", "image_url": {"url": url}})
            else:
                parts.append({"type": "text", "text": p})
        if m.role == "tool":
            text = "".join(x["text"] for x in parts if x["type"] == "text")
            out.append({"role": "user", "content": f"<tool_response>\n{text}\n</tool_response>"})
        elif all(x["type"] == "text" for x in parts):
            out.append({"role": m.role, "content": "".join(x["text"] for x in parts)})
        else:
            out.append({"role": m.role, "content": parts})
    return out


class EndpointPolicy:
    """`Policy` over an OpenAI-compatible server; `count_text_tokens` makes the budget exact."""

    def __init__(self, config: Optional[EndpointConfig] = None, count_text_tokens=None):
        self.config = config or EndpointConfig()
        self.builder = PromptBuilder(self.config.prompt, self.config.family, count_text_tokens)

    def act(self, requests: Sequence[PolicyRequest]) -> list[Decision]:
        with ThreadPoolExecutor(max_workers=self.config.max_concurrency) as pool:
            return list(pool.map(self._act_one, requests))

    def _payload(self, messages: Sequence[Message]) -> dict[str, Any]:
        s = self.config.sampling
        body: dict[str, Any] = {"model": self.config.model, "messages": openai_messages(messages),
                                "max_tokens": s.max_new_tokens, "temperature": 0.0 if s.greedy else s.temperature,
                                "top_p": 1.0 if s.greedy else s.top_p}
        if s.top_k and not s.greedy:
            body["top_k"] = s.top_k  # vLLM extension
        if s.stop_at_tool_call:
            body["stop"] = ["</tool_call>"]
        if self.config.logprobs:
            body["logprobs"] = True
        return body

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            self.config.base_url.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.config.api_key}"})
        with urllib.request.urlopen(req, timeout=self.config.timeout_s) as resp:
            return json.loads(resp.read())

    def _act_one(self, request: PolicyRequest) -> Decision:
        t0 = time.perf_counter()
        prompt = self.builder.render(request)
        stats = DecisionStats(prompt_tokens=prompt.num_tokens, history_turns=len(request.history),
                              history_dropped=prompt.history_dropped, images=len(prompt.images),
                              over_budget=prompt.over_budget)
        try:
            reply = self._post(self._payload(prompt.messages))
            choice = reply["choices"][0]
            text = choice["message"].get("content") or ""
            finish = choice.get("finish_reason") or "stop"
        except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as e:
            stats.latency_s, stats.finish_reason = time.perf_counter() - t0, "error"
            return Decision(ParseError(f"endpoint error: {type(e).__name__}: {e}"), "", images=list(prompt.images),
                            stats=stats)
        if finish == "stop" and "<tool_call>" in text and "</tool_call>" not in text:
            text += "</tool_call>"  # the stop string is cut from the text
        tokens = ((choice.get("logprobs") or {}).get("content") or []) if self.config.logprobs else []
        logprobs = [float(t["logprob"]) for t in tokens if "logprob" in t]
        ids = [int(t["token"][9:]) for t in tokens if str(t.get("token", "")).startswith("token_id:")]
        usage = reply.get("usage") or {}
        stats.prompt_tokens = int(usage.get("prompt_tokens", stats.prompt_tokens))
        stats.response_tokens = int(usage.get("completion_tokens", len(tokens)))
        stats.latency_s, stats.finish_reason = time.perf_counter() - t0, finish
        return Decision(self.builder.format.parse(text, prompt.geometry), text, [],
                        ids if len(ids) == len(tokens) else [], logprobs, list(prompt.images), stats)

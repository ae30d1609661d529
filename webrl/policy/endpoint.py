"""`EndpointPolicy`: the policy protocol over an OpenAI-compatible chat-completions server.

For evaluating hosted or vLLM-served models. Prompts come from the same `PromptBuilder` as
the local generator; messages go out through `webrl.chat.ChatClient` (images as their own
PNG/JPEG data URLs, `tool` turns as user messages holding `<tool_response>` text, as the ChatML
render has them). Requests of a batch run concurrently on threads. The server stops at
`</tool_call>` (a stop string, which OpenAI servers leave out of the text: it is put back).
Log-probs are taken when the server returns them (`logprobs: true`); token ids only when it
encodes tokens as "token_id:N" (vLLM's `return_tokens_as_token_ids`). Prompt ids are unknown
here. A call that fails after the client's retries becomes a `ParseError` decision with the
error message and `finish_reason="error"`, never an exception.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional, Sequence

from webrl.actions import ParseError
from webrl.chat.client import ChatClient, ChatClientError
from webrl.chat.messages import SamplingParams
from webrl.models.tokens import TOOL_CALL_END, TOOL_CALL_START
from webrl.policy.generator import SamplingConfig
from webrl.policy.prompt import PromptBuilder, PromptConfig
from webrl.policy.types import Decision, DecisionStats, PolicyRequest


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
    """Bearer token sent to the server (local servers ignore it). The key itself: the config is
    built where the key is known and travels to the inference actors."""
    timeout_s: float = 120.0
    """Per-attempt timeout."""
    max_retries: int = 2
    """Retries after a timeout, connection error, 408, 409, 429 or 5xx (other 4xx are not retried)."""
    backoff_s: float = 1.0
    """First retry waits about this long; each further retry doubles it (with jitter)."""
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
        if self.max_retries < 0 or self.backoff_s < 0:
            raise ValueError(f"EndpointConfig.max_retries and backoff_s must be >= 0, "
                             f"got {self.max_retries}, {self.backoff_s}")


def sampling_params(sampling: SamplingConfig, logprobs: bool, seed: Optional[int] = None) -> SamplingParams:
    """The request's sampling: greedy is temperature 0 with no top-p / top-k; a sampled request
    carries its decision's seed (OpenAI's `seed`)."""
    greedy = sampling.greedy
    return SamplingParams(max_tokens=sampling.max_new_tokens, temperature=0.0 if greedy else sampling.temperature,
                          top_p=1.0 if greedy else sampling.top_p, top_k=0 if greedy else sampling.top_k,
                          seed=None if greedy else seed,
                          stop=[TOOL_CALL_END] if sampling.stop_at_tool_call else [], logprobs=logprobs)


class EndpointPolicy:
    """`Policy` over an OpenAI-compatible server; `count_text_tokens` makes the budget exact."""

    def __init__(self, config: Optional[EndpointConfig] = None, count_text_tokens=None):
        self.config = config or EndpointConfig()
        self.builder = PromptBuilder(self.config.prompt, self.config.family, count_text_tokens)
        c = self.config
        self.client = ChatClient(c.base_url, c.model, api_key=c.api_key, timeout_s=c.timeout_s,
                                 max_retries=c.max_retries, backoff_s=c.backoff_s, max_concurrency=c.max_concurrency)

    def act(self, requests: Sequence[PolicyRequest]) -> list[Decision]:
        with ThreadPoolExecutor(max_workers=self.config.max_concurrency) as pool:
            return list(pool.map(self._act_one, requests))

    def _act_one(self, request: PolicyRequest) -> Decision:
        t0 = time.perf_counter()
        prompt = self.builder.render(request)
        stats = DecisionStats(prompt_tokens=prompt.num_tokens, history_turns=len(request.history),
                              history_dropped=prompt.history_dropped, images=len(prompt.images),
                              over_budget=prompt.over_budget)
        try:
            reply = self.client.chat([m.to_chat_message() for m in prompt.messages],
                                     sampling_params(self.config.sampling, self.config.logprobs, request.seed))
        except ChatClientError as e:
            stats.latency_s, stats.finish_reason = time.perf_counter() - t0, "error"
            return Decision(ParseError(f"endpoint error: {e}"), "", images=list(prompt.images), stats=stats)
        text, finish = reply.text, reply.finish_reason
        if finish == "stop" and TOOL_CALL_START in text and TOOL_CALL_END not in text:
            text += TOOL_CALL_END  # the stop string is cut from the text
        n_tokens = len(reply.tokens) if self.config.logprobs else 0
        logprobs = reply.logprobs if self.config.logprobs else []
        ids = reply.token_ids if self.config.logprobs else []
        if reply.prompt_tokens is not None:
            stats.prompt_tokens = reply.prompt_tokens
        stats.response_tokens = reply.completion_tokens if reply.completion_tokens is not None else n_tokens
        stats.latency_s, stats.finish_reason = time.perf_counter() - t0, finish
        return Decision(self.builder.format.parse(text, prompt.geometry), text, response_ids=ids, logprobs=logprobs,
                        images=list(prompt.images), stats=stats)

"""Chat messages, sampling settings and replies: what every chat backend takes and returns.

    ChatMessage("user", ("What is on the page?", image))     text and `webrl.types.Image` parts
    SamplingParams(max_tokens=64, temperature=0.0)
    Completion(text, prompt_tokens, completion_tokens, finish_reason, token_ids, logprobs, tokens)

The same types travel through the local engine (`webrl.chat.LocalChatEngine`), the HTTP client
(`webrl.chat.ChatClient`) and the server (`webrl serve`), so judges and policies do not care
which of them answers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

from webrl.types import Image

ROLES = ("system", "user", "assistant")
Part = Union[str, Image]


@dataclass(frozen=True)
class ChatMessage:
    """One chat message: `role` in ROLES, `content` a sequence of text and image parts, in order."""

    role: str
    content: tuple[Part, ...]

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"ChatMessage.role must be one of {ROLES}, got {self.role!r}")
        content = (self.content,) if isinstance(self.content, (str, Image)) else tuple(self.content)
        for part in content:
            if not isinstance(part, (str, Image)):
                raise ValueError(f"ChatMessage parts must be str or Image, got {type(part).__name__}")
        object.__setattr__(self, "content", content)

    @property
    def images(self) -> list[Image]:
        return [p for p in self.content if isinstance(p, Image)]


@dataclass
class SamplingParams:
    """Decoding settings of one call (OpenAI names)."""

    max_tokens: int = 256
    """Most new tokens to generate."""
    temperature: float = 0.0
    """0 = greedy; > 0 samples."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]."""
    top_k: int = 0
    """Top-k sampling; 0 = off."""
    seed: Optional[int] = None
    """Reseed before sampling (reproducible replies), None = leave the generator alone."""
    stop: list[str] = field(default_factory=list)
    """Strings that end the reply; the reply is cut before the first one."""
    logprobs: bool = False
    """Also return the sampled token ids and their log-probs (see `Completion`)."""

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"SamplingParams.max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"SamplingParams.top_k must be >= 0, got {self.top_k}")


@dataclass
class Completion:
    """A reply with its token usage; finish_reason "stop" (EOS or stop string) or "length".

    prompt_tokens / completion_tokens: None when a remote server's reply gave no usage.
    With `SamplingParams.logprobs`: logprobs (R,) the log-prob of each generated token;
    tokens (R,) each token as text (a server reporting ids writes "token_id:N"); token_ids
    (R,) the ids when known (the local engine, or a server writing every token as
    "token_id:N"), else empty. The local engine counts a final EOS and the tokens of a stop
    string (the text leaves the stop string out), and takes log-probs under
    log_softmax(logits / T), T = temperature (1 when greedy): the convention of
    `webrl.policy.generator`, so a learner can recompute them exactly.
    """

    text: str
    prompt_tokens: Optional[int]
    completion_tokens: Optional[int]
    finish_reason: str = "stop"
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)

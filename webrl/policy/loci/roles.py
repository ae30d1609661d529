"""LOCI roles (Locator, Critic, answerer) from a local Qwen-VL model or an OpenAI-compatible URL, and VQA mode.

A role is `role(system, user, images) -> text` (`webrl.policy.loci.Role`):
- `ModelRole`: the wrapped `GeneratorPolicy`'s backend (the model in process, or the inference
  servers) with the role's prompt, rendered by the prompt builder's `render_chatml`
  (`role_prompt`); greedy decoding (roles judge, they are not trained here); images sent before
  the user text, each resized within [min_pixels, max_pixels].
- `EndpointRole`: one chat-completions call through `webrl.chat.ChatClient` (images as their
  own PNG/JPEG data URLs), temperature 0, retried on transient failures. A call that still
  fails raises `ChatClientError`; the LOCI loop counts it as a parse failure.

`loci_answer` is the standalone VQA mode: evidence search, then one answerer call with the whole
image followed by the accepted crops (several images in one prompt; no composite needed).
With `use_loci=False` it is the plain baseline: one answerer call on the whole image.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from webrl.chat.client import ChatClient
from webrl.chat.messages import ChatMessage, SamplingParams
from webrl.models.tokens import END_OF_TURN_TOKENS
from webrl.policy.backend import GenerateRequest
from webrl.policy.loci.policy import Evidence, LociConfig, Role, gather_evidence, render_role_prompt
from webrl.policy.prompt import Message, render_chatml
from webrl.types import Image


def role_prompt(system: str, user: str, images: Sequence[Image]) -> str:
    """ChatML of one role call: the system prompt, then one user turn with the images before the text."""
    text, _ = render_chatml([Message("system", [system]), Message("user", [*images, user])])
    return text


class ModelRole:
    """A role played by the run's own generator (a `GeneratorPolicy`, on any backend: in process or
    an inference server) with the role's prompt: greedy, up to an end-of-turn token."""

    def __init__(self, generator, max_new_tokens: int = 128, min_pixels: int = 1024,
                 max_pixels: int = 1024 * 28 * 28):
        self.generator = generator
        self.max_new_tokens, self.min_pixels, self.max_pixels = max_new_tokens, min_pixels, max_pixels
        vocab = generator.tokenizer.get_vocab()
        self.stop_ids = tuple(vocab[t] for t in END_OF_TURN_TOKENS if t in vocab)

    @classmethod
    def from_generator(cls, generator, **kw) -> "ModelRole":
        cfg = generator.config.prompt
        kw.setdefault("min_pixels", cfg.min_pixels)
        kw.setdefault("max_pixels", cfg.max_pixels)
        return cls(generator, **kw)

    @property
    def model(self):
        """The transformers model in this process (None when the generator runs on a server)."""
        return self.generator.model

    def __call__(self, system: str, user: str, images: Sequence[Image]) -> str:
        bounds = (self.min_pixels, self.max_pixels)
        ids = self.generator.text_ids(role_prompt(system, user, images), list(images), bounds)
        row = GenerateRequest(ids, list(images), bounds, max_new_tokens=self.max_new_tokens, greedy=True,
                              stop_ids=self.stop_ids)
        out = self.generator.backend.generate([row])[0]
        return self.generator.tokenizer.decode(out.ids, skip_special_tokens=True)


@dataclass
class EndpointRole:
    """A role played by a model behind an OpenAI-compatible /v1/chat/completions URL."""

    base_url: str
    """Server root including /v1."""
    model: str = "default"
    """Model name sent in each request."""
    api_key: str = "EMPTY"
    """Bearer token sent to the server (local servers ignore it)."""
    timeout_s: float = 120.0
    """Per-attempt timeout."""
    max_tokens: int = 256
    """Most tokens per reply."""
    max_retries: int = 2
    """Retries after a timeout, connection error, 408, 409, 429 or 5xx."""
    client: ChatClient = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.client = ChatClient(self.base_url, self.model, api_key=self.api_key, timeout_s=self.timeout_s,
                                 max_retries=self.max_retries)

    def __call__(self, system: str, user: str, images: Sequence[Image]) -> str:
        messages = [ChatMessage("system", (system,)), ChatMessage("user", (*images, user))]
        return self.client.chat(messages, SamplingParams(max_tokens=self.max_tokens, temperature=0.0)).text


def make_role(source: str, generator=None, model_name: str = "default", **kw) -> Role:
    """"policy" -> `ModelRole` over `generator`'s model; an http(s) URL -> `EndpointRole`."""
    if source == "policy":
        if generator is None:
            raise ValueError("role source 'policy' needs a GeneratorPolicy (generator=...)")
        return ModelRole.from_generator(generator, **kw)
    return EndpointRole(source, model=model_name, **kw)


def make_roles(config: LociConfig, generator=None, model_name: str = "default", **kw) -> tuple[Role, Role]:
    """(locator, critic) from `config.locator` / `config.critic`."""
    return (make_role(config.locator, generator, model_name, **kw),
            make_role(config.critic, generator, model_name, **kw))


def loci_policy(inner, config: Optional[LociConfig] = None, generator=None, model_name: str = "default", **kw):
    """`LociPolicy` around `inner` with roles from `config`; "policy" roles use `generator`, else the
    inner policy's own model (`inner.generator` for a cascade, `inner` for a `GeneratorPolicy`)."""
    from webrl.policy.loci.policy import LociPolicy

    config = config or LociConfig()
    if generator is None and "policy" in (config.locator, config.critic):
        generator = getattr(inner, "generator", None) or (inner if hasattr(inner, "processor") else None)
    locator, critic = make_roles(config, generator, model_name, **kw)
    return LociPolicy(inner, config, locator, critic)


@dataclass
class VqaResult:
    """An answer with the evidence behind it; `calls` counts every role call (answerer included)."""

    answer: str
    evidence: Evidence = field(default_factory=Evidence)
    answer_error: str = ""

    @property
    def calls(self) -> int:
        return self.evidence.stats.calls + 1


def loci_answer(image: Image, question: str, answerer: Role, locator: Optional[Role] = None,
                critic: Optional[Role] = None, config: Optional[LociConfig] = None,
                use_loci: bool = True) -> VqaResult:
    """Answer `question` about a (high-resolution) image, with LOCI evidence unless `use_loci` is False."""
    config = config or LociConfig()
    ev = Evidence()
    if use_loci:
        if locator is None or critic is None:
            raise ValueError("loci_answer with use_loci=True needs locator and critic roles")
        try:
            ev = gather_evidence(image, question, locator, critic, config)
        except Exception as e:  # evidence is optional: answer from the whole image
            ev.stats.error = f"{type(e).__name__}: {e}"
    note = (f"{len(ev.crops)} enlarged crop(s) follow the whole image, at pixels "
            + "; ".join(str(list(c.box)) for c in ev.crops) + ".") if ev.crops else "Only the whole image is given."
    system, user = render_role_prompt("answer", config.prompt_version, question=question, evidence=note)
    try:
        return VqaResult(answerer(system, user, [image, *[c.image for c in ev.crops]]).strip(), ev)
    except Exception as e:
        return VqaResult("", ev, answer_error=f"{type(e).__name__}: {e}")

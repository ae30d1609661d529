"""The generator backend interface: what the policy and its wrappers ask of a model, on any engine.

    backend.generate([GenerateRequest(prompt_ids, images, forced_ids=..., max_new_tokens=...,
                                      hidden_layer=-1, ...)]) -> [Generated(ids, logprobs, ...)]

One call does all that the wrappers and the learner need, and nothing Python-object-specific:
- sample up to `max_new_tokens` tokens with their log-probs (the rollout);
- score a given continuation: `forced_ids` are teacher-forced after the prompt and their
  log-probs come back (the cascade's head-decided turns; Dyna's plain-prompt log-probs);
  `max_new_tokens=0` scores only;
- the hidden states of the prompt (and forced tokens) at one layer (the decision heads).
Weight updates and the weight version stay the engine's (`webrl.engines.engine`,
`webrl.engines.sglang`).

Three implementations: `TransformersBackend` (webrl/engines/transformers.py: the model in
this process; `webrl serve` serves the same class over HTTP), `ServerBackend`
(webrl/engines/sglang.py: SGLang's native `/generate`) and `VLLMBackend`
(webrl/engines/vllm.py: vLLM's token-in / token-out `/inference/v1/generate`). Both reuse the KV cache of a
prompt they computed just before (SGLang's radix cache; webrl's own for the in-process model),
so a cascade that reads the heads' hidden states and then defers to the generator does not
prefill the prompt twice: `Generated.cached_tokens` says how many prompt tokens were reused.

Where the engines differ is said once, in `ENGINE_CAPABILITIES` (the config check and `webrl
plan` read it). Notation: P prompt tokens, F forced tokens, N new tokens, R hidden rows, H hidden size.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, Sequence

from webrl.types import Image


@dataclass
class GenerateRequest:
    """One row of a backend call.

    prompt_ids: (P,) token ids exactly as the model reads them (each image's `<|image_pad|>`
      repeated to its token count at `pixel_bounds`); nothing is re-tokenised.
    images: the prompt's screenshots in prompt order; pixel_bounds: (min_pixels, max_pixels)
      the image token counts were computed with.
    forced_ids: (F,) teacher-forced after the prompt; their log-probs are returned.
    max_new_tokens: N sampled after the forced ids (0: score only), up to a stop id.
    temperature / top_p / top_k / greedy: the sampling (top_k 0 = off); greedy ignores the rest
      and reports temperature-1 log-probs.
    forced_temperature: the temperature of the forced ids' log-probs; None = the sampling
      temperature (1 for greedy).
    hidden_layer: `hidden_states` index whose rows come back (-1: the last layer, after the
      final norm); None: none.
    seed: the sampling seed of this row (None: the engine's RNG).
    cache_key: the prefix-cache namespace (SGLang's `extra_key`: radix-cache entries of different
      keys never share a prefix): a request reuses only what requests of the same key computed.
      The cascade gives each decision its own, so its heads request always computes every prompt
      row and its follow-up requests reuse exactly that prefill.
    """

    prompt_ids: list[int]
    images: list[Image] = field(default_factory=list)
    pixel_bounds: tuple[int, int] = (0, 0)
    forced_ids: list[int] = field(default_factory=list)
    max_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    greedy: bool = False
    stop_ids: tuple[int, ...] = ()
    forced_temperature: Optional[float] = None
    hidden_layer: Optional[int] = None
    seed: Optional[int] = None
    cache_key: Optional[str] = None

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise ValueError("GenerateRequest.prompt_ids must not be empty")
        if self.max_new_tokens < 0:
            raise ValueError(f"GenerateRequest.max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if not self.greedy and not self.temperature > 0:
            raise ValueError(f"GenerateRequest.temperature must be > 0 unless greedy, got {self.temperature}")

    @property
    def sequence(self) -> list[int]:
        """(P + F,) the ids the engine reads."""
        return list(self.prompt_ids) + list(self.forced_ids)

    @property
    def score_temperature(self) -> float:
        if self.forced_temperature is not None:
            return float(self.forced_temperature)
        return 1.0 if self.greedy else float(self.temperature)

    @property
    def plain(self) -> bool:
        """Only sampling: no forced ids, no hidden states (batched together in process; a seed
        stays the row's own there)."""
        return not self.forced_ids and self.hidden_layer is None and self.max_new_tokens > 0

    def sampling_key(self) -> tuple:
        """Rows with equal keys can share one batched `generate` call."""
        return (self.greedy, self.temperature, self.top_p, self.top_k, self.max_new_tokens, tuple(self.stop_ids),
                tuple(self.pixel_bounds))


@dataclass
class Generated:
    """What a backend answers for one `GenerateRequest`.

    ids / logprobs: (N',) sampled ids up to and including the first stop id, and log softmax
      (logits / T) of each (T = 1 for greedy; top-p / top-k not applied).
    finish: "stop" (a stop id), "length" (max_new_tokens) or "none" (max_new_tokens 0).
    forced_logprobs: (F,) log-probs of the forced ids at `score_temperature`; None when the
      engine cannot report them at that temperature (an SGLang server's prompt log-probs are at
      temperature 1 only: `ENGINE_CAPABILITIES`).
    hidden / hidden_start: (R, H) float32 rows for positions hidden_start .. P + F - 1 at the
      requested layer. Rows start after the prefix the engine reused from its cache (as SGLang
      returns them), so hidden_start > 0 means the early rows are not available.
    prompt_tokens: P + F as the engine counted them; cached_tokens: those it did not recompute.
    """

    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str = "none"
    forced_logprobs: Optional[list[float]] = None
    hidden: Any = None
    hidden_start: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    weight_version: Optional[str] = None


class GeneratorBackend(Protocol):
    """Anything that answers `GenerateRequest`s (in-process model, inference servers)."""

    capabilities: "EngineCapabilities"

    def generate(self, requests: Sequence[GenerateRequest]) -> list[Generated]: ...


def is_backend(value: Any) -> bool:
    return callable(getattr(value, "generate", None)) and isinstance(getattr(value, "capabilities", None),
                                                                    EngineCapabilities)


# -- what stays engine-specific -------------------------------------------------------------------
@dataclass(frozen=True)
class EngineCapabilities:
    """What one engine can do that another cannot (one row of `ENGINE_CAPABILITIES`)."""

    engine: str
    hidden_layers: str
    """Which `hidden_states` layers the engine returns: "any" or "final" (after the final norm)."""
    forced_logprobs: str
    """At which temperature forced ids are scored: "any" or "1" (then other temperatures need the
    learner's recomputation)."""
    prefix_cache: str
    """How a prompt computed before is reused."""
    sparse_prefill: str
    """Where `generator.sparse_prefill` (MMInference sparse attention in the prefill) runs."""
    vision_token_suppression: str
    """How a sampled vision placeholder (which breaks the learner's image-token count) is kept out."""
    element_pointer: str
    """Whether a pointer checkpoint's element pointer runs."""

    def rows(self) -> list[tuple[str, str]]:
        return [(name, getattr(self, name)) for name in self.__dataclass_fields__ if name != "engine"]


ENGINE_CAPABILITIES = {
    "transformers": EngineCapabilities(
        engine="transformers",
        hidden_layers="any",
        forced_logprobs="any",
        prefix_cache="the last prompts' KV caches, reused when a request extends one (webrl)",
        sparse_prefill="in process (generator.sparse_prefill)",
        vision_token_suppression="masked while sampling",
        element_pointer="yes"),
    "server": EngineCapabilities(
        engine="server",
        hidden_layers="final (SGLang: --enable-return-hidden-states; rows after its cached prefix only)",
        forced_logprobs="1 (SGLang's input_token_logprobs are not temperature-scaled)",
        prefix_cache="the server's (SGLang's radix cache; webrl serve: webrl's)",
        sparse_prefill="the server's own setting (generator.sparse_prefill refused)",
        vision_token_suppression="a response holding one is refused and retried",
        element_pointer="webrl serve only (SGLang serves plain Qwen-VL checkpoints)"),
    "vllm": EngineCapabilities(
        engine="vllm",
        hidden_layers="any, from an in-process copy of the weights (vLLM returns none)",
        forced_logprobs="1 (vLLM's prompt_logprobs come from the raw logits)",
        prefix_cache="vLLM's automatic prefix caching (namespaced by cache_salt)",
        sparse_prefill="the server's own setting (generator.sparse_prefill refused)",
        vision_token_suppression="a response holding one is refused and retried",
        element_pointer="no (vLLM serves plain Qwen-VL checkpoints)"),
}
"""Engine -> what it can do; `webrl plan` prints it and the config check refuses what cannot run."""


ENGINE_LABELS = {"transformers": "rollout.engine=transformers",
                 "server": "rollout.engine=server (SGLang protocol: sglang, webrl serve)",
                 "vllm": "rollout.engine=server (rollout.server.protocol=vllm)"}


def capability_table() -> str:
    """`ENGINE_CAPABILITIES` as a text table (one row per capability, one column per engine)."""
    engines = list(ENGINE_CAPABILITIES)
    rows = [(name, [dict(ENGINE_CAPABILITIES[e].rows())[name] for e in engines])
            for name, _ in ENGINE_CAPABILITIES[engines[0]].rows()]
    width = max(len(name) for name, _ in rows)
    lines = [f"{'capability':<{width}}  " + " | ".join(ENGINE_LABELS.get(e, e) for e in engines)]
    lines += [f"{name:<{width}}  " + " | ".join(values) for name, values in rows]
    return "\n".join(lines)


def reusable_prefix(cached_ids: Sequence[Any], prompt_ids: Sequence[Any]) -> int:
    """Tokens at the start of `prompt_ids` a prefix (radix) cache holding `cached_ids` could skip:
    their longest common prefix. Pass `image_keyed` sequences so that two images of one size
    (same pad ids) do not match."""
    n = 0
    for a, b in zip(cached_ids, prompt_ids):
        if a != b:
            break
        n += 1
    return n


def image_keyed(ids: Sequence[int], images: Sequence[Image], pad_id: int) -> list[Any]:
    """`ids` with the k-th run of `pad_id` tokens keyed by the k-th image's bytes, as SGLang's
    radix cache keys image tokens by image content (a different screenshot never matches)."""
    out: list[Any] = []
    k, previous = -1, None
    for t in ids:
        if t == pad_id:
            k += previous != pad_id
            out.append((t, images[k].digest if k < len(images) else None))
        else:
            out.append(t)
        previous = t
    return out


def cut_at_stop(ids: Sequence[int], stop_ids: Sequence[int]) -> tuple[list[int], str]:
    """Ids up to and including the first stop id, and the finish reason ("stop" / "length")."""
    stops = set(stop_ids)
    for i, t in enumerate(ids):
        if t in stops:
            return list(ids[:i + 1]), "stop"
    return list(ids), "length"

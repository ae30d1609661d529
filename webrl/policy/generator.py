"""`GeneratorPolicy`: a Qwen-VL generator answering a batch of requests, on any generator backend.

The policy half is engine-free: it renders each request's prompt (`PromptBuilder`), computes the
ids the model reads (`prompt_ids`: each image placeholder expanded to its smart_resize token
count, equal to the processor's ids), asks its backend (webrl/policy/backend.py: the model in
this process, `TransformersBackend`, or inference servers, `ServerBackend`) to sample, and parses
the text into an action. Token-in/token-out: the response ids are the sampled ones up to and
including the first stop token, and nothing is re-tokenised later.

Log-probs: log softmax(logits / temperature) of each sampled token, from the raw logits of the
same forward passes that sampled it. top-p / top-k truncation shapes what is sampled but is
not applied to the log-probs, because the learner recomputes exactly softmax(logits / T) over
the same ids (as verl and slime do); with top-p = 1 and top-k off (the RL default) the two are
the same distribution. Greedy decoding reports temperature-1 log-probs.

In process (`TransformersBackend`) the log-probs are taken inside generation (no (B, N, V) logits
stack is kept) and vision placeholders are masked; top-k is off (transformers samples with top-k
50 otherwise) and the checkpoint's generation config (Qwen ships top_k=1, repetition_penalty
1.05) is overridden, so samples follow the distribution the learner optimises.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from webrl.models.tokens import STOP_TOKENS
from webrl.policy.backend import GenerateRequest, Generated, is_backend
from webrl.policy.images import image_token_count
from webrl.policy.prompt import PromptBuilder, PromptConfig, RenderedPrompt
from webrl.policy.types import Decision, DecisionStats, PolicyRequest
from webrl.config import fixed


@dataclass
class SamplingConfig:
    """Decoding parameters."""

    temperature: float = 1.0
    """Softmax temperature of sampling and of the reported log-probs (> 0)."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]; 1 = off."""
    top_k: int = 0
    """Top-k sampling; 0 = off (the RL default: sample the real distribution)."""
    max_new_tokens: int = 256
    """Response length cap per turn."""
    greedy: bool = fixed(False, "rollouts sample; evaluation's worker decodes greedily")
    """Argmax decoding (evaluation); temperature/top-p/top-k are ignored."""
    stop_at_tool_call: bool = fixed(True, "decoding stops after a complete tool or skill call, as the env runs one per turn")
    """Stop right after `</tool_call>` (besides <|im_end|> / <|endoftext|>)."""

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"SamplingConfig.temperature must be > 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingConfig.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0 or self.max_new_tokens < 1:
            raise ValueError(f"SamplingConfig.top_k must be >= 0 and max_new_tokens >= 1, "
                             f"got {self.top_k}, {self.max_new_tokens}")


@dataclass
class GeneratorConfig:
    """A generator policy: prompt building plus sampling."""

    prompt: PromptConfig = field(default_factory=PromptConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_batch_size: int = fixed(16, "the run sets it to inference.max_batch_size")
    """Requests per `generate` call; larger batches are split."""
    sparse_prefill: str = ""
    """MMInference-style sparse attention in the prompt's prefill (`webrl.policy.sparse_attention`),
    decode unchanged: "" / false = off, "auto" = the checkpoint's sparse_patterns.json (default
    patterns without one), or a path to a sparse_patterns.json."""

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError(f"GeneratorConfig.max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.sparse_prefill is False or self.sparse_prefill is None or str(self.sparse_prefill).lower() == "false":
            self.sparse_prefill = ""  # YAML / command-line `false` means off
        if not isinstance(self.sparse_prefill, str) or not (
                self.sparse_prefill in ("", "auto") or self.sparse_prefill.endswith(".json")):
            raise ValueError(f"GeneratorConfig.sparse_prefill must be '' (off), 'auto' or a path to a .json "
                             f"patterns file, got {self.sparse_prefill!r}")


class GeneratorPolicy:
    """`Policy` over a generator backend and the checkpoint's processor (its tokenizer renders
    prompts). `model` may be a transformers model (wrapped in a `TransformersBackend`), a
    backend, or None (prompts only: `act` then refuses)."""

    def __init__(self, model: Any, processor: Any, config: Optional[GeneratorConfig] = None,
                 family: Optional[str] = None):
        from webrl.models import model_family

        self.processor = processor
        self.config = config or GeneratorConfig()
        self.tokenizer = processor.tokenizer
        if model is not None and not is_backend(model):
            self._check_pointer(model)
            model = self._in_process(model)
        self.backend = model
        model_config = getattr(model, "model_config", None)
        self.family = family or (model_family(model_config) if model_config is not None else "qwen2.5-vl")
        if self.config.sparse_prefill and (model is None or model.capabilities.engine != "transformers"):
            raise ValueError("generator.sparse_prefill needs the model in this process (rollout.engine=transformers); "
                             "an inference server runs its own prefill: leave generator.sparse_prefill empty")
        ip = processor.image_processor
        self.builder = PromptBuilder(self.config.prompt, self.family, self.count_text_tokens,
                                     factor=ip.patch_size * ip.merge_size)
        names = STOP_TOKENS if self.config.sampling.stop_at_tool_call else STOP_TOKENS[1:]
        vocab = self.tokenizer.get_vocab()
        self.stop_ids = [vocab[t] for t in names if t in vocab]

    def _check_pointer(self, model: Any) -> None:
        if self.config.prompt.action_format == "pointer" and getattr(model, "element_pointer", None) is None:
            raise ValueError("generator.prompt.action_format='pointer' needs a model with an element pointer "
                             "(a tiny model with model.tiny_element_tokens=128, or a pointer checkpoint: "
                             "config.json has 'webrl_pointer')")

    def _in_process(self, model: Any) -> Any:
        from webrl.engines.transformers import TransformersBackend

        sparse = None
        if self.config.sparse_prefill:
            from webrl.policy.sparse_attention import SparsePrefill

            sparse = SparsePrefill.for_model(model, self.config.sparse_prefill)
        return TransformersBackend(model, self.processor, self.config.max_batch_size, sparse)

    @property
    def model(self) -> Any:
        """The transformers model in this process (None over a server)."""
        return getattr(self.backend, "model", None)

    @property
    def model_config(self) -> Any:
        """The checkpoint's Hugging Face config (hidden size, image token id), on any backend."""
        return self.backend.model_config

    def count_text_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    # -- encoding (shared with the SFT path) -----------------------------------------------------
    def encode(self, prompts: Sequence[RenderedPrompt]):
        """Processor batch (left-padded) for rendered prompts."""
        images = [im.to_pil() for p in prompts for im in p.images]
        cfg = self.config.prompt
        kwargs = dict(text=[p.text for p in prompts], return_tensors="pt", padding=True, padding_side="left")
        if images:
            kwargs.update(images=images, size={"shortest_edge": cfg.min_pixels, "longest_edge": cfg.max_pixels})
        return self.processor(**kwargs)

    def prompt_ids(self, prompt: RenderedPrompt) -> list[int]:
        """The ids the model reads for one rendered prompt, without decoding any pixels: each
        image placeholder becomes its smart_resize token count, which is what the processor
        inserts (`encode`; equality tested). SFT renders thousands of turns through this."""
        cfg = self.config.prompt
        return self.text_ids(prompt.text, prompt.images, (cfg.min_pixels, cfg.max_pixels))

    def text_ids(self, text: str, images: Sequence[Any], pixel_bounds: tuple[int, int]) -> list[int]:
        """Token ids of a ChatML `text` whose k-th `<|image_pad|>` stands for images[k], each
        expanded to its token count at `pixel_bounds` (min_pixels, max_pixels)."""
        pad = "<|image_pad|>"
        counts = [image_token_count(*im.size, self.builder.factor, *pixel_bounds) for im in images]
        pieces = text.split(pad)
        if len(pieces) != len(counts) + 1:
            raise ValueError(f"prompt has {len(pieces) - 1} image placeholders for {len(counts)} images")
        text = pieces[0] + "".join(pad * n + rest for n, rest in zip(counts, pieces[1:]))
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    # -- acting ----------------------------------------------------------------------------------
    def request(self, prompt: RenderedPrompt, prompt_ids: Optional[list[int]] = None, **overrides: Any
                ) -> GenerateRequest:
        """The backend row that samples this policy's response to `prompt` (overrides: forced_ids,
        max_new_tokens, hidden_layer, ...)."""
        s, cfg = self.config.sampling, self.config.prompt
        row = dict(prompt_ids=list(prompt_ids if prompt_ids is not None else self.prompt_ids(prompt)),
                   images=list(prompt.images), pixel_bounds=(cfg.min_pixels, cfg.max_pixels),
                   max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                   greedy=s.greedy, stop_ids=tuple(self.stop_ids))
        return GenerateRequest(**{**row, **overrides})

    def act(self, requests: Sequence[PolicyRequest]) -> list[Decision]:
        if self.backend is None:
            raise RuntimeError("this GeneratorPolicy renders prompts only (no model or backend)")
        t0 = time.perf_counter()
        prompts = [self.builder.render(r) for r in requests]
        rows = [self.request(p, seed=r.seed) for p, r in zip(prompts, requests)]
        generated = self.backend.generate(rows)
        latency = time.perf_counter() - t0
        return [self.decision(req, prompt, row.prompt_ids, g, latency)
                for req, prompt, row, g in zip(requests, prompts, rows, generated)]

    def text_of(self, ids: Sequence[int]) -> str:
        """Decoded response text, the end-of-turn tokens (frame, not content) removed."""
        text = self.tokenizer.decode(list(ids), skip_special_tokens=False)
        for tok in STOP_TOKENS[1:]:  # <|im_end|> / <|endoftext|>
            text = text.removesuffix(tok)
        return text

    def decision(self, request: PolicyRequest, prompt: RenderedPrompt, prompt_ids: Optional[list[int]],
                 generated: Generated, latency_s: float) -> Decision:
        """The `Decision` of a sampled response (parsed by the prompt's action format)."""
        ids = list(generated.ids)
        text = self.text_of(ids)
        prompt_ids = list(prompt_ids) if prompt_ids is not None else self.prompt_ids(prompt)
        stats = DecisionStats(prompt_tokens=len(prompt_ids), response_tokens=len(ids), latency_s=latency_s,
                              history_turns=len(request.history), history_dropped=prompt.history_dropped,
                              images=len(prompt.images), over_budget=prompt.over_budget,
                              finish_reason=generated.finish, cached_tokens=generated.cached_tokens)
        return Decision(parsed=self.builder.format.parse(text, prompt.geometry), response_text=text,
                        prompt_ids=prompt_ids, response_ids=ids, logprobs=list(generated.logprobs[:len(ids)]),
                        images=list(prompt.images), stats=stats)

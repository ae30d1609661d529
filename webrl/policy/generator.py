"""`GeneratorPolicy`: a transformers Qwen-VL model answering a batch of requests.

Token-in/token-out: the prompt ids handed back are the processor's ids for the rendered
prompt (the ones the model read), the response ids are the sampled ones up to and including
the first stop token, and nothing is re-tokenised later.

Log-probs: log softmax(logits / temperature) of each sampled token, from the raw logits of the
same forward passes that sampled it. top-p / top-k truncation shapes what is sampled but is
not applied to the log-probs, because the learner recomputes exactly softmax(logits / T) over
the same ids (as verl and slime do); with top-p = 1 and top-k off (the RL default) the two are
the same distribution. Greedy decoding reports temperature-1 log-probs.

Memory: the log-probs are taken inside generation by `SampledLogprobs`, a logits processor that
sees each step's raw logits (B, V) and keeps only the sampled token's log-prob (B,), so no
(B, N, V) stack of logits is kept (transformers' `output_logits=True` holds one per new token:
about 10 GB in fp32 at batch 16, 1,024 new tokens and Qwen's 151,936-token vocabulary). The
vision-token suppression is applied by the same processor, after the log-probs are taken, so
they stay the raw distribution's as the learner computes it.

Departures from `model.generate` defaults: top-k is off (transformers samples with top-k 50
otherwise), and the checkpoint's generation config (Qwen ships top_k=1, repetition_penalty
1.05) is overridden, so samples follow the distribution the learner optimises.
Batched requests are left-padded; images of different sizes go through one processor call.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

from webrl.chat.tokens import STOP_TOKENS, VISION_TOKENS
from webrl.policy.sampled_logprobs import LogitsProcessorList, SampledLogprobs
from webrl.policy.images import image_token_count
from webrl.policy.prompt import PromptBuilder, PromptConfig, RenderedPrompt
from webrl.policy.types import Decision, DecisionStats, PolicyRequest


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
    greedy: bool = False
    """Argmax decoding (evaluation); temperature/top-p/top-k are ignored."""
    stop_at_tool_call: bool = True
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
    max_batch_size: int = 16
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
    """`Policy` over a local Qwen2.5-VL / Qwen3-VL model and its processor."""

    def __init__(self, model, processor, config: Optional[GeneratorConfig] = None, family: Optional[str] = None):
        from webrl.models import model_family

        self.model, self.processor = model, processor
        self.config = config or GeneratorConfig()
        self.family = family or model_family(model)
        self.tokenizer = processor.tokenizer
        # model None: prompts only (a server engine's model is the server's)
        if self.config.prompt.action_format == "pointer" and model is not None \
                and getattr(model, "element_pointer", None) is None:
            raise ValueError("generator.prompt.action_format='pointer' needs a model with an element pointer "
                             "(a tiny model with model.tiny_element_tokens=128, or a pointer checkpoint: "
                             "config.json has 'webrl_pointer')")
        ip = processor.image_processor
        self.builder = PromptBuilder(self.config.prompt, self.family, self.count_text_tokens,
                                     factor=ip.patch_size * ip.merge_size)
        names = STOP_TOKENS if self.config.sampling.stop_at_tool_call else STOP_TOKENS[1:]
        vocab = self.tokenizer.get_vocab()
        self.stop_ids = [vocab[t] for t in names if t in vocab]
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.stop_ids[-1]
        # Vision placeholders must never be sampled: the model counts every <|image_pad|> in
        # its input against the images, so one in a response breaks the learner's forward pass.
        # Trained checkpoints give them ~0 probability; random tiny models do not. The reported
        # log-probs stay those of the unmasked softmax (what the learner recomputes), a
        # negligible difference wherever the masked tokens carry ~0 mass.
        self.suppress_ids = [vocab[t] for t in VISION_TOKENS if t in vocab]
        self.sparse = None
        if self.config.sparse_prefill and model is None:
            raise ValueError("generator.sparse_prefill needs the model in this process (rollout.engine=transformers); "
                             "an inference server runs its own prefill: leave generator.sparse_prefill empty")
        if self.config.sparse_prefill:
            from webrl.policy.sparse_attention import SparsePrefill

            self.sparse = SparsePrefill.for_model(model, self.config.sparse_prefill)

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
        cfg, pad = self.config.prompt, "<|image_pad|>"
        counts = [image_token_count(*im.size, self.builder.factor, cfg.min_pixels, cfg.max_pixels)
                  for im in prompt.images]
        pieces = prompt.text.split(pad)
        if len(pieces) != len(counts) + 1:
            raise ValueError(f"prompt has {len(pieces) - 1} image placeholders for {len(counts)} images")
        text = pieces[0] + "".join(pad * n + rest for n, rest in zip(counts, pieces[1:]))
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    # -- acting ----------------------------------------------------------------------------------
    def act(self, requests: Sequence[PolicyRequest]) -> list[Decision]:
        out: list[Decision] = []
        step = self.config.max_batch_size
        for start in range(0, len(requests), step):
            out.extend(self._act_batch(requests[start:start + step]))
        return out

    def _act_batch(self, requests: Sequence[PolicyRequest]) -> list[Decision]:
        import torch

        t0 = time.perf_counter()
        prompts = [self.builder.render(r) for r in requests]
        batch = self.encode(prompts).to(self.model.device)
        s = self.config.sampling
        temperature = 1.0 if s.greedy else s.temperature
        recorder = SampledLogprobs(temperature, self.suppress_ids)
        gen_kwargs = dict(max_new_tokens=s.max_new_tokens, eos_token_id=self.stop_ids, pad_token_id=self.pad_id,
                          return_dict_in_generate=True, repetition_penalty=1.0,
                          logits_processor=LogitsProcessorList([recorder]),
                          top_k=None if s.greedy else (s.top_k or 0))
        if s.greedy:
            gen_kwargs.update(do_sample=False, temperature=None, top_p=None)
        else:
            gen_kwargs.update(do_sample=True, temperature=s.temperature, top_p=s.top_p)
        sparse = self.sparse.prefill(batch) if self.sparse is not None else contextlib.nullcontext()
        with torch.no_grad(), sparse:
            gen = self.model.generate(**batch, **gen_kwargs)
        P = batch["input_ids"].shape[1]
        new = gen.sequences[:, P:]  # (B, N)
        logp = recorder.finish(gen.sequences)  # (B, N)
        latency = time.perf_counter() - t0
        decisions = []
        for b, (req, prompt) in enumerate(zip(requests, prompts)):
            ids, finish = self._cut(new[b].tolist())
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
            for tok in STOP_TOKENS[1:]:  # <|im_end|> / <|endoftext|> are frame, not content
                text = text.removesuffix(tok)
            prompt_ids = batch["input_ids"][b][batch["attention_mask"][b].bool()].tolist()
            stats = DecisionStats(prompt_tokens=len(prompt_ids), response_tokens=len(ids), latency_s=latency,
                                  history_turns=len(req.history), history_dropped=prompt.history_dropped,
                                  images=len(prompt.images), over_budget=prompt.over_budget, finish_reason=finish)
            decisions.append(Decision(
                parsed=self.builder.format.parse(text, prompt.geometry), response_text=text,
                prompt_ids=prompt_ids, response_ids=ids, logprobs=logp[b, :len(ids)].tolist(),
                images=list(prompt.images), stats=stats))
        return decisions

    def _cut(self, ids: list[int]) -> tuple[list[int], str]:
        """Response ids up to and including the first stop token."""
        for i, t in enumerate(ids):
            if t in self.stop_ids:
                return ids[:i + 1], "stop"
        return ids, "length"

"""`TransformersBackend`: a transformers Qwen2.5-VL / Qwen3-VL model in this process behind the
generator backend interface (webrl/policy/backend.py). `webrl serve` serves this same class.

Two paths:
- Plain rows (sampling only: the rollout's common case) with the same sampling settings go
  through one left-padded `model.generate` call per `max_batch_size` rows, the vision
  placeholders masked and the sampled tokens' log-probs taken inside generation
  (`SampledLogprobs`: no (B, N, V) logits stack is kept).
- Other rows (forced ids, hidden states) run one at a time: one forward over the part of
  prompt + forced ids the cache does not hold, the forced ids' log-probs from its logits, the
  hidden rows of the computed positions, then token-by-token decoding from its KV cache.

Sampling, on both paths: each row draws from its own `torch.Generator` (`pick_token`; batched
through `RowSampler`), seeded from the request's `seed` (`webrl.policy.seeds`) or, without one,
from the process's RNG. So a seeded row's tokens do not depend on the rows it shares a batch with
(up to the forward pass's numerics, which batch composition can move in the last bits).

Prefix cache (webrl's, the in-process counterpart of SGLang's radix cache): the KV caches of the
last `cache_entries` single-row requests are kept with their ids (image pads keyed by the image's
bytes, as SGLang keys them) and the model state a continuation needs (Qwen-VL's `rope_deltas`,
the element pointer's line keys) and their namespace (`GenerateRequest.cache_key`, SGLang's
`extra_key`). A request whose ids start like a kept one of its namespace reuses the common
prefix, at most P + F - 1 tokens, and at most P - 1 when it scores forced ids (the same limits as
SGLang's `Req._compute_max_prefix_len` with logprob_start_len = P - 1); the entry is consumed.
A reuse must cover every image of the request, and with an element pointer the recomputed
suffix may hold no element line (the pointer's keys come from the cached prompt). This is what
makes a cascade's deferral cost no second prefill.

Log-probs: log softmax(logits / T) of each token, T = the sampling temperature (1 for greedy),
top-p / top-k not applied (the learner recomputes exactly this). Forced ids are scored at the
request's `score_temperature`.
"""
from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from webrl.models.tokens import VISION_TOKENS
from webrl.policy.backend import (ENGINE_CAPABILITIES, GenerateRequest, Generated, cut_at_stop, image_keyed,
                                  reusable_prefix)
from webrl.policy.sampled_logprobs import LogitsProcessorList, RowSampler, SampledLogprobs, pick_token


@dataclass
class CacheEntry:
    """A kept KV cache: `key` the image-keyed ids it holds, the model state to restore."""

    key: list
    cache: Any
    rope_deltas: Any
    pointer_keys: Any
    line_starts: list[int]
    """Positions of element-line starts in `key` (pointer models)."""
    cache_key: Optional[str] = None
    """The namespace it was computed under (`GenerateRequest.cache_key`)."""


class TransformersBackend:
    """The in-process generator backend over `model` and its `processor`."""

    capabilities = ENGINE_CAPABILITIES["transformers"]

    def __init__(self, model: Any, processor: Any, max_batch_size: int = 16, sparse: Any = None,
                 cache_entries: int = 4):
        self.model, self.processor, self.sparse = model, processor, sparse
        self.max_batch_size, self.cache_entries = max_batch_size, cache_entries
        tokenizer = processor.tokenizer
        vocab = tokenizer.get_vocab()
        self.image_pad_id = vocab["<|image_pad|>"]
        self.suppress_ids = [vocab[t] for t in VISION_TOKENS if t in vocab]
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else vocab.get("<|endoftext|>", 0)
        self._entries: OrderedDict[int, CacheEntry] = OrderedDict()
        self._next_entry = 0
        self.lock = threading.RLock()
        from webrl.models.pointer import get_pointer

        self.pointer = get_pointer(model)

    @property
    def model_config(self) -> Any:
        return self.model.config

    # -- inputs ------------------------------------------------------------------------------------
    def inputs(self, rows: Sequence[tuple[list[int], list, tuple[int, int]]]) -> dict:
        """Left-padded model inputs for (ids, images, pixel bounds) rows: the ids as given, the
        images' pixels and grids; a row whose image pads do not match its images' grids is refused."""
        width = max(len(ids) for ids, _, _ in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        pixels, grids = [], []
        ip = self.processor.image_processor
        for b, (ids, images, bounds) in enumerate(rows):
            input_ids[b, width - len(ids):] = torch.tensor(ids)
            mask[b, width - len(ids):] = 1
            pads = sum(1 for t in ids if t == self.image_pad_id)
            if not images:
                if pads:
                    raise ValueError(f"the prompt holds {pads} <|image_pad|> tokens but no image")
                continue
            kwargs = {"size": {"shortest_edge": bounds[0], "longest_edge": bounds[1]}} if bounds[1] else {}
            vision = ip(images=[im.to_pil() for im in images], return_tensors="pt", **kwargs)
            expected = int(vision["image_grid_thw"].prod(-1).sum()) // ip.merge_size ** 2
            if expected != pads:
                raise ValueError(f"the prompt holds {pads} <|image_pad|> tokens but its {len(images)} image(s) "
                                 f"resize to {expected} visual tokens at pixel bounds {bounds}")
            pixels.append(vision["pixel_values"])
            grids.append(vision["image_grid_thw"])
        out = {"input_ids": input_ids, "attention_mask": mask, "mm_token_type_ids": (input_ids == self.image_pad_id).long()}
        if pixels:
            out.update(pixel_values=torch.cat(pixels), image_grid_thw=torch.cat(grids))
        return {k: v.to(self.model.device) for k, v in out.items()}

    # -- generation --------------------------------------------------------------------------------
    def generate(self, requests: Sequence[GenerateRequest]) -> list[Generated]:
        out: list[Optional[Generated]] = [None] * len(requests)
        with self.lock:
            groups: dict[tuple, list[int]] = {}
            for i, r in enumerate(requests):
                if r.plain and not self._hit(r):
                    groups.setdefault(r.sampling_key(), []).append(i)
                else:
                    out[i] = self._row(r)
            for rows in groups.values():
                for start in range(0, len(rows), self.max_batch_size):
                    chunk = rows[start:start + self.max_batch_size]
                    for i, g in zip(chunk, self._batch([requests[i] for i in chunk])):
                        out[i] = g
        return out  # type: ignore[return-value]

    def _batch(self, rows: Sequence[GenerateRequest]) -> list[Generated]:
        """Plain rows of one sampling setting: one left-padded `generate`."""
        first = rows[0]
        batch = self.inputs([(r.prompt_ids, r.images, r.pixel_bounds) for r in rows])
        temperature = 1.0 if first.greedy else first.temperature
        recorder = SampledLogprobs(temperature, self.suppress_ids)
        processors = [recorder]
        if not first.greedy:  # every row sampled from its own generator, `generate` then picks it greedily
            processors.append(RowSampler([self._generator(r.seed) for r in rows], first.temperature,
                                         first.top_p, first.top_k))
        kwargs = dict(max_new_tokens=first.max_new_tokens, eos_token_id=list(first.stop_ids) or None,
                      pad_token_id=self.pad_id, return_dict_in_generate=True, repetition_penalty=1.0,
                      logits_processor=LogitsProcessorList(processors), do_sample=False, temperature=None,
                      top_p=None, top_k=None)
        if not first.stop_ids:
            kwargs["eos_token_id"] = self.model.generation_config.eos_token_id
        sparse = self.sparse.prefill(batch) if self.sparse is not None else contextlib.nullcontext()
        self._fresh_state()
        with torch.no_grad(), sparse:
            gen = self.model.generate(**batch, **kwargs)
        P = batch["input_ids"].shape[1]
        new, logp = gen.sequences[:, P:], recorder.finish(gen.sequences)  # (B, N), (B, N)
        stops = list(first.stop_ids) or _as_list(self.model.generation_config.eos_token_id)
        out = []
        for b, r in enumerate(rows):
            ids, finish = cut_at_stop(new[b].tolist(), stops)
            out.append(Generated(ids, logp[b, :len(ids)].tolist(), finish, None, None, 0, len(r.prompt_ids), 0))
        return out

    def _row(self, r: GenerateRequest) -> Generated:
        """One row: forward the uncached part, score the forced ids, keep hidden rows, decode."""
        seq, P, F = r.sequence, len(r.prompt_ids), len(r.forced_ids)
        key = image_keyed(seq, r.images, self.image_pad_id)
        limit = min(len(seq) - 1, P - 1 if F else len(seq) - 1)
        entry, start = self._take(key, limit, r.cache_key)
        keep = F + 1 if F else 1  # logits rows from position P - 1 on (row i predicts forced[i]), or the last
        if entry is None:
            self._fresh_state()
            inputs = self.inputs([(seq, r.images, r.pixel_bounds)])
            cache = None
        else:
            extra = entry.cache.get_seq_length() - start
            if extra:
                entry.cache.crop(-extra)
            self._restore(entry)
            inputs = {"input_ids": torch.tensor([seq[start:]], device=self.model.device)}
            cache = entry.cache
        sparse = self.sparse.prefill(inputs) if self.sparse is not None and entry is None else contextlib.nullcontext()
        with torch.no_grad(), sparse:
            out = self.model(**inputs, cache=cache, use_cache=True, output_hidden_states=r.hidden_layer is not None,
                             logits_to_keep=min(keep, len(seq) - start))
        logits = out.logits[0].float()  # (k, V) for positions len(seq) - k .. len(seq) - 1
        first_row = len(seq) - logits.shape[0]
        forced = None
        if F:
            rows = logits[P - 1 - first_row:len(seq) - 1 - first_row]  # (F, V): row i predicts forced[i]
            logp = torch.log_softmax(rows / r.score_temperature, -1)
            forced = logp.gather(-1, torch.tensor(r.forced_ids, device=logp.device).view(-1, 1)).flatten().tolist()
        hidden = out.hidden_states[r.hidden_layer][0].float().cpu() if r.hidden_layer is not None else None
        ids, logprobs, finish = self._decode(out.cache, logits[-1], r)
        held = out.cache.get_seq_length() - len(seq)  # decoded ids fed through the cache
        self._keep(key + ids[:held], out.cache, r.cache_key)
        return Generated(ids, logprobs, finish, forced, hidden, start, len(seq), start)

    def _decode(self, cache: Any, logits: torch.Tensor, r: GenerateRequest) -> tuple[list[int], list[float], str]:
        """Continue from `cache` whose last logits are `logits` (V,): up to max_new_tokens ids."""
        if not r.max_new_tokens:
            return [], [], "none"
        temperature = 1.0 if r.greedy else r.temperature
        generator = None if r.greedy else self._generator(r.seed)
        suppress = torch.tensor(self.suppress_ids, dtype=torch.long, device=logits.device)
        ids, logps = [], []
        for _ in range(r.max_new_tokens):
            masked = logits.index_fill(-1, suppress, float("-inf")) if len(suppress) else logits
            token = pick_token(masked, r.temperature, r.top_p, r.top_k, r.greedy, generator)
            ids.append(token)
            logps.append(float(torch.log_softmax(logits / temperature, -1)[token]))
            if token in r.stop_ids:
                return ids, logps, "stop"
            if len(ids) == r.max_new_tokens:
                break
            with torch.no_grad():
                out = self.model(input_ids=torch.tensor([[token]], device=self.model.device), cache=cache, use_cache=True)
            logits = out.logits[0, -1].float()
        return ids, logps, "length"

    def _generator(self, seed: Optional[int]) -> torch.Generator:
        """A row's sampling generator: seeded from `seed`, or from the process's RNG when None."""
        if seed is None:
            seed = int(torch.randint(0, 2 ** 62, ()))
        return torch.Generator(device=self.model.device).manual_seed(int(seed))

    # -- the prefix cache --------------------------------------------------------------------------
    def _hit(self, r: GenerateRequest) -> bool:
        """Whether a kept cache holds a prefix of `r` worth continuing (then it takes the row path)."""
        if not self._entries:
            return False
        key = image_keyed(r.sequence, r.images, self.image_pad_id)
        return any(self._reusable(e, key, n) for e in self._entries.values() if e.cache_key == r.cache_key
                   and (n := min(reusable_prefix(e.key, key), len(key) - 1)) > 0)

    def _take(self, key: list, limit: int, cache_key: Optional[str]) -> tuple[Optional[CacheEntry], int]:
        """The kept entry of `cache_key` sharing the longest prefix with `key` (consumed), and the
        reuse length."""
        best, best_len = None, 0
        for k, entry in self._entries.items():
            if entry.cache_key != cache_key:
                continue
            n = min(reusable_prefix(entry.key, key), limit)
            if n > best_len and self._reusable(entry, key, n):
                best, best_len = k, n
        if best is None:
            return None, 0
        return self._entries.pop(best), best_len

    def _reusable(self, entry: CacheEntry, key: list, n: int) -> bool:
        """Every image of the request lies in the reused prefix; with a pointer, no element line
        starts after it in either sequence (the kept line keys stay right)."""
        if any(isinstance(t, tuple) for t in key[n:]):
            return False
        if self.pointer is None:
            return True
        return not any(p >= n for p in entry.line_starts) and not any(p >= n for p in self._line_starts(key))

    def _line_starts(self, key: list) -> list[int]:
        p = self.pointer
        ids = [t[0] if isinstance(t, tuple) else t for t in key]
        newline = set(p.newline_token_ids)
        return [i for i in range(1, len(ids)) if p.first <= ids[i] < p.first + p.count and ids[i - 1] in newline]

    def _keep(self, key: list, cache: Any, cache_key: Optional[str]) -> None:
        if not self.cache_entries:
            return
        state = getattr(self.model.model, "rope_deltas", None)
        pointer = self.pointer.list_keys if self.pointer is not None else None
        starts = self._line_starts(key) if self.pointer is not None else []
        self._entries[self._next_entry] = CacheEntry(key, cache, state, pointer, starts, cache_key)
        self._next_entry += 1
        while len(self._entries) > self.cache_entries:
            self._entries.popitem(last=False)

    def _fresh_state(self) -> None:
        """Before a forward from an empty cache: no stale rope deltas of another prompt."""
        if hasattr(self.model.model, "rope_deltas"):
            self.model.model.rope_deltas = None

    def _restore(self, entry: CacheEntry) -> None:
        if hasattr(self.model.model, "rope_deltas"):
            self.model.model.rope_deltas = entry.rope_deltas
        if self.pointer is not None:
            self.pointer.list_keys = entry.pointer_keys

    def load_state(self, weights: Any) -> None:
        """Copy `weights` (name -> tensor, transformers names) into the model in place; every kept
        KV cache is dropped (it holds the old weights' states)."""
        params = dict(self.model.named_parameters())
        unknown = [k for k in weights if k not in params]
        if unknown:
            raise KeyError(f"weights name {len(unknown)} parameters the model does not have, e.g. {unknown[:3]}")
        with self.lock, torch.no_grad():
            for name, value in weights.items():
                params[name].copy_(torch.as_tensor(value, dtype=params[name].dtype))
            self.clear_cache()

    def clear_cache(self) -> None:
        """Drop every kept KV cache (after a weight update they hold the old weights' states)."""
        self._entries.clear()


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [] if value is None else [value]

"""Sparse prefill for the policy's Qwen-VL model, through transformers' AttentionInterface.

    sparse = SparsePrefill.for_model(model, "auto")         # or a sparse_patterns.json path
    with sparse.prefill(batch):                              # batch: the processor's output
        model.generate(**batch, ...)                         # prefill sparse, decode unchanged

`enable_sparse_attention(model)` registers `ATTENTION_NAME` (attention function and, for the
mask, transformers' sdpa mask builder) and switches the text model to it. The function runs
the block-sparse attention (`webrl.kernels.sparse_prefill`) only while a `prefill(...)`
context is active and only for the full-prompt causal pass (query length = key length > 1,
as many rows as the context has layouts). Everything else (decode steps with one query, the vision tower's
non-causal attention, forwards outside the context, e.g. the learner's) goes to the model's
previous implementation, so outside the context the model computes what it computed before
(one exception: "eager" is not in transformers' function registry, so a model that was on eager
runs sdpa there: equal up to float rounding, not bit for bit).

Batches: each row is computed on its non-padded tokens (the key-validity row of the mask);
padded query rows get zeros (no real token reads them: they are masked as keys everywhere).
Layouts come from the input ids (`image_token_id` runs) and `image_grid_thw`, row by row.

`SparseSearchConfig` + `search_main` are `webrl sparse-search`: calibration prompts through
the model with q/k captured per layer, per-head recalls, `sparse_patterns.json` beside the
checkpoint (`webrl.kernels.pattern_search`). Calibration prompts are synthetic here: the
recipe's layout (system text, screenshots of `image_tokens` merged tokens, text) with
rendered-text screenshots; real rollout prompts would calibrate better (not wired).
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from webrl.config import ConfigError
from webrl.kernels.pattern_search import PATTERNS_FILE, PatternTable, head_recalls
from webrl.kernels.sparse_prefill import (ModalityLayout, SparsePrefillConfig, build_block_plan, layout_from_ids,
                                          sparse_prefill_attention)

ATTENTION_NAME = "webrl_sparse_prefill"
_ACTIVE: contextvars.ContextVar[Optional["_PrefillState"]] = contextvars.ContextVar("webrl_sparse", default=None)
_FALLBACK: dict[int, str] = {}  # id(text config) -> the implementation it had before


@dataclass
class _PrefillState:
    table: PatternTable
    layouts: list[ModalityLayout]
    backend: str
    capture: Optional[dict] = None  # layer -> [(q, k) per row], for the pattern search


def _valid_keys(attention_mask, row: int, length: int, device) -> torch.Tensor:
    """(T_row,) indices of the row's non-padded tokens, from the 4-D mask's last query row."""
    if attention_mask is None:
        return torch.arange(length, device=device)
    last = attention_mask[row, 0, -1]  # (K,) what the last (never padded) query may read
    valid = last if last.dtype == torch.bool else last > torch.finfo(last.dtype).min / 2
    return torch.nonzero(valid).flatten()


def sparse_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """AttentionInterface function: query (B, H, Q, D), key/value (B, Hkv, K, D) -> ((B, Q, H, D), None)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    state = _ACTIVE.get()
    B, H, Q, _ = query.shape
    if (state is None or Q == 1 or key.shape[2] != Q or not getattr(module, "is_causal", False)
            or len(state.layouts) != B):
        fallback = _FALLBACK.get(id(getattr(module, "config", None)), "sdpa")
        function = ALL_ATTENTION_FUNCTIONS["sdpa"] if fallback == "eager" else ALL_ATTENTION_FUNCTIONS[fallback]
        return function(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    out = query.new_zeros(B, H, Q, value.shape[-1])
    for row in range(B):
        keep = _valid_keys(attention_mask, row, Q, query.device)
        layout = state.layouts[row]
        if layout.length != len(keep):
            raise RuntimeError(f"sparse prefill: row {row} has {len(keep)} tokens but its layout {layout.length}")
        q, k, v = query[row][:, keep], key[row][:, keep], value[row][:, keep]  # (H|Hkv, T, D)
        if state.capture is not None:
            state.capture.setdefault(module.layer_idx, []).append((q.detach().float(), k.detach().float()))
        patterns = state.table.for_layer(module.layer_idx, H)
        plan = build_block_plan(q, k, layout, patterns, state.table.config)
        out[row][:, keep] = sparse_prefill_attention(q, k, v, plan, scale, state.backend).to(out.dtype)
    return out.transpose(1, 2).contiguous(), None


def enable_sparse_attention(model) -> None:
    """Register `ATTENTION_NAME` and switch the text model to it (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION_NAME, sparse_attention_forward)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)
    text = model.config.get_text_config()
    if text._attn_implementation != ATTENTION_NAME:
        _FALLBACK[id(text)] = text._attn_implementation or "sdpa"
        model.set_attn_implementation({"text_config": ATTENTION_NAME})


def patterns_for(model, setting: str) -> PatternTable:
    """`generator.sparse_prefill`: a patterns file, or "auto" = the checkpoint's sparse_patterns.json
    when it has one, else every head on the default pattern with default settings."""
    if setting == "auto":
        beside = Path(getattr(model, "name_or_path", "") or ".") / PATTERNS_FILE
        return PatternTable.load(beside) if beside.is_file() else PatternTable()
    if not Path(setting).is_file():
        raise ConfigError(f"generator.sparse_prefill: no patterns file at {setting!r} "
                          f"(use '' to turn it off, 'auto', or a {PATTERNS_FILE} path)")
    return PatternTable.load(setting)


class SparsePrefill:
    """Switches a model to the sparse prefill and sets the per-batch layouts."""

    def __init__(self, model, table: PatternTable, backend: str = "auto"):
        enable_sparse_attention(model)
        self.model, self.table, self.backend = model, table, backend
        self.image_token_id = model.config.image_token_id
        self.merge_size = model.config.vision_config.spatial_merge_size

    @classmethod
    def for_model(cls, model, setting: str, backend: str = "auto") -> "SparsePrefill":
        return cls(model, patterns_for(model, setting), backend)

    def layouts(self, batch) -> list[ModalityLayout]:
        """Per row, the layout of its non-padded ids; images are consumed in row order."""
        ids, mask = batch["input_ids"], batch.get("attention_mask")
        grids = batch.get("image_grid_thw")
        out, used = [], 0
        for row in range(ids.shape[0]):
            row_ids = ids[row] if mask is None else ids[row][mask[row].bool()]
            runs = int(((row_ids == self.image_token_id).int().diff(prepend=row_ids.new_zeros(1).int()) == 1).sum())
            row_grids = None if grids is None else grids[used:used + runs]
            used += runs
            out.append(layout_from_ids(row_ids.cpu(), self.image_token_id, None if row_grids is None
                                       else row_grids.cpu(), self.merge_size))
        return out

    @contextlib.contextmanager
    def prefill(self, batch, capture: Optional[dict] = None):
        token = _ACTIVE.set(_PrefillState(self.table, self.layouts(batch), self.backend, capture))
        try:
            yield
        finally:
            _ACTIVE.reset(token)


@dataclass
class SparseSearchConfig:
    """`webrl sparse-search`: per-head patterns for a checkpoint, saved beside it."""

    checkpoint: str = ""
    """Model folder (written to: <checkpoint>/sparse_patterns.json unless `out` is set)."""
    out: str = ""
    """Where to write the patterns file; "" = beside the checkpoint."""
    prompts: int = 2
    """Synthetic calibration prompts (each: system text, `images` screenshots, text)."""
    images: int = 2
    """Screenshots per calibration prompt."""
    image_tokens: int = 256
    """Merged visual tokens per screenshot (the recipe's ~1,000 costs T² memory per head)."""
    config: SparsePrefillConfig = field(default_factory=SparsePrefillConfig)
    """Block size and budget the recalls are measured at (saved in the file)."""
    min_recall: float = 0.9
    """Heads whose best sparse pattern keeps less of the dense mass stay dense."""

    def __post_init__(self):
        if isinstance(self.config, dict):
            self.config = SparsePrefillConfig(**self.config)
        for name in ("prompts", "images", "image_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"sparse_search.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.min_recall <= 1:
            raise ConfigError(f"sparse_search.min_recall must be in [0, 1], got {self.min_recall}")


def _calibration_batch(processor, config: SparseSearchConfig, seed: int):
    """A processor batch in the recipe's layout, with screenshots of rendered text lines."""
    from PIL import Image, ImageDraw

    side = int(config.image_tokens ** 0.5)
    factor = processor.image_processor.patch_size * processor.image_processor.merge_size
    system = "<|im_start|>system\nYou are a web agent. Answer with one action.<|im_end|>\n"
    images, parts = [], [system + "<|im_start|>user\n"]
    for n in range(config.images):
        image = Image.new("RGB", (side * factor, side * factor), (245, 245, 245))
        draw = ImageDraw.Draw(image)
        for line in range(0, side * factor, 14):
            draw.text((4 + (line * 7 + seed * 13 + n) % 40, line), f"item {seed}.{n}.{line} Buy", fill=(20, 20, 20))
        images.append(image)
        parts.append(f"Step {n}: <|vision_start|><|image_pad|><|vision_end|>\n")
    parts.append("Goal: find the cheapest blue mug and add it to the cart.<|im_end|>\n<|im_start|>assistant\n")
    pixels = side * side * factor * factor
    return processor(text=["".join(parts)], images=images, return_tensors="pt",
                     size={"shortest_edge": pixels, "longest_edge": pixels})


def search_main(config: SparseSearchConfig) -> int:
    """Run the search and write the patterns file; prints the chosen pattern counts."""
    from webrl.models import load_model

    if not config.checkpoint or not Path(config.checkpoint).is_dir():
        raise ConfigError(f"sparse_search.checkpoint must be a model folder, got {config.checkpoint!r}")
    model, processor = load_model(config.checkpoint)
    sparse = SparsePrefill(model, PatternTable(config=config.config, default="dense"), backend="torch")
    table = PatternTable(config=config.config)
    for seed in range(config.prompts):
        batch = _calibration_batch(processor, config, seed)
        captured: dict = {}
        with torch.no_grad(), sparse.prefill(batch, capture=captured):
            model(**batch)
        layout = sparse.layouts(batch)[0]
        for layer, ((q, k),) in captured.items():
            table.add_recalls(layer, head_recalls(q, k, layout, config.config))
        table.prompts += 1
    table.choose(config.min_recall)
    path = table.save(Path(config.out) if config.out else Path(config.checkpoint) / PATTERNS_FILE)
    counts = {}
    for names in table.layers.values():
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    print(f"sparse-search: {path} heads per pattern {counts}")
    return 0

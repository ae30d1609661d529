"""Tiny random-init Qwen2.5-VL / Qwen3-VL models for CPU runs and tests.

`tiny_model(family)` builds, deterministically from `seed`: a byte-level BPE tokenizer trained
on a web-agent corpus (`webrl.models.tokenizer`), an image-only processor
(`webrl.models.processor`), and a model from a small config with random weights, and saves all
three with `save_pretrained` so `load_model(path)` (or plain transformers after
`register_processors()`) reads them back in any process.

Config choices (checked against transformers 5.x): the text part's `mrope_section` must sum to head_dim / 2; head_dim
is hidden / heads = 128 / 4 = 32, so the sections are Qwen's 2:3:3 split [4, 6, 6] for
Qwen2.5-VL and Qwen3-VL's 24:20:20 split scaled to [6, 5, 5] (interleaved). Qwen2.5-VL patches
are 14 px (factor 28) with window attention (window 112 px, last block full attention);
Qwen3-VL patches are 16 px (factor 32) with deepstack features from vision block 0.
The image processor's default pixel range is small (64 merged tokens at most) so a screenshot
costs little on CPU; the policy passes its own min/max pixels per call.
"""
from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from webrl.models.tokens import (END_OF_TEXT, END_OF_TURN_TOKENS, IM_END, IMAGE_PAD, VIDEO_PAD, VISION_END,
                               VISION_START, VISION_TOKENS)

FAMILIES = ("qwen2.5-vl", "qwen3-vl")


@dataclass
class TinyModelConfig:
    """Sizes of a tiny Qwen-VL model (about 0.6 M parameters at the defaults)."""

    family: str = "qwen2.5-vl"
    """Model family: "qwen2.5-vl" or "qwen3-vl"."""
    hidden: int = 128
    """Text hidden size; head_dim = hidden / heads."""
    layers: int = 2
    """Text decoder layers."""
    heads: int = 4
    """Text attention heads (and key/value heads: no grouped-query sharing at this size)."""
    intermediate: int = 256
    """Text MLP width."""
    vision_hidden: int = 64
    """Vision tower width."""
    vision_depth: int = 2
    """Vision tower blocks."""
    vision_heads: int = 2
    """Vision attention heads."""
    vocab_size: int = 1024
    """Upper bound on the trained tokenizer's vocabulary (the model's embedding has this many rows)."""
    max_image_tokens: int = 64
    """Default image budget of the processor, in merged visual tokens (max_pixels = this * factor^2)."""
    min_image_tokens: int = 4
    """Default minimum image size, in merged visual tokens (min_pixels = this * factor^2)."""
    element_tokens: int = 0
    """Element tokens `<e0>`.. in the tokenizer (within vocab_size) and an element pointer in the
    model (`webrl.models.pointer`, for action_format="pointer"); 0 = none."""

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"TinyModelConfig.family must be one of {FAMILIES}, got {self.family!r}")
        if self.hidden % self.heads or (self.hidden // self.heads) % 16:
            raise ValueError(f"TinyModelConfig.hidden / heads must be a multiple of 16 "
                             f"(mrope needs it), got {self.hidden} / {self.heads}")
        if self.vision_hidden % self.vision_heads:
            raise ValueError("TinyModelConfig.vision_hidden must be divisible by vision_heads")
        for name in ("layers", "vision_depth", "vocab_size", "max_image_tokens", "min_image_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"TinyModelConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.element_tokens <= self.vocab_size // 2:
            raise ValueError(f"TinyModelConfig.element_tokens must be in [0, vocab_size / 2], got {self.element_tokens}")

    @property
    def patch_size(self) -> int:
        return 14 if self.family == "qwen2.5-vl" else 16

    @property
    def factor(self) -> int:
        """Pixels per merged visual token side: patch size x spatial merge (2)."""
        return 2 * self.patch_size


def _mrope_section(head_dim: int, family: str) -> list[int]:
    half = head_dim // 2  # rotary pairs; the three sections (t, h, w) must sum to this
    if family == "qwen2.5-vl":
        t = half // 4  # Qwen2.5-VL: 16/24/24 of 64 -> 1/4, 3/8, 3/8
        return [t, (half - t) // 2, half - t - (half - t) // 2]
    hw = (half * 5) // 16  # Qwen3-VL: 24/20/20 of 64 -> 3/8, 5/16, 5/16
    return [half - 2 * hw, hw, hw]


def model_config(cfg: TinyModelConfig, tokenizer):
    """The transformers config of the tiny model, with special-token ids from `tokenizer`."""
    from transformers import Qwen2_5_VLConfig, Qwen3VLConfig

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (*VISION_TOKENS, *END_OF_TURN_TOKENS)}
    head_dim = cfg.hidden // cfg.heads
    text = dict(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
                num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
                num_key_value_heads=cfg.heads, max_position_embeddings=32768,
                bos_token_id=ids[END_OF_TEXT], eos_token_id=ids[IM_END], pad_token_id=ids[END_OF_TEXT])
    vision = dict(depth=cfg.vision_depth, hidden_size=cfg.vision_hidden, num_heads=cfg.vision_heads,
                  intermediate_size=2 * cfg.vision_hidden, out_hidden_size=cfg.hidden,
                  patch_size=cfg.patch_size, spatial_merge_size=2, temporal_patch_size=2)
    tokens = dict(image_token_id=ids[IMAGE_PAD], video_token_id=ids[VIDEO_PAD],
                  vision_start_token_id=ids[VISION_START], vision_end_token_id=ids[VISION_END])
    section = _mrope_section(head_dim, cfg.family)
    if cfg.family == "qwen2.5-vl":
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": section}
        vision.update(window_size=4 * cfg.factor, fullatt_block_indexes=[cfg.vision_depth - 1])
        return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **tokens)
    text.update(head_dim=head_dim, rope_parameters={
        "rope_type": "default", "rope_theta": 5e6, "mrope_section": section, "mrope_interleaved": True})
    vision.update(num_position_embeddings=576, deepstack_visual_indexes=[0], hidden_act="gelu_pytorch_tanh")
    return Qwen3VLConfig(text_config=text, vision_config=vision, **tokens)


def image_processor(cfg: TinyModelConfig):
    """The PIL-backed Qwen2-VL image processor with the family's patch size and normalisation."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    f2 = cfg.factor * cfg.factor
    kwargs = dict(patch_size=cfg.patch_size, merge_size=2, temporal_patch_size=2,
                  size={"shortest_edge": cfg.min_image_tokens * f2, "longest_edge": cfg.max_image_tokens * f2})
    if cfg.family == "qwen3-vl":  # Qwen3-VL normalises to [-1, 1]
        kwargs.update(image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
    return Qwen2VLImageProcessorPil(**kwargs)


def tiny_model(family: str = "qwen2.5-vl", corpus: Optional[Iterable[str]] = None,
               out_dir: Optional[str | os.PathLike] = None, seed: int = 0, hidden: int = 128,
               layers: int = 2, return_objects: bool = False, **sizes):
    """Build, save and return a tiny random-init model of `family`.

    corpus: lines to train the tokenizer on (default: `default_corpus(seed)`).
    out_dir: where to save (default: a new temp folder). sizes: other `TinyModelConfig` fields.
    Returns the folder path, or (path, model, processor) with `return_objects=True`.
    Deterministic: the same arguments give the same tokenizer and the same weights.
    """
    from transformers import GenerationConfig

    from webrl.models.corpus import default_corpus
    from webrl.models.processor import image_only_processor_class, register_processors
    from webrl.models.tokenizer import train_tokenizer

    cfg = TinyModelConfig(family=family, hidden=hidden, layers=layers, **sizes)
    register_processors()
    lines = list(corpus) if corpus is not None else default_corpus(seed)
    tokenizer = train_tokenizer(lines, vocab_size=cfg.vocab_size, element_tokens=cfg.element_tokens)
    config = model_config(cfg, tokenizer)
    cls = image_only_processor_class(config.model_type)
    processor = cls(image_processor(cfg), tokenizer, chat_template=tokenizer.chat_template)

    if cfg.element_tokens:
        from webrl.models.pointer import CONFIG_KEY, pointer_spec

        setattr(config, CONFIG_KEY, pointer_spec(tokenizer, cfg.element_tokens))
    model = _random_model(config, seed)
    stop_ids = [tokenizer.convert_tokens_to_ids(t) for t in END_OF_TURN_TOKENS]
    model.generation_config = GenerationConfig(
        eos_token_id=stop_ids, pad_token_id=tokenizer.pad_token_id, do_sample=False)
    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix=f"tiny-{family}-"))
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    (out / "webrl_tiny.json").write_text(json.dumps({**dataclasses.asdict(cfg), "seed": seed}, indent=1))
    model.eval()
    return (str(out), model, processor) if return_objects else str(out)


def _random_model(config, seed: int):
    """Random init under a fixed seed, without touching the caller's global RNG state."""
    import torch
    from transformers import AutoModelForImageTextToText

    from webrl.models.pointer import attach_pointer

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
        attach_pointer(model)  # when config.webrl_pointer is set
    return model

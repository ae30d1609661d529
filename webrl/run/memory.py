"""Bytes a model holds per GPU while it trains and while it generates: shapes and arithmetic.

    shapes = load_shapes("qwen3-vl-4b")                          # or a config.json / checkpoint folder
    lm = learner_memory(shapes, ranks=4, stage=1, dtype_bytes=2, tokens=16384, response_tokens=2048)
    rm = rollout_memory(shapes, dtype_bytes=2, batch=16, prompt_tokens=8192, new_tokens=256)

Pure functions of a model's shapes and a few counts; `webrl.run.plan` reads the counts from a
run's config and `webrl.run.plan_report` prints them (`webrl plan`).

Notation: P parameters (Pt trainable), N learner data-parallel ranks (resources.learner_ranks),
d bytes per element of the training / inference dtype, T tokens of a micro-batch
(learner.batching.token_budget), L layers, H hidden, Hq = heads * head_dim, Hkv = kv_heads * head_dim,
I MLP width, V vocabulary; vision: Hv, Iv, Lv blocks, Np patches in a micro-batch.

Model states per learner GPU follow the ZeRO paper's mixed-precision accounting (Rajbhandari et al.
2020, Table 1), as DeepSpeed's ZeRO optimizers allocate them: weights d*P, gradients d*Pt, optimizer
12*Pt (fp32 master copy, Adam m and v; DeepSpeed's ZeRO-1/2 optimizer keeps the fp32 copy of its
partition in fp32 training too). Stage 1 divides the optimizer by N, stage 2 the gradients as well,
stage 3 the weights as well. Stage 0 is plain AdamW: 8*Pt of m, v in fp32 training; with bf16
DeepSpeed's BF16_Optimizer adds the fp32 master (12*Pt) and fp32 gradient accumulators (4*Pt).
The optimizer step adds fp32 temporaries: at stages 1-3 DeepSpeed flattens the partition's
gradients into one fp32 tensor (stage_1_and_2.py `step`: `flatten(averaged_gradients).to(fp32)`) and
AdamW's update makes a partition-sized temporary (its denominator), 8*Pt/N; at stage 0, 4*Pt.
(These were added after the first CPU measurement fell 26% short at the 81M-parameter model;
benchmarks/results/memory_plan_2026-12-01 gives the ratios with and without them.) The
reference model (learner.reference != none) is a copy in the training dtype: whole on every rank
at stages 0-2, partitioned over the ranks at stage 3 (`LearnerWorker._build_reference`).

Activations (the interpretation this module makes; measured against CPU peaks in
benchmarks/memory_plan.py). Bytes per token per decoder layer, counting the tensors autograd keeps
in transformers' Qwen2.5-VL / Qwen3-VL decoder layer with an attention kernel that keeps no T x T
scores (flash / memory-efficient SDPA), RMSNorm upcasting to fp32:

    A_layer = 8H (two norms' fp32 inputs) + 4dH (norm outputs, projection inputs)
            + (4 + d)(Hq + Hkv) (Qwen3's q/k norms; 0 for Qwen2.5) + d(3Hq + 2Hkv) (q, k, v,
            attention output and its contiguous copy) + 4dI (gate, up, silu(gate), product)

This is the per-layer count of Korthikanti et al. 2022 ("Reducing Activation Recomputation",
34*s*b*h for a GPT layer) redone for SwiGLU, GQA and fp32 norms. Without checkpointing a
micro-batch keeps L * A_layer * T; with checkpointing (one checkpoint per decoder block) it keeps
each block's input, L * d * H * T, plus one block's recomputed A_layer * T. Both add the backward's
temporaries of one layer, 2d(H + I) * T. Vision blocks: d(9Hv + 2Iv) per patch per block (LayerNorm
and GELU MLP, no norm upcast), or d*Hv per patch per block plus one block when checkpointing; the
patches are those of the micro-batch's screenshots at generator.prompt.max_pixels. Log-probs: the
chunked kernel keeps d*H per response token and a 4 x 1024 x 8192 fp32 working block; an element
pointer model (tiny checkpoints) takes full logits, 4 fp32 copies of (T, V) plus one in d.

Rollout engine per inference GPU: weights d*P; KV cache 2 * L * Hkv * d per token for batch x
(prompt + new tokens) (the batch and prompt length a run plans for: `webrl.run.plan`); the
prefill's peak, one layer's MLP at 3dI per prompt token; logits: the SampledLogprobs path holds
4 (B, V) fp32 tensors at a time, transformers' `output_logits=True` a (B, new tokens, V) fp32
stack (plan.full_logits=true counts that one).
Not counted: the CUDA context and allocator fragmentation (plan.reserve_gb is kept free for them),
vision activations in the rollout prefill, DeepSpeed's communication buckets.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webrl.config import ConfigError

GIB = 1024 ** 3
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
PROMPT_TEXT_TOKENS = 1024
"""Assumed text tokens of a turn's prompt besides its screenshots (for images per micro-batch)."""
LOGPROB_WORK_BYTES = 4 * 1024 * 8192 * 4
"""The chunked log-prob kernel's working blocks (TokenLogprobsConfig defaults, fp32)."""

# Published shapes (config.json of Qwen/Qwen3-VL-4B-Instruct; tests/fixtures/qwen3_vl_4b_config.json is a copy).
MODEL_SHAPES: dict[str, dict[str, Any]] = {
    "qwen3-vl-4b": {
        "model_type": "qwen3_vl", "tie_word_embeddings": True,
        "text_config": {"hidden_size": 2560, "num_hidden_layers": 36, "num_attention_heads": 32,
                        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 9728,
                        "vocab_size": 151936, "tie_word_embeddings": True},
        "vision_config": {"depth": 24, "hidden_size": 1024, "intermediate_size": 4096, "num_heads": 16,
                          "out_hidden_size": 2560, "patch_size": 16, "spatial_merge_size": 2,
                          "temporal_patch_size": 2, "in_channels": 3, "num_position_embeddings": 2304,
                          "deepstack_visual_indexes": [5, 11, 17]}},
}


@dataclass(frozen=True)
class ModelShapes:
    """The shapes the plan needs, read from a Hugging Face Qwen2.5-VL / Qwen3-VL config."""

    family: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    vision_hidden: int
    vision_depth: int
    vision_intermediate: int
    vision_out: int
    patch: int
    merge: int
    temporal_patch: int
    in_channels: int
    position_embeddings: int = 0
    deepstack: int = 0
    pointer: bool = False

    @property
    def text_parameters(self) -> int:
        """Embedding + L layers + final norm (+ lm_head unless tied, + an element pointer's H x H + 1)."""
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        attention = h * q + 2 * h * kv + q * h
        attention += 2 * self.head_dim if self.family == "qwen3-vl" else q + 2 * kv  # q/k norms | qkv biases
        layer = attention + 3 * h * self.intermediate + 2 * h
        pointer = h * h + 1 if self.pointer else 0
        return self.vocab * h * (1 if self.tied else 2) + self.layers * layer + h + pointer

    @property
    def vision_parameters(self) -> int:
        """Patch embedding (+ positions), Lv blocks, the merger (+ Qwen3-VL's deepstack mergers)."""
        hv, iv, wide = self.vision_hidden, self.vision_intermediate, self.vision_hidden * self.merge ** 2
        patch = self.in_channels * self.temporal_patch * self.patch ** 2 * hv
        attention = hv * 3 * hv + 3 * hv + hv * hv + hv
        if self.family == "qwen3-vl":  # LayerNorms, GELU MLP with biases, learned positions
            block = 2 * 2 * hv + attention + hv * iv + iv + iv * hv + hv
            merger = wide * wide + wide + wide * self.vision_out + self.vision_out
            return (patch + hv + self.position_embeddings * hv + self.vision_depth * block
                    + merger + 2 * hv + self.deepstack * (merger + 2 * wide))
        block = 2 * hv + attention + 2 * (hv * iv + iv) + iv * hv + hv  # RMSNorms, gated MLP
        return patch + self.vision_depth * block + hv + wide * wide + wide + wide * self.vision_out + self.vision_out

    @property
    def parameters(self) -> int:
        return self.text_parameters + self.vision_parameters


def shapes_from_hf_config(cfg: dict[str, Any]) -> ModelShapes:
    """ModelShapes of a config.json dict (model_type qwen2_5_vl or qwen3_vl)."""
    kind = cfg.get("model_type")
    if kind not in ("qwen2_5_vl", "qwen3_vl"):
        raise ConfigError(f"plan.model: model_type must be qwen2_5_vl or qwen3_vl, got {kind!r}")
    text, vision = cfg.get("text_config") or cfg, cfg["vision_config"]
    heads = text["num_attention_heads"]
    qwen3 = kind == "qwen3_vl"
    return ModelShapes(
        family="qwen3-vl" if qwen3 else "qwen2.5-vl", hidden=text["hidden_size"], layers=text["num_hidden_layers"],
        heads=heads, kv_heads=text.get("num_key_value_heads") or heads,
        head_dim=text.get("head_dim") or text["hidden_size"] // heads, intermediate=text["intermediate_size"],
        vocab=text["vocab_size"], tied=bool(cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
        vision_hidden=vision["hidden_size"], vision_depth=vision["depth"],
        vision_intermediate=vision["intermediate_size"], vision_out=vision["out_hidden_size"],
        patch=vision["patch_size"], merge=vision.get("spatial_merge_size", 2),
        temporal_patch=vision.get("temporal_patch_size", 2), in_channels=vision.get("in_channels", 3),
        position_embeddings=vision.get("num_position_embeddings", 0) if qwen3 else 0,
        deepstack=len(vision.get("deepstack_visual_indexes") or []) if qwen3 else 0,
        pointer="webrl_pointer" in cfg)


def load_shapes(spec: str) -> ModelShapes:
    """A shape preset name (MODEL_SHAPES), a config.json path, or a checkpoint folder (webrl:NAME too)."""
    if spec in MODEL_SHAPES:
        return shapes_from_hf_config(MODEL_SHAPES[spec])
    from webrl.models.shipped import resolve_shipped

    path = Path(resolve_shipped(spec))
    path = path / "config.json" if path.is_dir() else path
    if not path.is_file():
        raise ConfigError(f"plan.model / model.path {spec!r}: no config.json there; give a shape preset "
                          f"({', '.join(MODEL_SHAPES)}), a config.json path or a checkpoint folder")
    return shapes_from_hf_config(json.loads(path.read_text()))



# ---------------------------------------------------------------------------------------------
# the estimates (pure arithmetic)
# ---------------------------------------------------------------------------------------------
def zero_state_bytes(params: int, trainable: int, ranks: int, stage: int,
                     dtype_bytes: int) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per rank at ZeRO `stage` over `ranks` ranks."""
    d, n = dtype_bytes, ranks
    weights = d * params / (n if stage == 3 else 1)
    if stage == 0:
        fp32 = d == 4
        return weights, d * trainable + (0 if fp32 else 4 * trainable), (8 if fp32 else 12) * trainable
    gradients = d * trainable / (n if stage >= 2 else 1)
    return weights, gradients, 12 * trainable / n


def layer_activation_bytes(shapes: ModelShapes, dtype_bytes: int) -> int:
    """A_layer: bytes autograd keeps per token in one decoder layer (module docstring)."""
    d, h, i = dtype_bytes, shapes.hidden, shapes.intermediate
    q, kv = shapes.heads * shapes.head_dim, shapes.kv_heads * shapes.head_dim
    qk_norms = (4 + d) * (q + kv) if shapes.family == "qwen3-vl" else 0
    return 8 * h + 4 * d * h + qk_norms + d * (3 * q + 2 * kv) + 4 * d * i


def vision_block_bytes(shapes: ModelShapes, dtype_bytes: int) -> int:
    """Bytes autograd keeps per patch in one vision block."""
    return dtype_bytes * (9 * shapes.vision_hidden + 2 * shapes.vision_intermediate)


@dataclass(frozen=True)
class LearnerMemory:
    """Bytes per learner GPU (rank). `activations` are without checkpointing, `activations_checkpointed`
    with it; `total` counts the one `checkpointing` selects."""

    weights: float
    gradients: float
    optimizer: float
    reference: float
    activations: float
    activations_checkpointed: float
    logprobs: float
    checkpointing: bool
    step_buffers: float = 0.0
    """The optimizer step's fp32 temporaries (module docstring)."""

    @property
    def total(self) -> float:
        acts = self.activations_checkpointed if self.checkpointing else self.activations
        return (self.weights + self.gradients + self.optimizer + self.step_buffers + self.reference + acts
                + self.logprobs)


def learner_memory(shapes: ModelShapes, *, ranks: int, stage: int, dtype_bytes: int, tokens: int,
                   response_tokens: int, patches: int = 0, checkpointing: bool = False, reference: bool = False,
                   freeze_vision: bool = False) -> LearnerMemory:
    """Per-rank bytes of one micro-batch of `tokens` (T) tokens, `response_tokens` of them on the
    loss mask, and `patches` (Np) vision patches."""
    d, h = dtype_bytes, shapes.hidden
    trainable = shapes.parameters - (shapes.vision_parameters if freeze_vision else 0)
    weights, gradients, optimizer = zero_state_bytes(shapes.parameters, trainable, ranks, stage, d)
    backward_temp = 2 * d * (h + shapes.intermediate) * tokens
    final_norm = (4 * h + 2 * d * h) * tokens
    layer = layer_activation_bytes(shapes, d) * tokens
    full = shapes.layers * layer + final_norm + backward_temp
    kept = shapes.layers * d * h * tokens + layer + final_norm + backward_temp
    if patches and not freeze_vision:
        block = vision_block_bytes(shapes, d) * patches
        full += shapes.vision_depth * block
        kept += shapes.vision_depth * d * shapes.vision_hidden * patches + block
    if shapes.pointer:  # full logits: logits in d, then fp32 copy / scaled / log-softmax / exp
        logprobs = (d + 4 * 4) * shapes.vocab * tokens
    else:
        logprobs = d * h * response_tokens + LOGPROB_WORK_BYTES
    step_buffers = 4 * trainable * (1 if stage == 0 else 2 / ranks)
    reference_bytes = d * shapes.parameters / (ranks if stage == 3 else 1) if reference else 0.0
    return LearnerMemory(weights, gradients, optimizer, reference_bytes,
                         full, kept, logprobs, checkpointing, step_buffers)


@dataclass(frozen=True)
class RolloutMemory:
    """Bytes per rollout inference GPU; `total` counts the logits path `full_logits` selects."""

    weights: float
    kv_cache: float
    prefill: float
    logits_sampled: float
    logits_full: float
    full_logits: bool
    batch: int = 0
    prompt_tokens: int = 0

    @property
    def total(self) -> float:
        logits = self.logits_full if self.full_logits else self.logits_sampled
        return self.weights + self.kv_cache + self.prefill + logits


def rollout_memory(shapes: ModelShapes, *, dtype_bytes: int, batch: int, prompt_tokens: int, new_tokens: int,
                   full_logits: bool = False) -> RolloutMemory:
    d = dtype_bytes
    kv = 2 * shapes.layers * shapes.kv_heads * shapes.head_dim * d * batch * (prompt_tokens + new_tokens)
    return RolloutMemory(weights=d * shapes.parameters, kv_cache=kv,
                         prefill=3 * d * shapes.intermediate * batch * prompt_tokens,
                         logits_sampled=4 * 4 * batch * shapes.vocab, logits_full=4 * batch * new_tokens * shapes.vocab,
                         full_logits=full_logits, batch=batch, prompt_tokens=prompt_tokens)


"""`webrl plan`: where a run's actors go and how many bytes each GPU holds, before anything starts.

    webrl plan --config online_mind2web_qwen3vl_4b plan.model=qwen3-vl-4b plan.gpus_per_node=8 plan.gpu_memory_gb=80
    plan = plan_memory(config, PlanSettings(model="qwen3-vl-4b"))   # MemoryPlan: numbers for tests
    print(format_plan(plan))                                      # placement table + per-GPU table + warnings

Notation: P parameters (Pt trainable), N learner data-parallel ranks (resources.learner_ranks),
d bytes per element of the training / inference dtype, T tokens of a micro-batch
(learner.batching.token_budget), L layers, H hidden, Hq = heads * head_dim, Hkv = kv_heads * head_dim,
I MLP width, V vocabulary; vision: Hv, Iv, Lv blocks, Np patches in a micro-batch.

Placement is `webrl.run.resources` (`request_rows`, `placement_refusal`, `resource_table`) against a
described cluster (`plan.cluster` file, or `plan.nodes` x `plan.gpus_per_node`), not a live one.

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
(prompt + new tokens), the batch being min(inference.max_batch_size, generator.max_batch_size) (with
rollout.engine=server: min(inference.max_batch_size, rollout.server.max_concurrency) spread over the
servers; a launched server queues what it cannot hold, so it fits when one row does: for SGLang
the weights and one row's KV within --mem-fraction-static of the GPU, prefill in chunks from
the rest; for `webrl serve`, which answers one request at a time, one whole row; the plan says
how many rows a server holds at once) and the prompt generator.prompt.max_prompt_tokens unless
plan.prompt_tokens says otherwise (left padding makes every row as long as the longest); the
prefill's peak, one layer's MLP at 3dI per prompt token; logits: the SampledLogprobs path holds
4 (B, V) fp32 tensors at a time, transformers' `output_logits=True` a (B, new tokens, V) fp32
stack (plan.full_logits=true counts that one).
Not counted: the CUDA context and allocator fragmentation (plan.reserve_gb is kept free for them),
vision activations in the rollout prefill, DeepSpeed's communication buckets.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

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


# ---------------------------------------------------------------------------------------------
# a run's plan
# ---------------------------------------------------------------------------------------------
@dataclass
class PlanSettings:
    """`plan.*` keys of `webrl plan`: the model's shapes and the cluster to plan against."""

    model: str = ""
    """Model shapes: empty = model.path's config.json; a shape preset (qwen3-vl-4b), a config.json
    path or a checkpoint folder."""
    cluster: str = ""
    """YAML/JSON cluster description {nodes: [{CPU: 64, GPU: 8}, ...], gpu_memory_gb: 80}; empty =
    plan.nodes identical nodes of plan.gpus_per_node GPUs and plan.cpus_per_node CPUs."""
    nodes: int = 1
    """Nodes of the described cluster (without plan.cluster)."""
    gpus_per_node: int = 8
    """GPUs per node (without plan.cluster)."""
    cpus_per_node: int = 64
    """CPUs per node (without plan.cluster)."""
    gpu_memory_gb: float = 80.0
    """Memory of one GPU in GiB (a cluster file's gpu_memory_gb wins)."""
    reserve_gb: float = 2.0
    """GiB per GPU kept free for the CUDA context, NCCL and allocator fragmentation."""
    prompt_tokens: int = 0
    """Rollout prompt length planned for; 0 = generator.prompt.max_prompt_tokens (the bound)."""
    full_logits: bool = False
    """Count transformers' output_logits stack in the rollout instead of SampledLogprobs."""

    def __post_init__(self) -> None:
        for name in ("nodes", "gpus_per_node", "cpus_per_node", "prompt_tokens"):
            if getattr(self, name) < (0 if name in ("gpus_per_node", "prompt_tokens") else 1):
                raise ConfigError(f"plan.{name} must be >= {0 if name in ('gpus_per_node', 'prompt_tokens') else 1}, "
                                  f"got {getattr(self, name)!r}")
        if not self.gpu_memory_gb > 0 or self.reserve_gb < 0:
            raise ConfigError(f"plan.gpu_memory_gb must be > 0 and plan.reserve_gb >= 0, got "
                              f"{self.gpu_memory_gb!r}, {self.reserve_gb!r}")
        if self.cluster and not self.cluster.endswith((".yaml", ".yml", ".json")):
            raise ConfigError(f"plan.cluster must be a .yaml, .yml or .json file, got {self.cluster!r}")
        defaults = PlanSettings.__dataclass_fields__
        described = [f"plan.{k}" for k in ("nodes", "gpus_per_node", "cpus_per_node")
                     if getattr(self, k) != defaults[k].default]
        if self.cluster and described:
            raise ConfigError(f"{', '.join(described)} describe the cluster only without plan.cluster "
                              f"({self.cluster!r} lists its nodes); set one or the other")


@dataclass(frozen=True)
class MemoryPlan:
    """Placement and per-GPU bytes of a run against a described cluster."""

    shapes: ModelShapes
    learner: LearnerMemory
    rollout: RolloutMemory
    gpu_bytes: float
    """Usable bytes per GPU: plan.gpu_memory_gb minus plan.reserve_gb."""
    learner_gpus: float
    rollout_gpus: float
    placement: str
    """`webrl.run.resources.resource_table` of the run against the described nodes."""
    refusal: Optional[str]
    """Why the actors cannot be placed, or None."""
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What the plan leaves out (printed; they do not decide whether it fits)."""
    batch_keys: str = "inference.max_batch_size / generator.max_batch_size"
    """The settings that bound the rollout batch per GPU (named in its warning)."""
    queues: str = ""
    """How the rollout engine holds its batch: "" all rows at once (the in-process engines);
    "serial" one request at a time, the rest wait (`webrl serve`); "pool" as many rows as its
    KV pool holds, the rest wait (SGLang: weights and KV pool in `pool_bytes`, prefill in chunks
    from the rest of the GPU)."""
    pool_bytes: float = 0.0
    """queues="pool": the bytes SGLang keeps for the weights and the KV pool."""
    engine_lines: list[str] = field(default_factory=list)
    """The engines' capability table and what each of the run's policy wrappers adds."""

    @property
    def fits(self) -> bool:
        return self.refusal is None and not self.warnings

    @property
    def rollout_capacity(self) -> float:
        """Bytes the rollout's need is checked against: one GPU's usable share, or SGLang's pool."""
        return self.pool_bytes if self.queues == "pool" else self.gpu_bytes * _share(self.rollout_gpus or 1.0)

    @property
    def rollout_need(self) -> float:
        """Bytes a rollout GPU must hold: the whole batch; one row ("serial"); the weights and one
        row's KV cache ("pool")."""
        rm = self.rollout
        rows = max(1, rm.batch)
        if self.queues == "serial":
            return rm.weights + (rm.total - rm.weights) / rows
        if self.queues == "pool":
            return rm.weights + rm.kv_cache / rows
        return rm.total

    @property
    def rows_held(self) -> int:
        """Rows of the batch one rollout GPU holds at once (at most the batch)."""
        rm = self.rollout
        if self.queues == "serial":
            return 1
        per_row = (rm.kv_cache if self.queues == "pool" else rm.total - rm.weights) / max(1, rm.batch)
        room = self.rollout_capacity - rm.weights
        return max(0, min(rm.batch, int(room // per_row))) if per_row > 0 else rm.batch


def launch_fraction(launch_args: Sequence[str]) -> Optional[float]:
    """SGLang's --mem-fraction-static from launch_args ("--mem-fraction-static", "0.8" or
    "--mem-fraction-static=0.8"); None when not given (SGLang then picks its own)."""
    args = [part for a in map(str, launch_args) for part in (a.split("=", 1) if a.startswith("--") else [a])]
    if "--mem-fraction-static" not in args[:-1]:
        return None
    value = args[args.index("--mem-fraction-static") + 1]
    try:
        fraction = float(value)
    except ValueError:
        fraction = -1.0
    if not 0 < fraction <= 1:
        raise ConfigError(f"rollout.server.launch_args: --mem-fraction-static must be a number in (0, 1], "
                          f"got {value!r}")
    return fraction


def cluster_description(settings: PlanSettings) -> tuple[list[dict[str, Any]], float]:
    """(nodes as `webrl.run.resources` takes them, GiB per GPU)."""
    if not settings.cluster:
        node = {"CPU": float(settings.cpus_per_node), "GPU": float(settings.gpus_per_node)}
        return [{"node": f"node{i}", **node} for i in range(settings.nodes)], settings.gpu_memory_gb
    from omegaconf import OmegaConf

    path = Path(settings.cluster)
    if not path.is_file():
        raise ConfigError(f"plan.cluster: no file {settings.cluster!r}")
    raw = OmegaConf.to_container(OmegaConf.load(path))
    nodes = raw.get("nodes") if isinstance(raw, dict) else None
    if not nodes or not all(isinstance(n, dict) and "GPU" in n and "CPU" in n for n in nodes):
        raise ConfigError(f"plan.cluster {settings.cluster}: needs 'nodes': a list of {{CPU: n, GPU: n}} mappings")
    return ([{"node": str(n.get("node", f"node{i}")), "CPU": float(n["CPU"]), "GPU": float(n["GPU"])}
             for i, n in enumerate(nodes)], float(raw.get("gpu_memory_gb", settings.gpu_memory_gb)))


def plan_memory(config: Any, settings: PlanSettings) -> MemoryPlan:
    """The plan of a `WebRLConfig` run (training: learner ranks, rollout and evaluation workers)."""
    from webrl.run.resources import placement_refusal, request_rows, resource_table, row_bundles

    shapes = load_shapes(settings.model or config.model.path)
    res, learner, prompt = config.resources, config.learner, config.generator.prompt
    nodes, gpu_gb = cluster_description(settings)
    train_dtype = learner.resolved_dtype("cuda" if res.gpus_per_learner_rank else "cpu")
    new_tokens = config.generator.sampling.max_new_tokens
    image_tokens = prompt.max_pixels // (shapes.patch * shapes.merge) ** 2
    sample_tokens = image_tokens * prompt.num_screenshots + new_tokens + PROMPT_TEXT_TOKENS
    rows = min(learner.batching.max_samples_per_micro_batch, max(1, learner.batching.token_budget // sample_tokens))
    lm = learner_memory(shapes, ranks=res.learner_ranks, stage=learner.zero_stage,
                        dtype_bytes=DTYPE_BYTES[train_dtype], tokens=learner.batching.token_budget,
                        response_tokens=min(rows * new_tokens, learner.batching.token_budget),
                        patches=rows * prompt.num_screenshots * image_tokens * shapes.merge ** 2,
                        checkpointing=learner.gradient_checkpointing, reference=learner.reference != "none",
                        freeze_vision=learner.freeze_vision_tower)
    server = config.rollout.server
    if config.rollout.engine == "server":  # requests spread round robin over the servers, each its own KV cache
        in_flight = min(config.inference.max_batch_size, server.max_concurrency)
        batch = -(-in_flight // max(1, server.num_servers if server.launch != "none" else len(server.urls)))
    else:
        batch = min(config.inference.max_batch_size, config.generator.max_batch_size)
    rm = rollout_memory(shapes, dtype_bytes=DTYPE_BYTES[config.model.dtype], batch=batch,
                        prompt_tokens=settings.prompt_tokens or prompt.max_prompt_tokens, new_tokens=new_tokens,
                        full_logits=settings.full_logits)
    request = request_rows(config, mode="train")
    bundles, kinds = row_bundles(request)
    rollout_gpus = res.gpus_per_inference_worker if config.rollout.engine != "server" else (
        server.gpus_per_server if server.launch != "none" else 0.0)  # the servers hold the rollout's GPUs
    batch_keys = ("rollout.server.max_concurrency (or add rollout.server.num_servers)"
                  if config.rollout.engine == "server" else MemoryPlan.batch_keys)
    usable = gpu_gb * GIB - settings.reserve_gb * GIB
    launched = server.launch if config.rollout.engine == "server" else "none"
    fraction = launch_fraction(server.launch_args) if launched == "sglang" else None
    queues = {"sglang": "pool", "webrl": "serial"}.get(launched, "")
    plan = MemoryPlan(shapes, lm, rm, usable, res.gpus_per_learner_rank, rollout_gpus,
                      resource_table(request, nodes), placement_refusal(bundles, nodes, kinds), batch_keys=batch_keys,
                      queues=queues, pool_bytes=0.0 if queues != "pool" else
                      fraction * gpu_gb * GIB if fraction else usable * _share(rollout_gpus or 1.0))
    plan.warnings.extend(capacity_warnings(plan, learner))
    if queues == "pool":
        held = (f"all {rm.batch} rows in flight at once" if plan.rows_held >= rm.batch else
                f"about {plan.rows_held} of its {rm.batch} rows in flight at once, the rest wait")
        pool = (f"--mem-fraction-static {fraction:g} of the GPU, {plan.pool_bytes / GIB:.1f} GiB" if fraction else
                f"SGLang's own --mem-fraction-static; planned as the usable {plan.pool_bytes / GIB:.1f} GiB")
        plan.notes.append(f"rollout: an SGLang server keeps its weights and KV pool in {pool}, and queues the "
                          f"requests the pool cannot hold (prefill runs in chunks from the rest of the GPU): it "
                          f"needs the weights and one row's KV ({plan.rollout_need / GIB:.1f} GiB); at "
                          f"{rm.prompt_tokens} prompt tokens it holds {held}")
    elif queues == "serial":
        plan.notes.append(f"rollout: `webrl serve` answers one request at a time, so a server needs one row "
                          f"({plan.rollout_need / GIB:.1f} GiB with the weights) and the other {rm.batch - 1} of its "
                          f"{rm.batch} wait")
    if config.rollout.engine == "server" and server.launch == "none":
        plan.notes.append("rollout: the servers at rollout.server.urls were started outside the run; their GPUs "
                          "are not planned here")
    plan.engine_lines.extend(engine_lines(config, shapes, rm.prompt_tokens))
    return plan


def engine_lines(config: Any, shapes: ModelShapes, prompt_tokens: int) -> list[str]:
    """The capability table (`webrl.policy.backend.ENGINE_CAPABILITIES`) and, per wrapper in
    policy.wrappers, what it adds to the rollout: resident bytes, requests and bytes per decision.

    cascade: the heads (fp32, beside the generator: in the inference worker, in process or next
    to its HTTP client) and per decision one prefill-only request whose P hidden rows of H come
    back (fp32; over HTTP on the server engine, P x H x 4 bytes); a deferral then decodes from that
    prefill (a cache hit, no second prefill). loci: no weights of its own (its roles are the
    generator with role prompts, or an endpoint); per decision up to rounds x 2 x (1 + retries)
    role requests before the policy's own. skills: no GPU bytes (the library and its matcher run
    on the CPU); a bound skill replays steps instead of generating them."""
    from webrl.policy.backend import capability_table

    lines = [f"engines (this run: rollout.engine={config.rollout.engine})", capability_table()]
    wrappers = list(config.policy.wrappers)
    if not wrappers:
        return lines + ["policy wrappers: none"]
    lines.append(f"policy wrappers {wrappers}, per inference worker / per decision")
    for name in wrappers:
        if name == "cascade":
            import torch

            from webrl.policy.cascade.heads import CONFIG_FILE, DecisionHeads, HeadsConfig

            saved = Path(config.policy.cascade.heads_dir) / CONFIG_FILE  # the run's heads' settings, at H
            heads_config = HeadsConfig(**json.loads(saved.read_text())["config"]) if saved.is_file() else HeadsConfig()
            with torch.device("meta"):
                heads = DecisionHeads(shapes.hidden, heads_config)
            count = sum(p.numel() for p in heads.parameters())
            rows = prompt_tokens * shapes.hidden * 4
            where = "returned over HTTP" if config.rollout.engine == "server" else "kept in the worker"
            lines.append(f"  cascade: heads {count:,} parameters ({count * 4 / GIB:.3f} GiB fp32); per decision "
                         f"one prefill-only request, its {prompt_tokens} x {shapes.hidden} hidden rows "
                         f"{where} ({rows / 2 ** 20:.1f} MiB fp32); a deferral reuses that prefill")
        elif name == "loci":
            loci = config.policy.loci
            calls = loci.max_rounds * 2 * (1 + loci.retries)
            lines.append(f"  loci: no weights of its own; per decision up to {calls} role requests "
                         f"(policy.loci.max_rounds={loci.max_rounds} x locator + critic x (1 + retries="
                         f"{loci.retries})), each one crop-sized image at most {loci.crop_max_pixels:,} pixels")
        elif name == "skills":
            lines.append("  skills: no GPU bytes (the library and its matcher run on the CPU); a bound skill's "
                         "steps are replayed, not generated")
    return lines


def _share(gpus: float) -> float:
    """GPUs one actor's memory may use: a fraction shares one GPU; the in-process engines use one
    device, so a whole number above 1 still gives one GPU's memory."""
    return gpus if gpus < 1 else 1.0


def capacity_warnings(plan: MemoryPlan, learner: Any) -> list[str]:
    """One line per actor kind whose estimate exceeds its GPU share, naming the settings to change."""
    out = []
    lm, rm = plan.learner, plan.rollout
    if plan.learner_gpus and lm.total > plan.gpu_bytes * _share(plan.learner_gpus):
        fixes = [] if lm.checkpointing else [
            f"learner.gradient_checkpointing=true (activations {lm.activations / GIB:.1f} -> "
            f"{lm.activations_checkpointed / GIB:.1f} GiB)"]
        if learner.zero_stage < 3:
            fixes.append("learner.zero_stage=3")
        fixes += ["a lower learner.batching.token_budget", "more resources.learner_ranks (ZeRO divides by them)"]
        if lm.reference:
            fixes.append("learner.reference=none (kl_coef 0)")
        out.append(f"WARNING: a learner GPU needs {lm.total / GIB:.1f} GiB of "
                   f"{plan.gpu_bytes * _share(plan.learner_gpus) / GIB:.1f} GiB usable; change: " + ", ".join(fixes))
    if plan.rollout_gpus and plan.rollout_need > plan.rollout_capacity:
        out.append(f"WARNING: a rollout inference GPU needs {plan.rollout_need / GIB:.1f} GiB of "
                   f"{plan.rollout_capacity / GIB:.1f} GiB usable (KV cache "
                   f"{rm.kv_cache / GIB:.1f} GiB at {rm.batch} rows x {rm.prompt_tokens} prompt tokens): lower "
                   f"{plan.batch_keys}, generator.prompt.max_prompt_tokens or "
                   "generator.sampling.max_new_tokens (plan.prompt_tokens plans for shorter prompts than the bound)"
                   + ("" if not rm.full_logits else ", or take the SampledLogprobs path (plan.full_logits=false)"))
    return out


def format_plan(plan: MemoryPlan) -> str:
    """The placement table, the per-GPU memory table and the verdict with its warnings."""
    s, lm, rm = plan.shapes, plan.learner, plan.rollout
    gib = lambda b: f"{b / GIB:10.2f}"  # noqa: E731
    lines = [plan.placement, "",
             f"model {s.family}: {s.parameters / 1e9:.3f}B parameters (text {s.text_parameters:,}, vision "
             f"{s.vision_parameters:,}); L={s.layers} H={s.hidden} heads={s.heads}/{s.kv_heads}x{s.head_dim} "
             f"I={s.intermediate} V={s.vocab}", "",
             f"{'per learner GPU':<44}{'GiB':>10}"]
    ckpt = "counted" if lm.checkpointing else "not counted"
    for name, value in (("weights", lm.weights), ("gradients", lm.gradients), ("optimizer states", lm.optimizer),
                        ("optimizer step temporaries", lm.step_buffers), ("reference model", lm.reference),
                        (f"activations, no checkpointing ({'not counted' if lm.checkpointing else 'counted'})",
                         lm.activations),
                        (f"activations, checkpointing ({ckpt})", lm.activations_checkpointed),
                        ("log-prob path", lm.logprobs), ("total", lm.total)):
        lines.append(f"{name:<44}{gib(value)}")
    lines += ["", f"{f'per rollout inference GPU, {rm.batch} rows at once':<44}{'GiB':>10}"]
    for name, value in (("weights", rm.weights), ("KV cache", rm.kv_cache), ("prefill peak (one MLP)", rm.prefill),
                        (f"logits, SampledLogprobs ({'not counted' if rm.full_logits else 'counted'})",
                         rm.logits_sampled),
                        (f"logits, output_logits stack ({'counted' if rm.full_logits else 'not counted'})",
                         rm.logits_full), ("total", rm.total)):
        lines.append(f"{name:<44}{gib(value)}")
    lines.append(f"{'usable per GPU':<44}{gib(plan.gpu_bytes)}")
    lines.append("")
    if plan.refusal:
        lines.append(f"DOES NOT FIT: cannot be placed: {plan.refusal}")
    lines += plan.notes + plan.warnings
    lines += ["", *plan.engine_lines, ""] if plan.engine_lines else []
    usage = [f"{kind} GPU {total / GIB:.1f} of {capacity / GIB:.1f} GiB"
             for kind, total, capacity, gpus in (
                 ("learner", lm.total, plan.gpu_bytes * _share(plan.learner_gpus or 1.0), plan.learner_gpus),
                 ("rollout", plan.rollout_need, plan.rollout_capacity, plan.rollout_gpus)) if gpus]
    lines.append(("FITS" if plan.fits else "DOES NOT FIT") + (f": {', '.join(usage)}" if usage else
                                                             " (no GPUs asked for: nothing to check)"))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _plan_command_schema():
    """`PlanCommandConfig`: built on first use, so the arithmetic above imports no training code."""
    from webrl.run.config import WebRLConfig

    @dataclass
    class PlanCommandConfig(WebRLConfig):
        """A training config plus the `plan.*` keys."""

        plan: PlanSettings = field(default_factory=PlanSettings)
        """Model shapes and the cluster to plan against."""

    return PlanCommandConfig


def __getattr__(name: str):
    if name == "PlanCommandConfig":  # "webrl.run.plan:PlanCommandConfig" for webrl.cli's COMMANDS
        return _plan_command_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_plan_config(preset: Optional[str], overrides: Sequence[str]):
    """The training config of `preset` + overrides, with `plan.*` keys. Keys a preset marks
    required (`???`) and the plan does not read are filled with a placeholder, so
    `webrl plan --config online_mind2web_qwen3vl_4b plan.model=qwen3-vl-4b` needs no task file or judge."""
    from omegaconf import OmegaConf

    from webrl.config import _preset_path, load_config

    given = {o.split("=", 1)[0] for o in overrides}
    fill = []
    if preset:
        for key in OmegaConf.missing_keys(OmegaConf.load(_preset_path(preset))):
            if key not in given:
                fill.append(f"{key}={_placeholder(key)}")
    return load_config(_plan_command_schema(), preset, [*fill, *overrides])


def _placeholder(key: str) -> str:
    """A value that passes validation for a required key the plan never reads."""
    if key == "model.path":
        return ""  # the shapes come from plan.model
    return "http://unset-by-webrl-plan.invalid" if key.endswith("url") else "unset-by-webrl-plan"


def plan_main(argv_or_config: Union[Sequence[str], Any, None] = None) -> int:
    """`webrl plan [--config PRESET] [key=value ...]`: print the plan; 0 = fits, 1 = does not."""
    if argv_or_config is None or isinstance(argv_or_config, (list, tuple)):
        from webrl.config import dashed_overrides
        from webrl.config import describe

        args = list(argv_or_config or [])
        if "--keys" in args:
            for key, tp, default, doc in describe(PlanSettings, "plan."):
                print(f"{key} ({tp}, default {default!r})\n    {doc}")
            print("(and every key of `webrl train --keys`)")
            return 0
        preset = None
        if "--config" in args:
            i = args.index("--config")
            if i + 1 >= len(args):
                raise ConfigError("--config needs a preset name or YAML path")
            preset, args = args[i + 1], args[:i] + args[i + 2:]
        config = load_plan_config(preset, dashed_overrides(args))
    else:
        config = argv_or_config
    if not (config.plan.model or config.model.path):
        raise ConfigError("webrl plan needs model shapes: set plan.model (a shape preset: "
                          f"{', '.join(MODEL_SHAPES)}, a config.json path or a checkpoint folder) or model.path")
    plan = plan_memory(config, config.plan)
    print(format_plan(plan))
    return 0 if plan.fits else 1

"""A run's plan: where its actors go and whether each GPU holds its bytes, before anything starts.

    config = load_plan_config("online_mind2web_qwen3vl_4b", ["plan.model=qwen3-vl-4b"])  # webrl.run.plan_report
    plan = plan_memory(config, config.plan)   # MemoryPlan: placement, per-GPU bytes, warnings (numbers for tests)

Placement is `webrl.run.resources` (`request_rows`, `placement_refusal`, `resource_table`) against a
described cluster (`plan.cluster` file, or `plan.nodes` x `plan.gpus_per_node`), not a live one.

The bytes are `webrl.run.memory`'s arithmetic on the run's counts. The rollout batch per inference
GPU is inference.max_batch_size; with rollout.engine=server it is
min(inference.max_batch_size, rollout.server.max_concurrency) spread over the servers, and a
launched server queues what it cannot hold, so it fits when one row does: for SGLang the weights
and one row's KV within --mem-fraction-static of the GPU, prefill in chunks from the rest; for
`webrl serve`, which answers one request at a time, one whole row (the plan says how many rows a
server holds at once). The prompt is generator.prompt.max_prompt_tokens unless plan.prompt_tokens
says otherwise (left padding makes every row as long as the longest).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from webrl.config import ConfigError
from webrl.run.memory import (DTYPE_BYTES, GIB, PROMPT_TEXT_TOKENS, LearnerMemory, ModelShapes, RolloutMemory,
                              learner_memory, load_shapes, rollout_memory)
from webrl.run.resources import placement_refusal, request_rows, resource_table, row_bundles


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
    batch_keys: str = "inference.max_batch_size"
    """The settings that bound the rollout batch per GPU (named in its warning)."""
    queues: str = ""
    """How the rollout engine holds its batch: "" all rows at once (the in-process engines);
    "serial" one request at a time, the rest wait (`webrl serve`); "pool" as many rows as its
    KV pool holds, the rest wait (SGLang and vLLM: weights and KV pool in `pool_bytes`, prefill in
    chunks from the rest of the GPU)."""
    pool_bytes: float = 0.0
    """queues="pool": the bytes the server keeps for the weights and the KV pool."""
    engine_lines: list[str] = field(default_factory=list)
    """The engines' capability table and what each of the run's policy wrappers adds."""

    @property
    def fits(self) -> bool:
        return self.refusal is None and not self.warnings

    @property
    def rollout_capacity(self) -> float:
        """Bytes the rollout's need is checked against: one GPU's usable share, or SGLang's pool."""
        return self.pool_bytes if self.queues == "pool" else self.gpu_bytes * gpu_share(self.rollout_gpus or 1.0)

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


POOL_FLAGS = {"sglang": "--mem-fraction-static", "vllm": "--gpu-memory-utilization"}
"""The flag giving the share of the GPU a launched server keeps for its weights and KV cache."""


def launch_fraction(launch_args: Sequence[str], kind: str = "sglang") -> Optional[float]:
    """The server's pool share from launch_args: SGLang's --mem-fraction-static, vLLM's
    --gpu-memory-utilization ("--flag", "0.8" or "--flag=0.8"); None when not given (the server
    then picks its own)."""
    flag = POOL_FLAGS[kind]
    args = [part for a in map(str, launch_args) for part in (a.split("=", 1) if a.startswith("--") else [a])]
    if flag not in args[:-1]:
        return None
    value = args[args.index(flag) + 1]
    try:
        fraction = float(value)
    except ValueError:
        fraction = -1.0
    if not 0 < fraction <= 1:
        raise ConfigError(f"rollout.server.launch_args: {flag} must be a number in (0, 1], got {value!r}")
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
        batch = config.inference.max_batch_size
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
    fraction = launch_fraction(server.launch_args, launched) if launched in POOL_FLAGS else None
    queues = {"sglang": "pool", "vllm": "pool", "webrl": "serial"}.get(launched, "")
    plan = MemoryPlan(shapes, lm, rm, usable, res.gpus_per_learner_rank, rollout_gpus,
                      resource_table(request, nodes), placement_refusal(bundles, nodes, kinds), batch_keys=batch_keys,
                      queues=queues, pool_bytes=0.0 if queues != "pool" else
                      fraction * gpu_gb * GIB if fraction else usable * gpu_share(rollout_gpus or 1.0))
    plan.warnings.extend(capacity_warnings(plan, learner))
    if queues == "pool":
        held = (f"all {rm.batch} rows in flight at once" if plan.rows_held >= rm.batch else
                f"about {plan.rows_held} of its {rm.batch} rows in flight at once, the rest wait")
        name, flag = {"sglang": "SGLang", "vllm": "vLLM"}[launched], POOL_FLAGS[launched]
        pool = (f"{flag} {fraction:g} of the GPU, {plan.pool_bytes / GIB:.1f} GiB" if fraction else
                f"{name}'s own {flag}; planned as the usable {plan.pool_bytes / GIB:.1f} GiB")
        plan.notes.append(f"rollout: a {name} server keeps its weights and KV pool in {pool}, and queues the "
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


def gpu_share(gpus: float) -> float:
    """GPUs one actor's memory may use: a fraction shares one GPU; the in-process engines use one
    device, so a whole number above 1 still gives one GPU's memory."""
    return gpus if gpus < 1 else 1.0


def capacity_warnings(plan: MemoryPlan, learner: Any) -> list[str]:
    """One line per actor kind whose estimate exceeds its GPU share, naming the settings to change."""
    out = []
    lm, rm = plan.learner, plan.rollout
    if plan.learner_gpus and lm.total > plan.gpu_bytes * gpu_share(plan.learner_gpus):
        fixes = [] if lm.checkpointing else [
            f"learner.gradient_checkpointing=true (activations {lm.activations / GIB:.1f} -> "
            f"{lm.activations_checkpointed / GIB:.1f} GiB)"]
        if learner.zero_stage < 3:
            fixes.append("learner.zero_stage=3")
        fixes += ["a lower learner.batching.token_budget", "more resources.learner_ranks (ZeRO divides by them)"]
        if lm.reference:
            fixes.append("learner.reference=none (kl_coef 0)")
        out.append(f"WARNING: a learner GPU needs {lm.total / GIB:.1f} GiB of "
                   f"{plan.gpu_bytes * gpu_share(plan.learner_gpus) / GIB:.1f} GiB usable; change: " + ", ".join(fixes))
    if plan.rollout_gpus and plan.rollout_need > plan.rollout_capacity:
        out.append(f"WARNING: a rollout inference GPU needs {plan.rollout_need / GIB:.1f} GiB of "
                   f"{plan.rollout_capacity / GIB:.1f} GiB usable (KV cache "
                   f"{rm.kv_cache / GIB:.1f} GiB at {rm.batch} rows x {rm.prompt_tokens} prompt tokens): lower "
                   f"{plan.batch_keys}, generator.prompt.max_prompt_tokens or "
                   "generator.sampling.max_new_tokens (plan.prompt_tokens plans for shorter prompts than the bound)"
                   + ("" if not rm.full_logits else ", or take the SampledLogprobs path (plan.full_logits=false)"))
    return out


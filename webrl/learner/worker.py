"""`LearnerWorker`: one DeepSpeed rank (plain class; `LearnerGroup` wraps it in a Ray actor).

Notation: B rows of a micro-batch, T tokens, W ranks, R a sample's response length.

Exact gradient accumulation across micro-batches and ranks. The controller computes the loss
scale (per-sample weights w_b, normaliser N) once over the whole optimizer step's samples
(`webrl.algos.full_batch_scale`), so the micro-batch losses of all ranks *sum* to the full
batch's loss. DeepSpeed averages gradients over the W ranks, so each rank backpropagates
W x its micro-batch loss; the update then equals a single rank's on the same samples (up to
float summation order). Masked filler passes (see `batching`) backpropagate 0 x output.

ZeRO-3 needs every rank to call the same modules in the same order, forward and backward, in
every pass (see `touch_all_outputs`): equal micro-batch counts (`batching.plan_ranks`), the vision
tower run even without images (`model.PolicyModule`), and a loss that reaches every output.

Departure from the usual DeepSpeed loop: we own the accumulation boundary
(`set_gradient_accumulation_boundary`, `backward(scale_wrt_gas=False)`), because the number of
micro-batches depends on the token budget and changes from step to step.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import torch

from webrl.algos import OBJECTIVES, LearnerOutputs, LossScale
from webrl.learner import checkpoint as ckpt
from webrl.learner.batching import RankPlan
from webrl.learner.config import LearnerConfig, LearnerRun
from webrl.learner.engine import (build_optimizer, deepspeed_config, import_deepspeed, init_distributed,
                                  resolve_device, set_distributed_env)
from webrl.learner.metrics import merge_metrics, process_memory_mib  # noqa: F401 (benchmarks import it here)
from webrl.learner.model import PolicyModule, enable_checkpointing, pad_id
from webrl.learner.rank_weights import RankWeights
from webrl.learner.samples import LearnerSample, check_image_tokens, collate
from webrl.learner.weight_broadcast import ServerTargets
from webrl.learner.vllm_transfer import VLLMTargets
from webrl.learner.weight_buckets import TensorSpec
from webrl.learner.weights import WeightUpdate


_group_users = 0
"""Learners of this process on torch's default process group (several one-rank learners in one
process share it; the last `shutdown` destroys it)."""


@dataclass
class StepScale:
    """The loss scale of one optimizer step, restricted to a rank's samples.

    sample_weight: one w_b per sample given to the rank (same order); normalizer, num_samples:
    the full step's N and S (see `webrl.algos.aggregation`)."""

    sample_weight: list[float]
    normalizer: float
    num_samples: float

    def select(self, rows: Sequence[int]) -> LossScale:
        return LossScale(torch.tensor([self.sample_weight[i] for i in rows], dtype=torch.float32),
                         torch.tensor(self.normalizer, dtype=torch.float32),
                         torch.tensor(self.num_samples, dtype=torch.float32))


@dataclass
class ForwardResult:
    """Per-sample outputs of a forward-only pass, in the order of the samples given.
    logprobs[i]: (R_i,) response log-probs; values[i]: the value estimate, or None."""

    logprobs: list[np.ndarray]
    values: Optional[list[float]] = None


class LearnerWorker:
    """One rank: policy (+ value head), optional frozen reference, DeepSpeed engine.

    config: how to train; run: what to train (model path, seed, the rollout's temperature and
    pixel bounds)."""

    def __init__(self, config: LearnerConfig, run: LearnerRun, rank: int = 0, world_size: int = 1,
                 master_addr: str = "127.0.0.1", master_port: int = 29500, num_cpus: int = 1):
        deepspeed = import_deepspeed()

        from webrl.models import load_model

        self.config, self.run, self.rank, self.world_size = config, run, rank, world_size
        set_distributed_env(rank, world_size, master_addr, master_port)
        self.device = resolve_device()
        if self.device.type == "cpu":
            torch.set_num_threads(max(1, num_cpus))  # the CPUs of the rank's bundle
        self.backend = init_distributed(config.backend, self.device)
        global _group_users
        _group_users += 1  # released in shutdown()
        self._holds_group = True
        ckpt.set_rng_state(_seeded_rng_state(run.seed + rank))
        self.dtype = config.resolved_dtype(self.device.type)
        # loaded once, directly in the training dtype: no fp32 copy of a bf16 checkpoint on the
        # way (DeepSpeed's bf16 optimizer keeps its own fp32 master copy of the partition it owns)
        model, self.processor = load_model(run.model_path, dtype=self.dtype)
        if config.gradient_checkpointing:
            enable_checkpointing(model)
        self.pad_id = pad_id(self.processor, model)
        module = PolicyModule(model, value_head=config.value_head, always_run_vision=config.zero_stage == 3)
        if config.freeze_vision_tower:
            module.freeze_vision_tower()
        module.train()
        optimizer, scheduler = build_optimizer(module, config.optim)
        self.engine, _, _, self.scheduler = deepspeed.initialize(
            model=module, optimizer=optimizer, lr_scheduler=scheduler,
            config=deepspeed_config(config, self.dtype))
        if config.zero_stage == 3:
            deepspeed.zero.register_external_parameter(self.engine.module, module.model.lm_head.weight)
        self.reference = self._build_reference()
        self.weights = RankWeights(self.engine.module, self.processor, rank, config.zero_stage == 3)
        self.policy_version = 0
        self.optimizer_steps = 0

    # -- set-up ---------------------------------------------------------------------------------
    @property
    def module(self) -> PolicyModule:
        return self.engine.module

    def _build_reference(self) -> Any:
        """The frozen reference (None without one). Under ZeRO-3 it is partitioned like the
        policy, a DeepSpeed engine without an optimizer (each rank holds 1/N of its weights and
        gathers a module's shards for its forward), not a full copy on every rank; it then runs
        the vision tower on every pass too, so the ranks gather the same modules in order."""
        if self.config.reference == "none":
            return None
        from webrl.models import load_model

        path = self.run.model_path if self.config.reference == "copy" else self.config.reference
        model, _ = load_model(path, dtype=self.dtype, device=str(self.device))
        zero3 = self.config.zero_stage == 3
        reference = PolicyModule(model, always_run_vision=zero3).eval()
        reference.requires_grad_(False)
        if not zero3:
            return reference
        import deepspeed

        engine, _, _, _ = deepspeed.initialize(model=reference, config=deepspeed_config(self.config, self.dtype))
        deepspeed.zero.register_external_parameter(engine.module, reference.model.lm_head.weight)
        engine.eval()
        return engine

    def _tensors(self, samples: Sequence[LearnerSample]):
        batch, extras = collate(samples, self.pad_id, self.processor, self.run.pixel_bounds)
        if batch.image_grid_thw is not None:
            check_image_tokens(batch.input_ids, batch.image_grid_thw, self.module.model.config.image_token_id,
                               self.module.model.config.vision_config.spatial_merge_size)
        move = lambda t: None if t is None else t.to(self.device)  # noqa: E731
        for name in ("input_ids", "attention_mask", "loss_mask", "old_logprobs", "advantages", "ref_logprobs",
                     "group_index", "trajectory_index", "image_grid_thw"):
            setattr(batch, name, move(getattr(batch, name)))
        if batch.pixel_values is not None:
            batch.pixel_values = batch.pixel_values.to(self.device, self._param_dtype())
        for name in ("proximal_logprobs", "old_values", "returns", "action_mask", "coordinate_mask"):
            setattr(extras, name, move(getattr(extras, name)))
        return batch, extras

    def _param_dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.dtype == "bfloat16" else torch.float32

    def _forward(self, module, batch):
        return module(batch.input_ids, batch.attention_mask, batch.loss_mask, batch.pixel_values,
                      batch.image_grid_thw, self.run.temperature)

    # -- training -------------------------------------------------------------------------------
    def train_step(self, samples: Sequence[LearnerSample], plan: RankPlan, scale: StepScale,
                   filler: LearnerSample) -> dict[str, float]:
        """One optimizer step over this rank's micro-batches (indices into `samples`; [] runs
        `filler` masked). Returns this rank's metrics (summed / token-weighted over micro-batches)."""
        objective = OBJECTIVES[self.config.objective]
        parts: list[tuple[dict[str, float], float]] = []
        self.engine.train()
        for k, rows in enumerate(plan):
            self.engine.set_gradient_accumulation_boundary(k == len(plan) - 1)
            batch, extras = self._tensors([samples[i] for i in rows] if rows else [filler])
            logprobs, entropy, values = self._forward(self.engine, batch)
            loss = touch_all_outputs(logprobs, entropy, values)
            if rows:
                outputs = LearnerOutputs(logprobs, entropy, values)
                objective_loss, metrics = objective(outputs, batch, self.config.objective_config, extras=extras,
                                                    scale=scale.select(rows))
                loss = loss + objective_loss
                parts.append((metrics, float(batch.loss_mask.sum())))
            self.engine.backward(loss * self.world_size, scale_wrt_gas=False)
        stage0_norm = self._grad_norm() if self.config.zero_stage == 0 else None
        self.engine.step()
        self.optimizer_steps += 1
        metrics = merge_metrics(parts)
        grad_norm = stage0_norm if stage0_norm is not None else self.engine.get_global_grad_norm()
        metrics.update(grad_norm=float(grad_norm) if grad_norm is not None else 0.0,
                       lr=float(self.scheduler.get_last_lr()[0]), micro_batches=float(len(plan)))
        return metrics

    def _grad_norm(self) -> float:
        """Global L2 norm of the (already all-reduced) gradients before clipping; DeepSpeed
        reports it only for ZeRO 1-3."""
        grads = [p.grad.detach().float() for p in self.module.parameters() if p.grad is not None]
        return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))) \
            if grads else 0.0

    def end_update(self) -> int:
        """Mark the end of one `update`: the weights now form policy version + 1."""
        self.policy_version += 1
        return self.policy_version

    def get_policy_version(self) -> int:
        return self.policy_version

    @torch.no_grad()
    def forward_only(self, samples: Sequence[LearnerSample], plan: RankPlan, filler: LearnerSample,
                     reference: bool = False) -> dict[int, tuple[np.ndarray, Optional[float]]]:
        """Response log-probs (and values) of the policy, or of the frozen reference, for the
        samples named in `plan`: {sample index: ((R,) logprobs, value or None)}."""
        if reference and self.reference is None:
            raise ValueError("reference log-probs were asked for but LearnerConfig.reference is 'none'")
        module = self.reference if reference else self.engine
        self.engine.eval()
        out: dict[int, tuple[np.ndarray, Optional[float]]] = {}
        for rows in plan:
            chosen = [samples[i] for i in rows] if rows else [filler]
            batch, _ = self._tensors(chosen)
            logprobs, _, values = self._forward(module, batch)
            for b, i in enumerate(rows):
                p, n = len(chosen[b].prompt_ids), chosen[b].length
                value = None if values is None else float(values[b])
                out[i] = (logprobs[b, p:n].float().cpu().numpy(), value)
        return out

    # -- weights (`RankWeights`; collective under ZeRO-3: call on every rank) -----------------------
    def full_state_dict(self) -> Optional[dict[str, torch.Tensor]]:
        """The HF model's full state_dict on CPU (rank 0; None elsewhere)."""
        return self.weights.full_state_dict()

    def export_hf(self, path: str) -> str:
        """The policy as a Hugging Face folder at `path`, published atomically (what servers load)."""
        return self.weights.export_hf(path)

    def get_weights(self) -> Optional[WeightUpdate]:
        """Trainable weights stamped with the policy version (rank 0; None on other ranks)."""
        return self.weights.update(self.policy_version)

    def value_head_state(self) -> Optional[dict[str, torch.Tensor]]:
        return self.weights.value_head_state()

    def weight_specs(self) -> list[TensorSpec]:
        return self.weights.specs()

    def host_weight_group(self, timeout_s: float) -> Optional[tuple[str, int]]:
        return self.weights.host_group(timeout_s)

    def join_weight_group(self, world_size: int, backend: str, group_name: str, timeout_s: float,
                          members: Sequence[str] = ()) -> None:
        self.weights.join_group(world_size, backend, group_name, timeout_s, members)

    def join_vllm_servers(self, servers: VLLMTargets) -> None:
        self.weights.join_vllm(servers)

    def broadcast_weights(self, bucket_bytes: int, version: Optional[int] = None,
                          servers: Optional[ServerTargets | VLLMTargets] = None) -> Optional[dict[str, float]]:
        return self.weights.broadcast(bucket_bytes, version, servers)

    # -- checkpoints ------------------------------------------------------------------------------
    def save(self, path: str, client_state: Optional[dict[str, Any]] = None) -> str:
        """Write a checkpoint to `path` atomically (collective: call on every rank)."""
        import torch.distributed as dist

        final = Path(path)
        temp = ckpt.temp_path(final)
        if self.rank == 0:
            shutil.rmtree(temp, ignore_errors=True)
            temp.mkdir(parents=True)
        dist.barrier()
        try:
            self.engine.save_checkpoint(str(temp / "deepspeed"), tag="state")
            ckpt.rng_file(temp, self.rank).parent.mkdir(parents=True, exist_ok=True)
            torch.save(ckpt.rng_state(), ckpt.rng_file(temp, self.rank))
            state_dict = self.full_state_dict() if self.config.checkpoint.export_hf else None
            if self.rank == 0:
                if state_dict is not None:
                    self.module.model.save_pretrained(temp / "hf", state_dict=state_dict)
                    self.processor.save_pretrained(temp / "hf")
                ckpt.write_state(temp, {
                    "policy_version": self.policy_version, "optimizer_steps": self.optimizer_steps,
                    "world_size": self.world_size, "zero_stage": self.config.zero_stage,
                    "client_state": client_state or {}})
        except (OSError, RuntimeError) as error:  # a full disk surfaces from torch as either
            raise ckpt.write_failed(final, temp, error, remove=self.rank == 0) from error
        dist.barrier()
        if self.rank == 0:
            ckpt.publish(temp, final)
            if ckpt.STEP_PATTERN.match(final.name):
                ckpt.prune_checkpoints(final.parent, self.config.checkpoint.keep_last)
        dist.barrier()
        return str(final)

    def load(self, path: str) -> dict[str, Any]:
        """Restore engine, optimizer, scheduler, RNG and counters from `path`; returns the
        client_state given to `save`. Every rank verifies the files first, so a bad checkpoint
        raises `CheckpointError` on all ranks before any collective starts."""
        folder = Path(path)
        ckpt.verify_checkpoint(folder, self.config.checkpoint.verify)
        state = ckpt.read_state(folder)
        for key, mine in (("world_size", self.world_size), ("zero_stage", self.config.zero_stage)):
            if state.get(key) != mine:
                raise ckpt.CheckpointError(
                    f"{folder / ckpt.STATE_FILE}: saved with {key}={state.get(key)}, this learner has {key}={mine} "
                    f"(DeepSpeed ZeRO shards cannot be re-partitioned here)")
        load_path, _ = self.engine.load_checkpoint(str(folder / "deepspeed"), tag="state",
                                                   load_optimizer_states=True, load_lr_scheduler_states=True)
        if load_path is None:
            raise ckpt.CheckpointError(f"DeepSpeed found no checkpoint under {folder / 'deepspeed'}")
        ckpt.set_rng_state(ckpt.load_rng(folder, self.rank))
        self.policy_version = int(state["policy_version"])
        self.optimizer_steps = int(state["optimizer_steps"])
        return dict(state.get("client_state", {}))

    def shutdown(self) -> None:
        """Leave the process group; the last learner of this process destroys it, and DeepSpeed's
        cached groups with it, so a later learner can start in this same process (DeepSpeed keeps
        a clone of the world group in a module global that would otherwise point at the destroyed
        group). One-rank learners in one process (tests, notebooks) share torch's default group:
        one that shuts down must not pull it from under another that is still running."""
        import torch.distributed as dist
        from deepspeed.utils import groups

        global _group_users
        if getattr(self, "_holds_group", False):
            self._holds_group = False
            _group_users -= 1
        if _group_users > 0:
            return
        if dist.is_initialized():
            dist.destroy_process_group()
        groups._WORLD_GROUP = None
        groups._ZERO_PARAM_INTRA_PARALLEL_GROUP = None
        groups._DATA_PARALLEL_GROUP = None
        groups.mesh_device = None
        for cache in (groups._EXPERT_PARALLEL_GROUP, groups._EXPERT_PARALLEL_GROUP_RANKS,
                      groups._EXPERT_DATA_PARALLEL_GROUP, groups._EXPERT_DATA_PARALLEL_GROUP_RANKS,
                      groups._ALL_TO_ALL_GROUP):
            cache.clear()

    def pid(self) -> int:
        return os.getpid()

    def memory_stats(self) -> dict[str, float]:
        """This rank's memory in MiB: current and peak resident set (CPU), peak allocated (GPU)."""
        stats = process_memory_mib()
        if torch.cuda.is_available():
            stats["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
        return stats


def touch_all_outputs(logprobs: torch.Tensor, entropy: torch.Tensor, values: Optional[torch.Tensor]) -> torch.Tensor:
    """0 x (sum of every output of the forward pass): added to every micro-batch's loss so that
    backward reaches each output on every rank, whatever the objective reads.

    Why: ZeRO-3 records the order of module calls in forward *and* backward (one backward hook
    per output tensor that gets a gradient) and checks it with a collective at the start of the
    next forward whenever a rank's own record changed. A masked filler pass (loss on the
    log-probs only) and a GRPO pass (log-probs and entropy, even at entropy_coef 0) differ by
    one hook call, so a rank that ran a filler invalidated its record alone and waited in a
    broadcast that the other ranks never joined (the 2-rank ZeRO-3 hang of the step benchmark).
    """
    total = 0.0 * logprobs.sum() + 0.0 * entropy.sum()
    return total + 0.0 * values.sum() if values is not None else total


def _seeded_rng_state(seed: int) -> dict[str, Any]:
    import random

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return ckpt.rng_state()

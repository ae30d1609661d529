"""torch.distributed set-up, the DeepSpeed config and the client optimizer / LR schedule.

DeepSpeed gets a client `torch.optim.AdamW` (and a `LambdaLR`), never an optimizer named in its
config: named optimizers compile C++ ops on first use (35-70 s on a 2-core CPU, measured).

Inside a Ray actor nobody launched us with `deepspeed` or `torchrun`, so `set_distributed_env`
writes RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT itself. LOCAL_RANK is 0
because Ray gives every actor its own GPU (CUDA_VISIBLE_DEVICES has one entry) or none.
"""
from __future__ import annotations

import copy
import math
import os
import sys
from typing import Any

import torch

from webrl.learner.config import LearnerConfig, OptimConfig


def import_deepspeed() -> Any:
    """`import deepspeed`, without the optional `import mlflow` of DeepSpeed's autotuner (which
    webrl never runs): with mlflow installed (a dev extra here, common on clusters) that import is
    1.4 s of every learner process's start-up, about 40% of DeepSpeed's own 3.4 s. mlflow stays
    importable for everything else (webrl's mlflow tracker) once DeepSpeed has loaded."""
    if "deepspeed" in sys.modules or "mlflow" in sys.modules:
        import deepspeed
        return deepspeed
    sys.modules["mlflow"] = None  # type: ignore[assignment]  # `import mlflow` raises ImportError
    try:
        import deepspeed
    finally:
        if sys.modules.get("mlflow", 0) is None:
            del sys.modules["mlflow"]
    return deepspeed


def set_distributed_env(rank: int, world_size: int, master_addr: str, master_port: int) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK="0",
                      MASTER_ADDR=master_addr, MASTER_PORT=str(master_port))


def resolve_device() -> torch.device:
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


def init_distributed(backend: str, device: torch.device) -> str:
    """Initialise DeepSpeed's (and torch's default) process group from the environment."""
    import deepspeed

    if backend == "auto":
        backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        # DeepSpeed's CPU backend JIT-compiles a shared-memory all-reduce op at init (35-70 s,
        # and a killed build leaves a lock file that makes the next process wait forever). It
        # only speeds up inference all-reduce; gloo does all of our collectives.
        import deepspeed.ops

        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False, verbose=False)
    return backend


def _merge(base: dict, overrides: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def deepspeed_config(config: LearnerConfig, dtype: str) -> dict[str, Any]:
    """The DeepSpeed config dict: ZeRO stage, clipping, bf16; micro-batching is ours (we call
    `set_gradient_accumulation_boundary` and `backward(scale_wrt_gas=False)` ourselves), so the
    batch-size keys only satisfy DeepSpeed's consistency check."""
    zero: dict[str, Any] = {"stage": config.zero_stage}
    if config.zero_stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = False  # we gather for export ourselves
    base = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": config.optim.grad_clip,
        "zero_optimization": zero,
        "bf16": {"enabled": dtype == "bfloat16"},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }
    return _merge(base, dict(config.deepspeed_overrides))


def lr_factor(step: int, optim: OptimConfig) -> float:
    """Multiplier of optim.lr after `step` optimizer steps: linear warm-up to 1, then constant,
    linear or cosine decay to min_lr_ratio at total_steps."""
    if optim.warmup_steps and step < optim.warmup_steps:
        return (step + 1) / optim.warmup_steps
    if optim.scheduler == "constant":
        return 1.0
    span = max(1, optim.total_steps - optim.warmup_steps)
    progress = min(1.0, (step - optim.warmup_steps) / span)
    decay = 1.0 - progress if optim.scheduler == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return optim.min_lr_ratio + (1.0 - optim.min_lr_ratio) * decay


def build_optimizer(module: torch.nn.Module, optim: OptimConfig):
    """AdamW over trainable parameters (no weight decay on biases and norms, i.e. 1-D tensors)
    and its LambdaLR schedule."""
    decay, no_decay = [], []
    for p in module.parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": optim.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW([g for g in groups if g["params"]], lr=optim.lr, betas=optim.betas,
                                  eps=optim.eps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, optim))
    return optimizer, scheduler

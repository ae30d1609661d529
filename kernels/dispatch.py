"""`token_logprobs`: the one entry point the learner calls; picks the Triton or torch path.

Notation:
    B batch, T tokens per row, N = B·T (or N tokens when already flat), H hidden, V vocab.

Backend choice, first match wins:
    1. `TokenLogprobsConfig.backend` if it is "triton" or "torch" (explicit code wins);
    2. the environment variable WEBRL_KERNEL = "triton" | "torch" | "auto";
    3. "auto": Triton when the tensors are on CUDA and Triton imports, torch otherwise.
Forcing "triton" without a usable backend raises `KernelBackendError` naming the fix. CPU
tensors are accepted by the Triton path only under TRITON_INTERPRET=1 (Triton's interpreter,
for tests: 100-300x slower than torch).
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

import torch
from torch import Tensor

from webrl.kernels.chunked import ChunkedTokenLogprobs

BACKENDS = ("auto", "triton", "torch")
ENV_VAR = "WEBRL_KERNEL"


class KernelBackendError(RuntimeError):
    """The requested kernel backend cannot run here (no Triton, or no CUDA/interpreter)."""


def _power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


@dataclass(frozen=True)
class TokenLogprobsConfig:
    """How `token_logprobs` runs; the math does not depend on any field beyond fp rounding."""

    backend: str = "auto"
    """"auto" | "triton" | "torch". "auto" defers to $WEBRL_KERNEL, then to the device."""
    token_chunk: int = 1024
    """torch path: tokens per block. Working memory ≈ 4 blocks of token_chunk×vocab_chunk fp32."""
    vocab_chunk: int = 8192
    """torch path: vocabulary rows per block (a float32 copy of that many weight rows is kept)."""
    block_tokens: int = 64
    """Triton: BLOCK_N, tokens per tile (power of two, >= 16 for tl.dot)."""
    block_vocab: int = 128
    """Triton: BLOCK_V, vocabulary lanes per tile (power of two, >= 16); V need not divide."""
    block_hidden: int = 64
    """Triton: BLOCK_H, hidden slice per dot (power of two, >= 16); H need not divide."""
    vocab_splits: int = 16
    """Triton forward: vocabulary groups run as separate programs and merged (split-K), so
    few tokens still fill the GPU. Capped at the number of vocab tiles."""

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"TokenLogprobsConfig.backend must be one of {BACKENDS}, got {self.backend!r}")
        for name in ("token_chunk", "vocab_chunk", "vocab_splits"):
            if getattr(self, name) < 1:
                raise ValueError(f"TokenLogprobsConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("block_tokens", "block_vocab", "block_hidden"):
            value = getattr(self, name)
            if value < 16 or not _power_of_two(value):
                raise ValueError(
                    f"TokenLogprobsConfig.{name} must be a power of two >= 16, got {value}"
                )


def _interpreter_on() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def resolve_backend(device: torch.device, requested: str = "auto") -> str:
    """"triton" or "torch" for tensors on `device` (see the module docstring for the order)."""
    choice = requested
    if choice == "auto":
        choice = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
        if choice not in BACKENDS:
            raise KernelBackendError(f"${ENV_VAR} must be one of {BACKENDS}, got {choice!r}")
    has_triton = importlib.util.find_spec("triton") is not None
    if choice == "auto":
        return "triton" if device.type == "cuda" and has_triton else "torch"
    if choice == "torch":
        return "torch"
    if not has_triton:
        raise KernelBackendError(
            "the Triton kernel backend was forced but the `triton` package is not installed; "
            f"install triton or set {ENV_VAR}=torch"
        )
    if device.type != "cuda" and not _interpreter_on():
        raise KernelBackendError(
            f"the Triton kernel backend was forced for tensors on {device.type!r}, but Triton "
            f"needs CUDA tensors; set TRITON_INTERPRET=1 before Triton is imported to run the "
            f"kernels in its (slow) CPU interpreter, or set {ENV_VAR}=torch"
        )
    return "triton"


def _run_triton(hidden, weight, targets, inv_temp, config):
    from webrl.kernels import triton_logprobs  # imports triton: only when this path is used

    if hidden.device.type != "cuda" and not triton_logprobs.INTERPRETED:
        raise KernelBackendError(
            "TRITON_INTERPRET=1 was set after webrl.kernels.triton_logprobs was imported; "
            "set it before the first import (e.g. in the environment of the process)"
        )
    if hidden.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"the Triton path takes float32/bf16/fp16 inputs, got {hidden.dtype}")
    blocks = (config.block_tokens, config.block_vocab, config.block_hidden, config.vocab_splits)
    return triton_logprobs.TritonTokenLogprobs.apply(
        hidden.contiguous(), weight.contiguous(), targets.contiguous(), inv_temp, blocks
    )


def _check_inputs(hidden: Tensor, weight: Tensor, targets: Tensor, temperature: float):
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"hidden (..., H) and lm_head_weight (V, H) disagree: {tuple(hidden.shape)} vs "
            f"{tuple(weight.shape)}"
        )
    if targets.shape != hidden.shape[:-1]:
        raise ValueError(f"targets {tuple(targets.shape)} must be hidden's shape without H "
                         f"{tuple(hidden.shape[:-1])}")
    if hidden.dtype != weight.dtype:
        raise ValueError(f"hidden and lm_head_weight dtypes differ: {hidden.dtype} vs {weight.dtype}")


def token_logprobs(
    hidden: Tensor,
    lm_head_weight: Tensor,
    targets: Tensor,
    temperature: float = 1.0,
    *,
    mask: Tensor | None = None,
    config: TokenLogprobsConfig | None = None,
) -> tuple[Tensor, Tensor]:
    """Per-token log p(target) and entropy of softmax(hidden @ Wᵀ / τ), without (N, V) logits.

    Args:
        hidden: (N, H) or (B, T, H) final hidden states (float32 / bf16 / fp16).
        lm_head_weight: (V, H), same dtype as hidden.
        targets: (N,) or (B, T) int token ids in [0, V) (only read where `mask` is True).
        temperature: τ > 0 (the sampling temperature, so log-probs match the rollout's).
        mask: optional bool, targets' shape: only True positions are computed; the others
            return 0 for both outputs and get no gradient (prompt and image tokens need none).
        config: chunk / tile sizes and backend; defaults to `TokenLogprobsConfig()`.

    Returns:
        (logprobs, entropy), float32 (float64 for float64 inputs, torch path only), targets'
        shape. Both are differentiable with respect to
        hidden and lm_head_weight.
    """
    config = config or TokenLogprobsConfig()
    _check_inputs(hidden, lm_head_weight, targets, temperature)
    out_shape = targets.shape
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])  # (N, H)
    flat_targets = targets.reshape(-1).long()  # (N,)
    rows = None
    if mask is not None:
        if mask.shape != out_shape:
            raise ValueError(f"mask {tuple(mask.shape)} must match targets {tuple(out_shape)}")
        rows = torch.nonzero(mask.reshape(-1)).squeeze(1)  # (M,)
        flat_hidden, flat_targets = flat_hidden.index_select(0, rows), flat_targets[rows]
    if flat_targets.numel() and (flat_targets.min() < 0 or flat_targets.max() >= lm_head_weight.shape[0]):
        raise ValueError(f"targets must lie in [0, {lm_head_weight.shape[0]}) where computed")
    backend = resolve_backend(hidden.device, config.backend)
    if flat_targets.numel() == 0:
        backend = "torch"  # nothing to compute (all masked): skip empty kernel grids
    inv_temp = 1.0 / float(temperature)
    if backend == "triton":
        logprobs, entropy = _run_triton(flat_hidden, lm_head_weight, flat_targets, inv_temp, config)
    else:
        logprobs, entropy = ChunkedTokenLogprobs.apply(
            flat_hidden, lm_head_weight, flat_targets, inv_temp, config.token_chunk, config.vocab_chunk
        )
    if rows is not None:
        n = out_shape.numel()
        logprobs = logprobs.new_zeros(n).index_copy(0, rows, logprobs)
        entropy = entropy.new_zeros(n).index_copy(0, rows, entropy)
    return logprobs.reshape(out_shape), entropy.reshape(out_shape)

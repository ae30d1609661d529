"""Naive token log-prob and entropy: the ground truth the fused paths are tested against.

Notation:
    N  tokens (any leading shape flattens to N)
    H  hidden size
    V  vocabulary size
    τ  sampling temperature

    z = (h Wᵀ) / τ              logits, (N, V)
    logprob = z[target] - logsumexp(z)
    entropy = -Σ_v p_v log p_v,  p = softmax(z)

This materialises the full (N, V) float32 logits (and autograd keeps several tensors of that
size), which is exactly what `webrl.kernels.token_logprobs` avoids. It is kept for tests and
benchmarks only.
"""
from __future__ import annotations

import torch
from torch import Tensor


def token_logprobs_reference(
    hidden: Tensor, lm_head_weight: Tensor, targets: Tensor, temperature: float = 1.0
) -> tuple[Tensor, Tensor]:
    """Log-prob of `targets` and entropy under softmax(hidden @ weightᵀ / temperature).

    Args:
        hidden: (..., H) final hidden states, any float dtype.
        lm_head_weight: (V, H) output projection.
        targets: (...) int64 token ids in [0, V).
        temperature: τ > 0; logits are divided by it before the softmax.

    Returns:
        (logprobs, entropy), both (...) float32. Inputs are upcast to float32 before the
        matmul, so this is the float32 math on the given (possibly bf16-rounded) values.
    """
    logits = hidden.float() @ lm_head_weight.float().T / temperature  # (..., V)
    log_probs = torch.log_softmax(logits, dim=-1)  # (..., V)
    logprobs = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (...)
    entropy = -(log_probs.exp() * log_probs).sum(-1)  # (...)
    return logprobs, entropy

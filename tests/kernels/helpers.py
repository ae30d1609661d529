"""Shared pieces of the kernel tests: deterministic inputs, forward+backward runner, tolerances."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from webrl.kernels import token_logprobs_reference

# float32 vs float32 with a different summation order (chunks, tiles, split merges): each
# result is a sum of ≤ V + H terms of magnitude ≤ ~30; float32 rounds at 6e-8 relative, so
# even a worst-case linear error growth over 1000 terms stays near 1e-5 of the magnitude.
# Measured differences on these shapes are 1e-6..1e-5 absolute.
FP32_TOL = dict(rtol=2e-5, atol=2e-5)


@dataclass
class Outputs:
    """Forward outputs and the gradients of loss = Σ a·logprobs + Σ b·entropy."""

    logprobs: torch.Tensor
    entropy: torch.Tensor
    grad_hidden: torch.Tensor
    grad_weight: torch.Tensor


def make_inputs(n, h, v, dtype=torch.float32, seed=0, batch_shape=None, logit_scale=3.0):
    """hidden (N, H) or (*batch_shape, H), weight (V, H), targets, upstream weights a, b.

    weight rows have norm ≈ logit_scale, so logits have std ≈ logit_scale (like a trained
    lm_head's peaked distributions), which makes the entropy term's gradient non-trivial."""
    gen = torch.Generator().manual_seed(seed)
    shape = tuple(batch_shape) if batch_shape else (n,)
    hidden = torch.randn(*shape, h, generator=gen).to(dtype)
    weight = (torch.randn(v, h, generator=gen) * logit_scale / h**0.5).to(dtype)
    targets = torch.randint(0, v, shape, generator=gen)
    upstream_lp = torch.randn(shape, generator=gen)
    upstream_ent = torch.randn(shape, generator=gen)
    return hidden, weight, targets, upstream_lp, upstream_ent


def run(fn, hidden, weight, targets, upstream_lp, upstream_ent, **kwargs) -> Outputs:
    """Forward `fn`, backward Σ a·logprobs + Σ b·entropy, return outputs and both grads."""
    hidden = hidden.detach().clone().requires_grad_(True)
    weight = weight.detach().clone().requires_grad_(True)
    logprobs, entropy = fn(hidden, weight, targets, **kwargs)
    ((logprobs * upstream_lp).sum() + (entropy * upstream_ent).sum()).backward()
    return Outputs(logprobs.detach(), entropy.detach(), hidden.grad, weight.grad)


def reference_outputs(hidden, weight, targets, upstream_lp, upstream_ent, temperature):
    return run(token_logprobs_reference, hidden, weight, targets, upstream_lp, upstream_ent,
               temperature=temperature)


def assert_outputs_close(got: Outputs, want: Outputs, grad_tol: dict):
    """Forward outputs are float32 in every path: FP32_TOL; grads use `grad_tol`."""
    torch.testing.assert_close(got.logprobs, want.logprobs, **FP32_TOL)
    torch.testing.assert_close(got.entropy, want.entropy, **FP32_TOL)
    torch.testing.assert_close(got.grad_hidden, want.grad_hidden, **grad_tol)
    torch.testing.assert_close(got.grad_weight, want.grad_weight, **grad_tol)


# bf16 grads from a path that accumulates in float32 and rounds once at the end (torch path):
# the reference also rounds its float32 grad once, so the two differ only where the float32
# values straddle a rounding boundary: by one bf16 ulp, at most 2^-7 of the value.
BF16_ONE_ROUNDING_TOL = dict(rtol=2**-7, atol=1e-6)


def bf16_rounded_grad_z_bound(hidden, weight, targets, upstream_lp, upstream_ent, temperature,
                              conversion_error=2**-7):
    """Per-element error bounds for grads whose ∂loss/∂z is cast to bf16 before the dots
    (the Triton path, as flash attention does with P).

    Casting g_z to bf16 changes each term by at most `conversion_error` relative: 2^-8 (half
    an ulp) for round-to-nearest on GPUs, 2^-7 (one ulp) for the Triton interpreter, which
    truncates (triton/runtime/interpreter.py `_convert_float` without a rounding mode). So
        |Δgrad_h[n, :]| ≤ conversion_error · Σ_v |g_z[n, v]| |W[v, :]|
    (g_z here is ∂loss/∂(h Wᵀ), i.e. already divided by τ) and likewise for grad_W. The float32
    accumulation-order noise (~1e-6 relative) is far below this; the final bf16 cast adds the
    2^-7 |want| term in `assert_within_bound`.
    Returns (bound_hidden (N, H), bound_weight (V, H)) float32, given flat (N, ·) inputs."""
    h32, w32 = hidden.float(), weight.float()
    logits = (h32 @ w32.T / temperature).requires_grad_(True)  # (N, V)
    log_probs = torch.log_softmax(logits, dim=-1)
    logprobs = log_probs.gather(-1, targets[:, None]).squeeze(-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    ((logprobs * upstream_lp).sum() + (entropy * upstream_ent).sum()).backward()
    abs_grad_z = logits.grad.abs() / temperature  # (N, V): ∂loss/∂(h Wᵀ)
    return (conversion_error * abs_grad_z @ w32.abs(),
            conversion_error * abs_grad_z.T @ h32.abs())


def assert_within_bound(got, want, bound):
    """|got - want| ≤ bound + 2^-7 |want| + 1e-6 elementwise: `bound` covers the difference
    before the final bf16 cast; the two casts (each to nearest) then differ by ≤ 1 ulp,
    and one bf16 ulp is at most 2^-7 of the value."""
    excess = (got.float() - want.float()).abs() - (bound + 2**-7 * want.float().abs() + 1e-6)
    assert excess.max() <= 0, f"exceeds the bf16 bound by {excess.max().item():.3g}"

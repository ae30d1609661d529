"""Chunked torch path for token log-probs and entropy (CPU, or any device without Triton).

Notation:
    N  tokens          Cn  tokens per chunk       z  = h Wᵀ / τ           logits (never whole)
    H  hidden size     Cv  vocab rows per chunk   p  = softmax(z)
    V  vocabulary      τ   temperature            L  = logsumexp(z)       (N,)
                                                  S  = -Σ_v p_v log p_v   entropy (N,)

Forward walks (vocab chunk, token chunk) blocks and keeps three running numbers per token,
relative to a running max m (the online log-sum-exp of flash attention / Milakov & Gimelshein):
    s = Σ exp(z - m)                  →  L = m + log s
    t = Σ exp(z - m) (z - m)          →  S = log s - t / s
When m grows to m', both are rescaled by α = exp(m - m'):  s ← α s,  t ← α (t + (m - m') s).
Keeping t relative to m (instead of Σ p z) avoids cancelling two large numbers in L - E[z].

Backward recomputes each block of z from the saved L and S and uses, per token,
    ∂logprob/∂z_v = 1[v = target] - p_v
    ∂S/∂z_v      = -p_v (log p_v + S) = -p_v (z_v - L + S)
so  g_z = g_lp·1[v = target] - p·(g_lp + g_S·(z - L + S)),  then  g_h += g_z W / τ  and
g_W += g_zᵀ h / τ.  Vocabulary is the outer loop so each chunk of grad_W is finished (in
float32) and written once; grad_h is a float32 (N, H) accumulator.

Peak working memory is two (Cn, Cv) float32 blocks (the block helpers work in place), a
float32 copy of the (Cv, H) weight chunk (a view when the weight is float32) and in backward its
(Cv, H) gradient accumulator, plus the (N, H) float32 hidden / grad_h, instead of several
(N, V) float32 tensors.

Departures: matmuls run on float32 copies of each chunk, so bf16 inputs give logits accumulated
and kept in float32 (the naive `(h @ Wᵀ).float()` rounds logits to bf16 first). The Triton
kernels do the same via float32 accumulators, so the two paths agree.
"""
from __future__ import annotations

import torch
from torch import Tensor

#: Start of the running max: a large negative *finite* number, so that `(m - m') * s` and
#: `exp(m - m')` stay finite on the first block (with -inf they give NaN).
NEG_LARGE = -1.0e30


def online_update(
    m: Tensor, s: Tensor, t: Tensor, z: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Fold one block of logits into the running (max, sum-exp, sum-exp·shifted-logit).

    Args:
        m, s, t: (Cn,) running max, Σ exp(z - m), Σ exp(z - m)(z - m) over earlier blocks.
        z: (Cn, Cv) float32 logits of this block. Overwritten (it becomes z - m'), so that
            only two blocks are ever alive: this is the memory the path exists to save.
    Returns:
        the updated (m, s, t), each (Cn,).
    """
    m_new = torch.maximum(m, z.amax(dim=1))  # (Cn,)
    alpha = torch.exp(m - m_new)  # (Cn,)
    shifted = z.sub_(m_new[:, None])  # (Cn, Cv), in place
    e = torch.exp(shifted)  # (Cn, Cv)
    s_new = alpha * s + e.sum(dim=1)
    t_new = alpha * (t + (m - m_new) * s) + e.mul_(shifted).sum(dim=1)
    return m_new, s_new, t_new


def finish_stats(m: Tensor, s: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
    """(logsumexp, entropy) from the running stats: L = m + log s, S = log s - t / s."""
    log_s = torch.log(s)
    return m + log_s, log_s - t / s


def logits_grad(
    z: Tensor, lse: Tensor, entropy: Tensor, grad_logprob: Tensor, grad_entropy: Tensor,
    target_cols: Tensor,
) -> Tensor:
    """∂loss/∂z for one block (see module docstring); target_cols is -1 where the target is
    not in this block. Shapes: z (Cn, Cv), overwritten (two blocks alive, as above); the rest
    (Cn,). Returns (Cn, Cv) float32."""
    log_p = z.sub_(lse[:, None])  # (Cn, Cv), in place
    grad = torch.exp(log_p)  # p, becomes the gradient in place
    weight = log_p.add_(entropy[:, None]).mul_(grad_entropy[:, None]).add_(grad_logprob[:, None])
    grad.mul_(weight).neg_()  # -p (g_lp + g_S (log p + S))
    # + g_lp at the target column; scatter with zeros where the target is elsewhere (no
    # data-dependent indexing, so no host sync on GPUs)
    hit = target_cols >= 0
    grad.scatter_add_(1, target_cols.clamp(min=0)[:, None], (grad_logprob * hit)[:, None])
    return grad


def _forward_stats(
    hidden32: Tensor, weight: Tensor, targets: Tensor, inv_temp: float, token_chunk: int,
    vocab_chunk: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """(lse, entropy, target_logit), each (N,) float32, from (N, H) float32 hidden."""
    n, v = hidden32.shape[0], weight.shape[0]
    m = hidden32.new_full((n,), NEG_LARGE)
    s, t, target_logit = hidden32.new_zeros(n), hidden32.new_zeros(n), hidden32.new_zeros(n)
    for v0 in range(0, v, vocab_chunk):
        w32 = weight[v0 : v0 + vocab_chunk].to(hidden32.dtype)  # (Cv, H)
        for n0 in range(0, n, token_chunk):
            rows = slice(n0, n0 + token_chunk)
            z = (hidden32[rows] @ w32.T).mul_(inv_temp)  # (Cn, Cv)
            cols = targets[rows] - v0
            hit = (cols >= 0) & (cols < z.shape[1])  # the target lies in this block
            picked = z.gather(1, cols.clamp(0, z.shape[1] - 1)[:, None]).squeeze(1)
            target_logit[rows] += torch.where(hit, picked, 0.0)  # before z is overwritten
            m[rows], s[rows], t[rows] = online_update(m[rows], s[rows], t[rows], z)
    lse, entropy = finish_stats(m, s, t)
    return lse, entropy, target_logit


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64 (so `torch.autograd.gradcheck` can test backward); all else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


class ChunkedTokenLogprobs(torch.autograd.Function):
    """autograd.Function: (hidden (N, H), weight (V, H), targets (N,)) → (logprobs, entropy)."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, inv_temp, token_chunk, vocab_chunk):
        hidden32 = hidden.to(accumulation_dtype(hidden.dtype))  # (N, H); no copy if float32
        with torch.no_grad():
            lse, entropy, target_logit = _forward_stats(
                hidden32, weight, targets, inv_temp, token_chunk, vocab_chunk
            )
        ctx.save_for_backward(hidden, weight, targets, lse, entropy)
        ctx.config = (inv_temp, token_chunk, vocab_chunk)
        return target_logit - lse, entropy

    @staticmethod
    def backward(ctx, grad_logprob, grad_entropy):
        hidden, weight, targets, lse, entropy = ctx.saved_tensors
        inv_temp, token_chunk, vocab_chunk = ctx.config
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        n, v = hidden.shape[0], weight.shape[0]
        g_lp = lse.new_zeros(n) if grad_logprob is None else grad_logprob.to(lse.dtype)
        g_s = lse.new_zeros(n) if grad_entropy is None else grad_entropy.to(lse.dtype)
        hidden32 = hidden.to(lse.dtype)
        grad_h32 = hidden32.new_zeros(hidden.shape) if need_h else None  # (N, H)
        grad_w = torch.empty_like(weight) if need_w else None  # (V, H)
        for v0 in range(0, v, vocab_chunk):
            w32 = weight[v0 : v0 + vocab_chunk].to(lse.dtype)  # (Cv, H)
            grad_w32 = torch.zeros_like(w32) if need_w else None
            for n0 in range(0, n, token_chunk):
                rows = slice(n0, n0 + token_chunk)
                z = (hidden32[rows] @ w32.T).mul_(inv_temp)  # (Cn, Cv)
                cols = targets[rows] - v0
                cols = torch.where((cols >= 0) & (cols < z.shape[1]), cols, -1)
                grad_z = logits_grad(z, lse[rows], entropy[rows], g_lp[rows], g_s[rows], cols)
                grad_z.mul_(inv_temp)
                if need_h:
                    grad_h32[rows].addmm_(grad_z, w32)
                if need_w:
                    grad_w32.addmm_(grad_z.T, hidden32[rows])
            if need_w:
                grad_w[v0 : v0 + vocab_chunk] = grad_w32
        grad_h = grad_h32.to(hidden.dtype) if need_h else None
        return grad_h, grad_w, None, None, None, None

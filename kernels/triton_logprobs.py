"""Triton kernels for token log-probs and entropy fused with the lm_head matmul.

Same math as `webrl.kernels.chunked` (read its docstring for the online log-sum-exp with a
shifted entropy accumulator, and for ∂/∂z); here a "block" is one (BLOCK_N, BLOCK_V) tile of
logits that lives only in registers, accumulated over BLOCK_H slices of the hidden size.

Notation:
    N tokens, H hidden, V vocabulary, τ temperature, z = h Wᵀ / τ, L = logsumexp(z), S entropy.
    BLOCK_N / BLOCK_V / BLOCK_H  tile sizes;  tiles = ceil(V / BLOCK_V);  splits  vocab groups.

Kernels:
    _forward_kernel  grid (ceil(N/BLOCK_N), splits). Each program folds its group of vocab
                     tiles into partial (m, s, t, target logit) per token; a tiny torch step
                     (`_combine_partials`) merges the splits (split-K style, so that short
                     batches still fill the GPU).
    _grad_hidden_kernel  grid (ceil(N/BLOCK_N),). Owns rows of grad_h (float32); walks all
                     vocab tiles, recomputes z, forms g_z and adds g_z W into its rows.
    _grad_weight_kernel  grid (tiles,). Owns rows of grad_W (float32); walks all token blocks,
                     recomputes z, forms g_z and adds g_zᵀ h into its rows.
Each output row has exactly one writer, so backward is deterministic (no atomics), at the
cost of recomputing the logits twice in backward and read-modify-writes of float32 rows.

Row offsets are computed in int64 (V·H passes 2^31 for large vocabularies × hidden sizes).
Masked lanes: vocab lanes ≥ V get z = -1e30 (chunked.NEG_LARGE: finite, so exp gives 0 and 0·z stays 0, where
-inf would give NaN); token lanes ≥ N load zeros and are never stored.

Departures: for float32 inputs `tl.dot` runs in "ieee" precision (not TF32), so float32
results match the torch path; bf16/fp16 inputs use the tensor-core path with float32
accumulation, and g_z is rounded to the input dtype before the backward dots (as flash
attention does for P), which the bf16 tolerances in the tests account for.
Performance is unmeasured (no GPU was available when this was written): the backward's
float32 read-modify-writes are memory traffic that cuBLAS-based chunking (Liger) avoids;
benchmarks/kernels_gpu.py measures it, and the tile sizes live in TokenLogprobsConfig.
This module imports Triton at import time: TRITON_INTERPRET must be set before it is first
imported for the interpreter to be used (the dispatcher imports it lazily).
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch import Tensor


#: Whether the kernels below were decorated for Triton's CPU interpreter (decided at import).
INTERPRETED = (bool(triton.knobs.runtime.interpret) if hasattr(triton, "knobs")
               else os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true"))


@triton.jit
def _dot(a, b, acc, DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr):
    """acc + a @ b; UPCAST_DOT works around the interpreter's bf16 dot (it multiplies the raw
    uint16 storage), only ever set under TRITON_INTERPRET."""
    if UPCAST_DOT:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, b, acc, input_precision=DOT_PRECISION)


@triton.jit
def _logits_tile(h_ptr, w_ptr, offs_n, offs_v, n_mask, v_mask, H, inv_temp,
                 BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_H: tl.constexpr,
                 DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr):
    """z tile (BLOCK_N, BLOCK_V) float32; masked vocab lanes are NEG_LARGE."""
    acc = tl.zeros((BLOCK_N, BLOCK_V), dtype=tl.float32)
    for k in range(0, H, BLOCK_H):
        offs_h = k + tl.arange(0, BLOCK_H)
        h_mask = offs_h < H
        h = tl.load(h_ptr + offs_n[:, None].to(tl.int64) * H + offs_h[None, :],
                    mask=n_mask[:, None] & h_mask[None, :], other=0.0)
        w = tl.load(w_ptr + offs_v[:, None].to(tl.int64) * H + offs_h[None, :],
                    mask=v_mask[:, None] & h_mask[None, :], other=0.0)
        acc = _dot(h, tl.trans(w), acc, DOT_PRECISION, UPCAST_DOT)
    z = acc * inv_temp
    return tl.where(v_mask[None, :], z, -1.0e30)


@triton.jit
def _logits_grad_tile(z, offs_v, n_mask, v_mask, targets, lse, entropy, g_lp, g_ent, inv_temp):
    """∂loss/∂(h Wᵀ) for one tile: (g_lp·1[v=t] - p (g_lp + g_S (z - L + S))) / τ, 0 if masked."""
    p = tl.exp(z - lse[:, None])
    centred = z - lse[:, None] + entropy[:, None]
    grad = -p * (g_lp[:, None] + g_ent[:, None] * centred)
    grad += tl.where(offs_v[None, :] == targets[:, None], g_lp[:, None], 0.0)
    grad = tl.where(n_mask[:, None] & v_mask[None, :], grad, 0.0)
    return grad * inv_temp


@triton.jit
def _forward_kernel(h_ptr, w_ptr, tgt_ptr, part_m_ptr, part_s_ptr, part_t_ptr, part_z_ptr,
                    N, V, H, inv_temp, tiles_per_split, num_splits,
                    BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_H: tl.constexpr,
                    DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    targets = tl.load(tgt_ptr + offs_n, mask=n_mask, other=-1)
    m = tl.full((BLOCK_N,), -1.0e30, dtype=tl.float32)
    s = tl.zeros((BLOCK_N,), dtype=tl.float32)
    t = tl.zeros((BLOCK_N,), dtype=tl.float32)
    z_target = tl.zeros((BLOCK_N,), dtype=tl.float32)
    tile_start = pid_s * tiles_per_split
    tile_end = tl.minimum(tile_start + tiles_per_split, tl.cdiv(V, BLOCK_V))
    for tile in range(tile_start, tile_end):
        offs_v = tile * BLOCK_V + tl.arange(0, BLOCK_V)
        v_mask = offs_v < V
        z = _logits_tile(h_ptr, w_ptr, offs_n, offs_v, n_mask, v_mask, H, inv_temp,
                         BLOCK_N, BLOCK_V, BLOCK_H, DOT_PRECISION, UPCAST_DOT)
        m_new = tl.maximum(m, tl.max(z, axis=1))
        alpha = tl.exp(m - m_new)
        shifted = z - m_new[:, None]
        e = tl.exp(shifted)
        t = alpha * (t + (m - m_new) * s) + tl.sum(e * shifted, axis=1)
        s = alpha * s + tl.sum(e, axis=1)
        m = m_new
        z_target += tl.sum(tl.where(offs_v[None, :] == targets[:, None], z, 0.0), axis=1)
    out = offs_n * num_splits + pid_s
    tl.store(part_m_ptr + out, m, mask=n_mask)
    tl.store(part_s_ptr + out, s, mask=n_mask)
    tl.store(part_t_ptr + out, t, mask=n_mask)
    tl.store(part_z_ptr + out, z_target, mask=n_mask)


@triton.jit
def _load_row_stats(tgt_ptr, lse_ptr, ent_ptr, glp_ptr, gent_ptr, offs_n, n_mask):
    targets = tl.load(tgt_ptr + offs_n, mask=n_mask, other=-1)
    lse = tl.load(lse_ptr + offs_n, mask=n_mask, other=0.0)
    entropy = tl.load(ent_ptr + offs_n, mask=n_mask, other=0.0)
    g_lp = tl.load(glp_ptr + offs_n, mask=n_mask, other=0.0)
    g_ent = tl.load(gent_ptr + offs_n, mask=n_mask, other=0.0)
    return targets, lse, entropy, g_lp, g_ent


@triton.jit
def _grad_hidden_kernel(h_ptr, w_ptr, tgt_ptr, lse_ptr, ent_ptr, glp_ptr, gent_ptr, gh_ptr,
                        N, V, H, inv_temp,
                        BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_H: tl.constexpr,
                        DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    targets, lse, entropy, g_lp, g_ent = _load_row_stats(
        tgt_ptr, lse_ptr, ent_ptr, glp_ptr, gent_ptr, offs_n, n_mask)
    for tile in range(0, tl.cdiv(V, BLOCK_V)):
        offs_v = tile * BLOCK_V + tl.arange(0, BLOCK_V)
        v_mask = offs_v < V
        z = _logits_tile(h_ptr, w_ptr, offs_n, offs_v, n_mask, v_mask, H, inv_temp,
                         BLOCK_N, BLOCK_V, BLOCK_H, DOT_PRECISION, UPCAST_DOT)
        grad_z = _logits_grad_tile(z, offs_v, n_mask, v_mask, targets, lse, entropy,
                                   g_lp, g_ent, inv_temp).to(w_ptr.dtype.element_ty)
        for k in range(0, H, BLOCK_H):
            offs_h = k + tl.arange(0, BLOCK_H)
            h_mask = offs_h < H
            w = tl.load(w_ptr + offs_v[:, None].to(tl.int64) * H + offs_h[None, :],
                        mask=v_mask[:, None] & h_mask[None, :], other=0.0)
            gh_ptrs = gh_ptr + offs_n[:, None].to(tl.int64) * H + offs_h[None, :]
            io_mask = n_mask[:, None] & h_mask[None, :]
            acc = tl.load(gh_ptrs, mask=io_mask, other=0.0)
            acc = _dot(grad_z, w, acc, DOT_PRECISION, UPCAST_DOT)
            tl.store(gh_ptrs, acc, mask=io_mask)


@triton.jit
def _grad_weight_kernel(h_ptr, w_ptr, tgt_ptr, lse_ptr, ent_ptr, glp_ptr, gent_ptr, gw_ptr,
                        N, V, H, inv_temp,
                        BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_H: tl.constexpr,
                        DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr):
    offs_v = tl.program_id(0) * BLOCK_V + tl.arange(0, BLOCK_V)
    v_mask = offs_v < V
    for block in range(0, tl.cdiv(N, BLOCK_N)):
        offs_n = block * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = offs_n < N
        targets, lse, entropy, g_lp, g_ent = _load_row_stats(
            tgt_ptr, lse_ptr, ent_ptr, glp_ptr, gent_ptr, offs_n, n_mask)
        z = _logits_tile(h_ptr, w_ptr, offs_n, offs_v, n_mask, v_mask, H, inv_temp,
                         BLOCK_N, BLOCK_V, BLOCK_H, DOT_PRECISION, UPCAST_DOT)
        grad_z = _logits_grad_tile(z, offs_v, n_mask, v_mask, targets, lse, entropy,
                                   g_lp, g_ent, inv_temp).to(h_ptr.dtype.element_ty)
        grad_zt = tl.trans(grad_z)  # (BLOCK_V, BLOCK_N)
        for k in range(0, H, BLOCK_H):
            offs_h = k + tl.arange(0, BLOCK_H)
            h_mask = offs_h < H
            h = tl.load(h_ptr + offs_n[:, None].to(tl.int64) * H + offs_h[None, :],
                        mask=n_mask[:, None] & h_mask[None, :], other=0.0)
            gw_ptrs = gw_ptr + offs_v[:, None].to(tl.int64) * H + offs_h[None, :]
            io_mask = v_mask[:, None] & h_mask[None, :]
            acc = tl.load(gw_ptrs, mask=io_mask, other=0.0)
            acc = _dot(grad_zt, h, acc, DOT_PRECISION, UPCAST_DOT)
            tl.store(gw_ptrs, acc, mask=io_mask)


def _combine_partials(m: Tensor, s: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
    """Merge per-split (N, splits) running stats into (logsumexp, entropy), each (N,)."""
    m_all = m.amax(dim=1, keepdim=True)  # (N, 1)
    scale = torch.exp(m - m_all)  # (N, splits); 0 for empty splits (m = NEG_LARGE)
    s_all = (scale * s).sum(dim=1)
    t_all = (scale * (t + (m - m_all) * s)).sum(dim=1)
    log_s = torch.log(s_all)
    return m_all.squeeze(1) + log_s, log_s - t_all / s_all


def _dot_meta(dtype: torch.dtype) -> dict:
    """Kernel constexprs for the dot: IEEE float32 for float32 inputs (no TF32), native
    tensor-core dots otherwise; operands upcast under the interpreter (see `_dot`)."""
    upcast = INTERPRETED and dtype != torch.float32
    return dict(DOT_PRECISION="ieee" if dtype == torch.float32 else "tf32", UPCAST_DOT=upcast)


class TritonTokenLogprobs(torch.autograd.Function):
    """autograd.Function: (hidden (N, H), weight (V, H), targets (N,)) → (logprobs, entropy).

    `blocks` is (BLOCK_N, BLOCK_V, BLOCK_H, vocab_splits); inputs must be contiguous."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, inv_temp, blocks):
        block_n, block_v, block_h, vocab_splits = blocks
        (n, h_size), v = hidden.shape, weight.shape[0]
        tiles = triton.cdiv(v, block_v)
        splits = max(1, min(vocab_splits, tiles))
        tiles_per_split = triton.cdiv(tiles, splits)
        parts = torch.empty(4, n, splits, device=hidden.device, dtype=torch.float32)
        grid = (triton.cdiv(n, block_n), splits)
        _forward_kernel[grid](hidden, weight, targets, parts[0], parts[1], parts[2], parts[3],
                              n, v, h_size, inv_temp, tiles_per_split, splits,
                              BLOCK_N=block_n, BLOCK_V=block_v, BLOCK_H=block_h,
                              **_dot_meta(hidden.dtype))
        lse, entropy = _combine_partials(parts[0], parts[1], parts[2])
        ctx.save_for_backward(hidden, weight, targets, lse, entropy)
        ctx.config = (inv_temp, blocks)
        return parts[3].sum(dim=1) - lse, entropy

    @staticmethod
    def backward(ctx, grad_logprob, grad_entropy):
        hidden, weight, targets, lse, entropy = ctx.saved_tensors
        inv_temp, (block_n, block_v, block_h, _) = ctx.config
        (n, h_size), v = hidden.shape, weight.shape[0]
        g_lp = lse.new_zeros(n) if grad_logprob is None else grad_logprob.float().contiguous()
        g_ent = lse.new_zeros(n) if grad_entropy is None else grad_entropy.float().contiguous()
        args = (hidden, weight, targets, lse, entropy, g_lp, g_ent)
        meta = dict(BLOCK_N=block_n, BLOCK_V=block_v, BLOCK_H=block_h,
                    **_dot_meta(hidden.dtype))
        grad_h = grad_w = None
        if ctx.needs_input_grad[0]:
            grad_h32 = torch.zeros(n, h_size, device=hidden.device, dtype=torch.float32)
            _grad_hidden_kernel[(triton.cdiv(n, block_n),)](
                *args, grad_h32, n, v, h_size, inv_temp, **meta)
            grad_h = grad_h32.to(hidden.dtype)
        if ctx.needs_input_grad[1]:
            # float32 accumulator for all of grad_W: (V, H) float32, cast once at the end.
            grad_w32 = torch.zeros(v, h_size, device=weight.device, dtype=torch.float32)
            _grad_weight_kernel[(triton.cdiv(v, block_v),)](
                *args, grad_w32, n, v, h_size, inv_temp, **meta)
            grad_w = grad_w32.to(weight.dtype)
        return grad_h, grad_w, None, None, None

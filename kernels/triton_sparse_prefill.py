"""Triton block-sparse causal prefill attention over a permuted token order (forward only).

Same math as `sparse_prefill.block_sparse_attention_reference`: for query block i of head h
(in the head's permuted order), only the key blocks listed in `block_index[h, i, :count]` are
read; within them a key is used when its original position is <= the query's. Flash-style
online softmax in float32; each program owns one (query block, head) and writes its rows of
the output at their original positions (one writer per row: deterministic).

Notation:
    H heads, Hkv key/value heads (G = H / Hkv), T tokens, D head dim (BLOCK_D = next power of
    two, masked lanes), S = BLOCK block size, nb = ceil(T / S), K = most kept blocks per row.
Inputs: q (H, T, D), k and v (Hkv, T, D) contiguous in one dtype (float32 / bf16 / fp16);
perm (H, T) int32; block_index (H, nb, K) int32; block_count (H, nb) int32.

Departures: forward only (prefill needs no gradient); the gather by `perm` replaces the paper's
physical permutation of q/k/v (no permuted copies are written); float32 inputs use "ieee" dots
so the interpreter test matches the reference to ~1e-6. Performance is unmeasured here (no GPU
when written): benchmarks/gpu_check.py (section sparse_prefill) measures it on CUDA. TRITON_INTERPRET must be
set before this module is first imported for the CPU interpreter to be used.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch import Tensor

from webrl.kernels.sparse_prefill import block_lists

INTERPRETED = (bool(triton.knobs.runtime.interpret) if hasattr(triton, "knobs")
               else os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true"))
NEG_LARGE = -1e30  # finite: exp(NEG_LARGE - m) is 0 without the NaN of (-inf) - (-inf)


@triton.jit
def _sparse_prefill_kernel(q_ptr, k_ptr, v_ptr, out_ptr, perm_ptr, index_ptr, count_ptr,
                           T, D, nb, group, max_kept, scale,
                           BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, DOT_PRECISION: tl.constexpr):
    i = tl.program_id(0)
    h = tl.program_id(1)
    kv_head = h // group
    lanes = tl.arange(0, BLOCK)
    d = tl.arange(0, BLOCK_D)
    live_d = d < D
    slots = i * BLOCK + lanes
    live_q = slots < T
    pos_q = tl.load(perm_ptr + h * T + slots, mask=live_q, other=0)
    q_rows = (h * T + pos_q).to(tl.int64) * D
    q = tl.load(q_ptr + q_rows[:, None] + d[None, :], mask=live_q[:, None] & live_d[None, :], other=0.0)
    m = tl.full([BLOCK], NEG_LARGE, tl.float32)
    l = tl.zeros([BLOCK], tl.float32)
    acc = tl.zeros([BLOCK, BLOCK_D], tl.float32)
    count = tl.load(count_ptr + h * nb + i)
    for n in range(0, count):
        j = tl.load(index_ptr + (h * nb + i) * max_kept + n)
        key_slots = j * BLOCK + lanes
        live_k = key_slots < T
        pos_k = tl.load(perm_ptr + h * T + key_slots, mask=live_k, other=0)
        k_rows = (kv_head * T + pos_k).to(tl.int64) * D
        k_t = tl.load(k_ptr + k_rows[None, :] + d[:, None], mask=live_d[:, None] & live_k[None, :], other=0.0)
        s = tl.dot(q, k_t, input_precision=DOT_PRECISION) * scale  # (S, S)
        ok = live_k[None, :] & (pos_k[None, :] <= pos_q[:, None])
        s = tl.where(ok, s, NEG_LARGE)
        m_new = tl.maximum(m, tl.max(s, 1))
        alpha = tl.exp(m - m_new)
        p = tl.where(ok, tl.exp(s - m_new[:, None]), 0.0)  # a fully masked row stays at 0
        l = l * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + k_rows[:, None] + d[None, :], mask=live_k[:, None] & live_d[None, :], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m = m_new
    out = acc / tl.where(l > 0, l, 1.0)[:, None]
    tl.store(out_ptr + q_rows[:, None] + d[None, :], out.to(out_ptr.dtype.element_ty),
             mask=live_q[:, None] & live_d[None, :])


def triton_block_sparse_attention(q: Tensor, k: Tensor, v: Tensor, perm: Tensor, block_mask: Tensor,
                                  block_size: int, scale: float) -> Tensor:
    """(H, T, D) output of the block-sparse causal attention; see the module docstring."""
    H, T, D = q.shape
    if q.device.type != "cuda" and not INTERPRETED:
        raise RuntimeError("the Triton sparse prefill needs CUDA tensors, or TRITON_INTERPRET=1 set "
                           "before webrl.kernels.triton_sparse_prefill is first imported")
    if k.dtype != q.dtype or v.dtype != q.dtype or H % k.shape[0]:
        raise ValueError(f"q/k/v must share a dtype and Hkv must divide H: {q.dtype}/{k.dtype}/{v.dtype}, "
                         f"{H} / {k.shape[0]}")
    index, count = block_lists(block_mask)
    nb = block_mask.shape[1]
    out = torch.empty_like(q)
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    _sparse_prefill_kernel[(nb, H)](
        q.contiguous(), k.contiguous(), v.contiguous(), out, perm.to(torch.int32).contiguous(), index, count,
        T, D, nb, H // k.shape[0], index.shape[-1], float(scale),
        BLOCK=block_size, BLOCK_D=max(16, triton.next_power_of_2(D)), DOT_PRECISION=precision)
    return out

"""Modality-aware permutation block-sparse attention for Qwen-VL prefill (after MMInference).

    layout = layout_from_ids(input_ids, image_token_id, image_grid_thw, merge_size=2)
    plan = build_block_plan(q, k, layout, ["grid", "a_shape", ...], SparsePrefillConfig(budget=0.25))
    out = block_sparse_attention_reference(q, k, v, plan)          # or triton_sparse_prefill

Notation:
    T tokens of one prompt (no padding), H query heads, Hkv key/value heads (H = Hkv·G),
    D head dim, S block size (query and key blocks are the same size), nb = ceil(T / S).
    perm (H, T): per head, the order in which tokens are laid out before blocking; perm[h, p]
    is the original position of the token at permuted slot p. Causality is always decided on
    original positions (key position <= query position), so any permutation is exact.
    block_mask (H, nb, nb) bool: query block i may read key block j (both in permuted order).

Patterns (one per head; `PATTERNS`):
    dense           every causal block.
    a_shape         (text "A-shape" / streaming) the first `sink_blocks` key blocks plus the
                    key blocks nearest the diagonal; static, no q·k estimate.
    vertical_slash  identity order; each key block is scored by the pooled-attention mass of
                    its column (vertical) plus that of its block diagonal (slash).
    grid            visual tokens of every image are re-laid out column-major (w, then h, per
                    frame), so a head that reads "the same column in earlier rows" (stride-w
                    grid in row-major order) becomes block-contiguous; key blocks are then
                    scored by the pooled q·k estimate in that order.
Every non-dense pattern keeps the diagonal block (a token always sees itself) and the sink
blocks, then fills a budget per query block by top-k of its score.

Interpretation of the paper (MMInference, Li et al. 2025), where this departs from it:
    * The block mask is built per input from a pooled estimate: queries and keys are mean-
      pooled per block, softmax(q̄ k̄ᵀ / √D) over causal blocks is the estimate. MMInference
      estimates vertical/slash lines from the last 64 queries and uses a static stride grid;
      here all three sparse patterns share one block-level top-k with a budget
      (`SparsePrefillConfig.budget`: the fraction of a row's causal key blocks kept), so
      budget = 1 is exactly dense attention for every pattern.
    * Cross-modality boundaries: the paper treats text->visual, visual->text and within-
      modality attention as separate regions with their own patterns. Here each query block
      row splits its budget between key blocks of its own modality and of the other one
      (each side keeps ceil(budget · its causal blocks)), so a handful of text blocks next
      to a long image is never crowded out by visual blocks (or the reverse). A block is
      "visual" when most of its tokens are image tokens.
    * The grid permutation here is the column-major re-layout of each image (frames of a
      video stay in time order); the paper also searches the stride and a phase shift.
    * A prompt without image tokens is computed densely (exact SDPA), as the brief asks;
      the text patterns only ever apply inside multimodal prompts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor
import torch.nn.functional as F

PATTERNS = ("dense", "a_shape", "vertical_slash", "grid")


class SparsePrefillError(ValueError):
    """A bad sparse-prefill setting or input (the message names the key and allowed values)."""


@dataclass(frozen=True)
class SparsePrefillConfig:
    """How block masks are built; the patterns per head come separately."""

    block_size: int = 64
    """S: tokens per query and key block (power of two >= 16, the Triton kernel's tile)."""
    budget: float = 0.25
    """Fraction (0, 1] of each query block's causal key blocks kept, per modality side; 1 = dense."""
    sink_blocks: int = 1
    """Leading key blocks always kept (attention sinks: the system prompt's start)."""
    local_blocks: int = 1
    """Key blocks just before the diagonal always kept (the diagonal block itself always is)."""
    min_tokens: int = 0
    """Prompts shorter than this run dense attention (the mask costs more than it saves)."""

    def __post_init__(self):
        s = self.block_size
        if s < 16 or s & (s - 1):
            raise SparsePrefillError(f"SparsePrefillConfig.block_size must be a power of two >= 16, got {s}")
        if not 0 < self.budget <= 1:
            raise SparsePrefillError(f"SparsePrefillConfig.budget must be in (0, 1], got {self.budget}")
        for name in ("sink_blocks", "local_blocks", "min_tokens"):
            if getattr(self, name) < 0:
                raise SparsePrefillError(f"SparsePrefillConfig.{name} must be >= 0, got {getattr(self, name)}")


def check_pattern(name: str, where: str = "pattern") -> str:
    if name not in PATTERNS:
        raise SparsePrefillError(f"{where} must be one of {PATTERNS}, got {name!r}")
    return name


@dataclass(frozen=True)
class ImageSpan:
    """One image's merged visual tokens: positions start .. start + t·h·w - 1, row-major (t, h, w)."""

    start: int
    t: int
    h: int
    w: int

    @property
    def end(self) -> int:
        return self.start + self.t * self.h * self.w


@dataclass(frozen=True)
class ModalityLayout:
    """Which tokens of a length-T prompt are visual, and their grids."""

    length: int
    images: tuple[ImageSpan, ...] = ()

    def visual_mask(self) -> Tensor:
        mask = torch.zeros(self.length, dtype=torch.bool)  # (T,)
        for span in self.images:
            mask[span.start:span.end] = True
        return mask


def layout_from_ids(input_ids, image_token_id: int, image_grid_thw=None, merge_size: int = 2) -> ModalityLayout:
    """Layout of one unpadded prompt: each run of `image_token_id` is one image, matched in order
    with a row of `image_grid_thw` ((n_images, 3) patch grid; merged grid = (t, h/m, w/m)).
    Without grids each run is taken as one row of tokens (h = 1)."""
    ids = torch.as_tensor(input_ids).reshape(-1)
    is_image = (ids == image_token_id).to(torch.int8)
    edges = torch.diff(is_image, prepend=is_image.new_zeros(1), append=is_image.new_zeros(1))
    starts = torch.nonzero(edges == 1).flatten().tolist()
    ends = torch.nonzero(edges == -1).flatten().tolist()
    grids = [] if image_grid_thw is None else torch.as_tensor(image_grid_thw).reshape(-1, 3).tolist()
    if grids and len(grids) != len(starts):
        raise SparsePrefillError(f"image_grid_thw has {len(grids)} images but the ids hold {len(starts)} image runs")
    spans = []
    for n, (start, end) in enumerate(zip(starts, ends)):
        t, h, w = (grids[n][0], grids[n][1] // merge_size, grids[n][2] // merge_size) if grids else (1, 1, end - start)
        if t * h * w != end - start:
            raise SparsePrefillError(f"image {n}: grid {t}x{h}x{w} merged tokens != {end - start} image tokens")
        spans.append(ImageSpan(start, t, h, w))
    return ModalityLayout(len(ids), tuple(spans))


def grid_permutation(layout: ModalityLayout) -> Tensor:
    """(T,) original positions in grid order: text in place, each image column-major per frame."""
    perm = torch.arange(layout.length)
    for s in layout.images:
        local = torch.arange(s.t * s.h * s.w).reshape(s.t, s.h, s.w).transpose(1, 2).reshape(-1)
        perm[s.start:s.end] = s.start + local
    return perm


@dataclass
class BlockPlan:
    """What the sparse kernels read. `dense` True: no sparsity (no images, or a short prompt)."""

    perm: Tensor
    """(H, T) int64 original position of each permuted slot."""
    block_mask: Tensor
    """(H, nb, nb) bool, query block x key block, in permuted order."""
    block_size: int
    dense: bool = False

    def kept_fraction(self) -> float:
        """Kept / causal block pairs (a block pair is causal if any of its token pairs is)."""
        causal = _causal_blocks(self.perm, self.block_size)
        return float((self.block_mask & causal).sum() / causal.sum())


def _block_extremes(perm: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """(H, nb) min and max original position of each permuted block."""
    H, T = perm.shape
    nb = math.ceil(T / size)
    pad = nb * size - T
    lo = F.pad(perm, (0, pad), value=T).reshape(H, nb, size).amin(-1)
    hi = F.pad(perm, (0, pad), value=-1).reshape(H, nb, size).amax(-1)
    return lo, hi


def _causal_blocks(perm: Tensor, size: int) -> Tensor:
    """(H, nb, nb) bool: query block i has a token at or after some token of key block j."""
    lo, hi = _block_extremes(perm, size)
    return lo[:, None, :] <= hi[:, :, None]


def _pool(x: Tensor, size: int) -> Tensor:
    """(H, T, D) -> (H, nb, D) mean over each block's tokens (a short last block is not diluted)."""
    H, T, D = x.shape
    nb = math.ceil(T / size)
    padded = F.pad(x.float(), (0, 0, 0, nb * size - T)).reshape(H, nb, size, D)
    counts = torch.full((nb,), float(size), device=x.device)
    counts[-1] = T - (nb - 1) * size
    return padded.sum(2) / counts[None, :, None]


def _topk_rows(score: Tensor, allowed: Tensor, budget: float) -> Tensor:
    """(H, nb, nb) bool: per row, the ceil(budget · #allowed) allowed entries of highest score."""
    count = allowed.sum(-1, keepdim=True)  # (H, nb, 1)
    keep = torch.ceil(count.float() * budget).long()
    masked = score.masked_fill(~allowed, float("-inf"))
    rank = masked.argsort(-1, descending=True).argsort(-1)  # (H, nb, nb) rank of each entry in its row
    return (rank < keep) & allowed


def build_block_plan(q: Tensor, k: Tensor, layout: ModalityLayout, patterns, config: SparsePrefillConfig) -> BlockPlan:
    """Per-head permutation and block mask for one prompt.

    q: (H, T, D) and k: (Hkv, T, D), after rotary embedding. patterns: H names from PATTERNS.
    """
    H, T, _ = q.shape
    if len(patterns) != H:
        raise SparsePrefillError(f"patterns has {len(patterns)} entries for {H} heads")
    for name in patterns:
        check_pattern(name, "sparse prefill pattern")
    if layout.length != T:
        raise SparsePrefillError(f"layout.length {layout.length} != {T} tokens of q")
    S, device = config.block_size, q.device
    identity = torch.arange(T, device=device)
    if not layout.images or T < config.min_tokens or all(p == "dense" for p in patterns):
        nb = math.ceil(T / S)
        return BlockPlan(identity.expand(H, T), torch.ones(H, nb, nb, dtype=torch.bool, device=device), S, dense=True)
    grid = grid_permutation(layout).to(device)
    perm = torch.stack([grid if p == "grid" else identity for p in patterns])  # (H, T)
    group = H // k.shape[0]
    k_heads = k.repeat_interleave(group, 0) if group > 1 else k  # (H, T, D)
    q_perm = torch.gather(q, 1, perm[..., None].expand_as(q))
    k_perm = torch.gather(k_heads, 1, perm[..., None].expand_as(k_heads))
    causal = _causal_blocks(perm, S)  # (H, nb, nb)
    nb = causal.shape[-1]
    rows = torch.arange(nb, device=device)
    offset = rows[:, None] - rows[None, :]  # (nb, nb) i - j
    estimate = (_pool(q_perm, S) @ _pool(k_perm, S).transpose(1, 2)) / math.sqrt(q.shape[-1])
    estimate = estimate.masked_fill(~causal, float("-inf")).softmax(-1)  # (H, nb, nb)
    vertical = estimate.mean(1, keepdim=True)  # (H, 1, nb) column mass
    diagonal = offset.clamp(min=0).flatten().expand(H, -1)  # (H, nb·nb) block diagonal of each entry
    lower = (offset >= 0).float().flatten().expand(H, -1)
    slash = torch.zeros(H, nb, device=device).scatter_add_(1, diagonal, estimate.flatten(1) * lower)
    slash = slash / (nb - torch.arange(nb, device=device))  # (H, nb) mean mass on block diagonal d
    scores = {
        "a_shape": (-offset.abs().float()).expand(H, nb, nb),
        "vertical_slash": vertical + slash[:, offset.clamp(min=0)],
        "grid": estimate,
    }
    score = torch.stack([scores.get(p, estimate)[h] for h, p in enumerate(patterns)])  # (H, nb, nb)
    visual = layout.visual_mask().to(device)
    visual_block = _pool(visual[perm].float()[..., None], S)[..., 0] > 0.5  # (H, nb)
    same = visual_block[:, :, None] == visual_block[:, None, :]  # (H, nb, nb)
    forced = (rows[None, :] < config.sink_blocks) | ((offset >= 0) & (offset <= config.local_blocks))
    mask = _topk_rows(score, causal & same, config.budget) | _topk_rows(score, causal & ~same, config.budget)
    mask = (mask | forced[None]) & causal
    dense_heads = torch.tensor([p == "dense" for p in patterns], device=device)
    mask = torch.where(dense_heads[:, None, None], causal, mask)
    return BlockPlan(perm, mask, S)


def _expand_kv(x: Tensor, heads: int) -> Tensor:
    group = heads // x.shape[0]
    return x.repeat_interleave(group, 0) if group > 1 else x


def block_lists(block_mask: Tensor) -> tuple[Tensor, Tensor]:
    """(H, nb, nb) bool -> block_index (H, nb, K) int32 (each row's kept key blocks first,
    ascending; the rest is filler) and block_count (H, nb) int32; K = the largest row count."""
    count = block_mask.sum(-1)
    order = torch.sort((~block_mask).to(torch.int8), dim=-1, stable=True).indices
    kept = max(int(count.max()), 1)
    return order[..., :kept].to(torch.int32).contiguous(), count.to(torch.int32).contiguous()


def block_sparse_attention_reference(q: Tensor, k: Tensor, v: Tensor, plan: BlockPlan,
                                     scale: float | None = None, chunk_elements: int = 1 << 20) -> Tensor:
    """Exact causal attention restricted to the plan's blocks; only kept blocks are computed.

    q (H, T, D), k and v (Hkv, T, D) -> (H, T, D) in q's dtype (float32 math). Each query reads
    the keys of its kept key blocks whose original position is <= its own. Query blocks go in
    chunks of C consecutive blocks, each padded to the chunk's largest kept count K (C·S·K·S
    logits at most `chunk_elements`); padded key slots get position T, so real queries never
    read them (padded query slots, also at T, read only padding and are dropped). Each chunk is
    one masked `scaled_dot_product_attention` call (softmax(q kᵀ·scale + mask) v, float32).
    """
    H, T, D = q.shape
    scale = D ** -0.5 if scale is None else scale
    if plan.dense:
        return dense_causal_attention(q, k, v, scale)
    S, device = plan.block_size, q.device
    nb = plan.block_mask.shape[1]
    k, v = _expand_kv(k, H), _expand_kv(v, H)
    index, count = block_lists(plan.block_mask)
    index, count = index.long(), count.long()
    pad = nb * S - T
    lanes = torch.arange(S, device=device)
    out = torch.empty(H, nb * S, v.shape[-1], dtype=torch.float32, device=device)
    for h in range(H):
        perm = plan.perm[h]
        qp = F.pad(q[h, perm].float(), (0, 0, 0, pad)).reshape(nb, S, D)
        kp, vp = F.pad(k[h, perm].float(), (0, 0, 0, pad)), F.pad(v[h, perm].float(), (0, 0, 0, pad))
        pos = F.pad(perm, (0, pad), value=T)  # (nb·S,) padded slots: position T
        block = 0
        while block < nb:
            widest = int(count[h, block:].max())
            rows = max(1, min(nb - block, chunk_elements // (S * S * widest)))
            K = int(count[h, block:block + rows].max())
            blocks = index[h, block:block + rows, :K]  # (C, K)
            live = torch.arange(K, device=device) < count[h, block:block + rows, None]
            cols = (blocks[..., None] * S + lanes).reshape(rows, K * S)  # (C, K·S) permuted slots
            key_pos = torch.where(live.repeat_interleave(S, 1), pos[cols], T)  # (C, K·S)
            query_pos = pos[block * S:(block + rows) * S].reshape(rows, S)
            allowed = key_pos[:, None, :] <= query_pos[:, :, None]  # (C, S, K·S); padded rows see padding
            attended = F.scaled_dot_product_attention(qp[block:block + rows], kp[cols], vp[cols],
                                                      attn_mask=allowed, scale=scale)  # (C, S, D)
            out[h, block * S:(block + rows) * S] = attended.reshape(rows * S, -1)
            block += rows
    result = torch.empty(H, T, v.shape[-1], dtype=torch.float32, device=device)
    result.scatter_(1, plan.perm[..., None].expand(H, T, v.shape[-1]), out[:, :T])
    return result.to(q.dtype)


def dense_causal_attention(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None) -> Tensor:
    """The fallback and the comparison: SDPA, causal, (H, T, D) with Hkv key/value heads."""
    H = q.shape[0]
    return F.scaled_dot_product_attention(q[None], _expand_kv(k, H)[None], _expand_kv(v, H)[None],
                                          is_causal=True, scale=scale)[0]


def kept_token_mask(plan: BlockPlan) -> Tensor:
    """(H, T, T) bool in original positions: query t reads key s (kept block and s <= t)."""
    H, T = plan.perm.shape
    S = plan.block_size
    slot_block = torch.arange(T, device=plan.perm.device) // S
    permuted = plan.block_mask[:, slot_block][:, :, slot_block]  # (H, T, T) in permuted slots
    out = torch.zeros_like(permuted)
    for h in range(H):
        p = plan.perm[h]
        out[h, p[:, None], p[None, :]] = permuted[h]
    return out & torch.ones(T, T, dtype=torch.bool, device=out.device).tril()


def attention_recall(q: Tensor, k: Tensor, plan: BlockPlan, scale: float | None = None) -> Tensor:
    """(H, T) share of each query's dense softmax mass that falls on the plan's kept keys."""
    H, T, D = q.shape
    scale = D ** -0.5 if scale is None else scale
    logits = (q.float() @ _expand_kv(k, H).float().transpose(1, 2)) * scale
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    probs = logits.masked_fill(~causal, float("-inf")).softmax(-1)  # (H, T, T)
    return (probs * kept_token_mask(plan)).sum(-1)


def block_flops(plan: BlockPlan, head_dim: int) -> tuple[float, float]:
    """(sparse, dense) attention FLOPs: 4·D per computed (query, key) pair (QKᵀ and PV), counting
    full S x S tiles for every kept block pair and, for dense, the causal half of T x T."""
    H, T = plan.perm.shape
    S = plan.block_size
    sparse = float(plan.block_mask.sum()) * S * S * 4 * head_dim
    dense = H * T * (T + 1) / 2 * 4 * head_dim
    return sparse, dense


def sparse_prefill_attention(q: Tensor, k: Tensor, v: Tensor, plan: BlockPlan, scale: float | None = None,
                             backend: str = "auto") -> Tensor:
    """The plan's attention on the Triton kernel (CUDA, or the interpreter) or the torch reference.

    backend: "auto" | "triton" | "torch", resolved as `webrl.kernels.resolve_backend` does (so
    $WEBRL_KERNEL applies). A dense plan always runs SDPA.
    """
    from webrl.kernels.dispatch import resolve_backend

    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if plan.dense:
        return dense_causal_attention(q, k, v, scale)
    if resolve_backend(q.device, backend) == "triton":
        from webrl.kernels.triton_sparse_prefill import triton_block_sparse_attention

        return triton_block_sparse_attention(q, k, v, plan.perm, plan.block_mask, plan.block_size, scale)
    return block_sparse_attention_reference(q, k, v, plan, scale)

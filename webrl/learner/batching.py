"""Planning an update: mini-batches, token-budget micro-batches and their split across ranks.

Notation: S samples in the update, W ranks, L_i the length (prompt + response) of sample i,
M micro-batches, m = ceil(M / W) micro-batches per rank.

Everything here works on lengths and indices only (pure Python, no tensors, no Ray), so the
controller plans and each rank collates only its own samples.

Packing (`pack_micro_batches`): sort samples by length, longest first, and fill a micro-batch
while rows x longest row <= token_budget (first-fit-decreasing on the padded size). With rows
sorted, each micro-batch's padding is at most the length spread of its rows.

Ranks (`plan_ranks`): micro-batches go, largest padded size first, to the least-loaded rank that
still has fewer than m; ranks left short get empty micro-batches (run as a masked filler row).
Every rank therefore runs exactly m forward / backward passes. ZeRO-2/3 reduce or gather in
every pass, so unequal counts would deadlock the collectives.

Departure from "dynamic batching" in verl/OpenRLHF: the budget counts padded tokens (rows x
longest row), not real tokens, since we right-pad instead of packing rows into one sequence
(Qwen-VL's mrope positions are per sample and packed varlen attention is not available on CPU).
"""
from __future__ import annotations

import random
from typing import Sequence

#: A rank's plan: micro-batches as lists of sample indices ([] = a masked filler pass).
RankPlan = list[list[int]]


def pack_micro_batches(lengths: Sequence[int], token_budget: int, max_rows: int,
                       indices: Sequence[int] | None = None) -> list[list[int]]:
    """Group sample indices into micro-batches with rows x longest row <= token_budget.

    lengths: (S,) lengths of all samples; indices: which of them to pack (default all).
    A sample longer than the budget gets a micro-batch of its own.
    """
    if token_budget < 1 or max_rows < 1:
        raise ValueError(f"token_budget and max_rows must be >= 1, got {token_budget}, {max_rows}")
    order = sorted(range(len(lengths)) if indices is None else indices, key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        width = lengths[current[0]] if current else lengths[i]  # longest first: row 0 sets T
        if current and ((len(current) + 1) * width > token_budget or len(current) >= max_rows):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def padded_tokens(batch: Sequence[int], lengths: Sequence[int]) -> int:
    """rows x longest row of one micro-batch."""
    return len(batch) * max((lengths[i] for i in batch), default=0)


def plan_ranks(micro_batches: Sequence[list[int]], lengths: Sequence[int], world_size: int) -> list[RankPlan]:
    """Deal micro-batches to `world_size` ranks: each gets m = ceil(M / W) (fillers pad), and
    padded tokens are balanced greedily (largest first to the least-loaded rank with room)."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    per_rank = max(1, -(-len(micro_batches) // world_size))
    plans: list[RankPlan] = [[] for _ in range(world_size)]
    load = [0] * world_size
    for mb in sorted(micro_batches, key=lambda b: -padded_tokens(b, lengths)):
        rank = min((r for r in range(world_size) if len(plans[r]) < per_rank), key=lambda r: (load[r], r))
        plans[rank].append(mb)
        load[rank] += padded_tokens(mb, lengths)
    for plan in plans:
        plan.extend([] for _ in range(per_rank - len(plan)))
    return plans


def mini_batch_indices(num_samples: int, mini_batches: int, seed: int) -> list[list[int]]:
    """Split range(num_samples) into `mini_batches` near-equal parts after a seeded shuffle
    (no shuffle when there is a single mini-batch). Parts may be empty when S < mini_batches."""
    order = list(range(num_samples))
    if mini_batches > 1:
        random.Random(seed).shuffle(order)
    bounds = [round(k * num_samples / mini_batches) for k in range(mini_batches + 1)]
    return [sorted(order[bounds[k]:bounds[k + 1]]) for k in range(mini_batches)]


def plan_update(lengths: Sequence[int], world_size: int, token_budget: int, max_rows: int,
                indices: Sequence[int] | None = None) -> list[RankPlan]:
    """`pack_micro_batches` then `plan_ranks`: the per-rank micro-batches of one optimizer step
    (or of one log-prob pass) over `indices` (default all samples)."""
    return plan_ranks(pack_micro_batches(lengths, token_budget, max_rows, indices), lengths, world_size)


def padding_fraction(plans: Sequence[RankPlan], lengths: Sequence[int]) -> float:
    """Padded-but-empty share of all computed tokens (fillers excluded)."""
    padded = sum(padded_tokens(mb, lengths) for plan in plans for mb in plan)
    real = sum(lengths[i] for plan in plans for mb in plan for i in mb)
    return 0.0 if padded == 0 else 1.0 - real / padded

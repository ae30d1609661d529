"""CPU benchmark: MMInference-style sparse prefill (torch reference) vs dense SDPA, one layer.

    .venv/bin/python benchmarks/sparse_prefill.py --out benchmarks/results/sparse_prefill_<date>/results.json
    .venv/bin/python benchmarks/sparse_prefill.py --tokens 8192 --budgets 0.25 --heads 2   # quick

Shapes: Qwen3-VL-4B text attention (32 query heads, 8 key/value heads, head_dim 128; the
public config.json, as in gpu_check.py). One layer, `--heads` query heads sharing one kv head
(a GQA group of 4 has 4; 2 keeps the CPU runs short). float32.
Layout (`recipe_layout`): the recipe's multi-screenshot prompts: 1,024 tokens of system text,
then `--screenshots` turns of (a 25 x 40 grid = 1,000 merged visual tokens, a 1280 x 800
screenshot at 32 px per merged token, followed by text); the text is split evenly between the
turns so the total is T. Default screenshots: 2 at 8K, 4 at 16K, 8 at 32K (visual share 24-25%).
q/k/v are synthetic (no weights here): half the heads are "grid" heads whose visual queries
attend to their image column (`grid_qk`), the others "a_shape" heads with a rotary-like
locality (`local_qk`); the plan uses those patterns. The error on random q/k (flat attention,
the worst case for any sparsity) is reported as well.
Reported per (T, budget): kept fraction of causal blocks, attention FLOPs of the kept blocks
vs dense causal (`block_flops`), wall seconds of the plan (mask building), of the sparse
reference, and of dense SDPA (torch's CPU flash kernel), and relative L2 error vs dense
(mean and max over query rows) and error over mean ‖v‖. Timings: one call each, torch set to
1 thread; process CPU seconds are the figures (the shared 2-core machine makes wall time noise;
wall seconds are saved too). The torch reference pays gather and padding costs a fused kernel
does not; triton_sparse_prefill's speed is measured on CUDA by gpu_check.py.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

from webrl.kernels.sparse_prefill import (ImageSpan, ModalityLayout, SparsePrefillConfig, block_flops,
                                          block_sparse_attention_reference, build_block_plan, dense_causal_attention)

HEAD_DIM = 128
SYSTEM_TOKENS = 1024
IMAGE_GRID = (25, 40)  # merged tokens (h, w): 1,000 per screenshot
SCREENSHOTS = {8192: 2, 16384: 4, 32768: 8}


def recipe_layout(tokens: int, screenshots: int) -> ModalityLayout:
    h, w = IMAGE_GRID
    text = (tokens - SYSTEM_TOKENS - screenshots * h * w) // max(screenshots, 1)
    if text < 0:
        raise ValueError(f"{tokens} tokens cannot hold {screenshots} screenshots of {h * w} tokens")
    spans, start = [], SYSTEM_TOKENS
    for _ in range(screenshots):
        spans.append(ImageSpan(start, 1, h, w))
        start += h * w + text
    return ModalityLayout(tokens, tuple(spans))


def grid_qk(layout: ModalityLayout, D: int, gen: torch.Generator, strength: float = 8.0):
    """(T, D) q and k where visual tokens carry strength·e_col(column) (orthonormal e_col)."""
    T = layout.length
    q, k = torch.randn(T, D, generator=gen) * 0.5, torch.randn(T, D, generator=gen) * 0.5
    basis = torch.linalg.qr(torch.randn(D, D, generator=gen))[0]  # (D, D) orthonormal rows
    for span in layout.images:
        cols = torch.arange(span.h * span.w) % span.w
        q[span.start:span.end] += strength * basis[cols % D]
        k[span.start:span.end] += strength * basis[cols % D]
    return q, k


def local_qk(T: int, D: int, gen: torch.Generator, strength: float = 1.5):
    """(T, D) q and k whose logits decay with distance: a fixed vector rotated by position at
    low frequencies (as rotary embeddings do), plus noise."""
    half = D // 2
    freq = 1.0 / (200.0 ** (torch.arange(half) / half))  # radians per token
    angle = torch.arange(T)[:, None] * freq[None, :]  # (T, D/2)
    base = torch.cat([angle.cos(), angle.sin()], -1) * strength  # (T, D)
    return (base + torch.randn(T, D, generator=gen) * 0.5,
            base + torch.randn(T, D, generator=gen) * 0.5)


def inputs(layout: ModalityLayout, heads: int, kind: str, seed: int = 0):
    """q (H, T, D), k and v (1, T, D) (one shared kv head) and the heads' patterns."""
    gen = torch.Generator().manual_seed(seed)
    T = layout.length
    v = torch.randn(1, T, HEAD_DIM, generator=gen)
    if kind == "random":
        q, k = torch.randn(heads, T, HEAD_DIM, generator=gen), torch.randn(1, T, HEAD_DIM, generator=gen)
        return q, k, v, ["grid"] * heads
    q_grid, k_grid = grid_qk(layout, HEAD_DIM, gen)
    q_local, k_local = local_qk(T, HEAD_DIM, gen)
    # one kv head shared by both kinds: k = (k_grid + k_local) / √2. Grid heads' q carries both
    # structures (column on visual tokens, locality everywhere), local heads' q only locality.
    k = ((k_grid + k_local) / math.sqrt(2))[None]
    patterns = ["grid" if h % 2 == 0 else "a_shape" for h in range(heads)]
    q = torch.stack([q_grid + q_local if p == "grid" else q_local * math.sqrt(2) for p in patterns])
    return q, k, v, patterns


def errors(got, want, v) -> dict:
    """Relative L2 error per query row vs the dense output (mean, max), and the error over the
    mean value norm (the scale of the recall bound 2(1 - r)·max‖v‖; flat attention makes
    ‖o_dense‖ small, so the relative error overstates what a flat head loses)."""
    diff = (got - want).norm(dim=-1)  # (H, T)
    rel = diff / want.norm(dim=-1).clamp_min(1e-6)
    return dict(rel_error_mean=float(rel.mean()), rel_error_max=float(rel.max()),
                error_over_v_mean=float(diff.mean() / v.norm(dim=-1).mean()))


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    return value, time.perf_counter() - wall, time.process_time() - cpu


def run(tokens: int, budgets, heads: int, block: int, kinds) -> list[dict]:
    layout = recipe_layout(tokens, SCREENSHOTS.get(tokens, max(1, tokens // 4096)))
    rows = []
    for kind in kinds:
        q, k, v, patterns = inputs(layout, heads, kind)
        dense, dense_wall, dense_cpu = _timed(lambda: dense_causal_attention(q, k, v))
        for budget in budgets:
            config = SparsePrefillConfig(block_size=block, budget=budget)
            plan, plan_wall, plan_cpu = _timed(lambda: build_block_plan(q, k, layout, patterns, config))
            out, sparse_wall, sparse_cpu = _timed(lambda: block_sparse_attention_reference(q, k, v, plan))
            flops, dense_flops = block_flops(plan, HEAD_DIM)
            row = dict(tokens=tokens, inputs=kind, budget=budget, heads=heads, patterns=patterns,
                       screenshots=len(layout.images), visual_tokens=int(layout.visual_mask().sum()),
                       block_size=block, kept_block_fraction=plan.kept_fraction(),
                       sparse_gflops=flops / 1e9, dense_gflops=dense_flops / 1e9,
                       flops_saved=1 - flops / dense_flops, plan_cpu_s=plan_cpu, sparse_reference_cpu_s=sparse_cpu,
                       dense_sdpa_cpu_s=dense_cpu, plan_wall_s=plan_wall, sparse_reference_wall_s=sparse_wall,
                       dense_sdpa_wall_s=dense_wall, **errors(out, dense, v))
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", nargs="+", type=int, default=[8192, 16384, 32768])
    parser.add_argument("--budgets", nargs="+", type=float, default=[0.1, 0.25])
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--block", type=int, default=64)
    parser.add_argument("--inputs", nargs="+", default=["structured", "random"], choices=["structured", "random"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="write the rows (and the command) to this JSON file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [r for tokens in args.tokens for r in run(tokens, args.budgets, args.heads, args.block, args.inputs)]
    print("\n| T | inputs | budget | kept blocks | FLOPs saved | plan CPU s | sparse ref CPU s | dense SDPA CPU s "
          "| rel err mean / max | err / mean‖v‖ |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tokens']} | {r['inputs']} | {r['budget']} | {r['kept_block_fraction']:.3f} | "
              f"{r['flops_saved']:.1%} | {r['plan_cpu_s']:.2f} | {r['sparse_reference_cpu_s']:.2f} | "
              f"{r['dense_sdpa_cpu_s']:.2f} | {r['rel_error_mean']:.3f} / {r['rel_error_max']:.3f} | "
              f"{r['error_over_v_mean']:.3f} |")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        command = "python benchmarks/sparse_prefill.py " + " ".join(argv if argv is not None else sys.argv[1:])
        Path(args.out).write_text(json.dumps({"command": command, "torch": torch.__version__, "rows": rows},
                                             indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Sparse prefill (torch side): layouts and the grid permutation worked out by hand, the block-
sparse reference against dense SDPA, the error bound at a stated sparsity, the text-only dense
fallback, FLOPs, the pattern search and its file, and bad settings naming the key."""
import math

import pytest
import torch

from webrl.kernels.pattern_search import PatternTable, head_recalls
from webrl.kernels.sparse_prefill import (
    BlockPlan,
    ImageSpan,
    ModalityLayout,
    SparsePrefillConfig,
    SparsePrefillError,
    attention_recall,
    block_flops,
    block_sparse_attention_reference,
    build_block_plan,
    dense_causal_attention,
    grid_permutation,
    layout_from_ids,
    sparse_prefill_attention,
)

# A Qwen-VL-like prompt: 32 system-text tokens, one image of 16 x 16 merged tokens, 48 text tokens.
QWEN_LAYOUT = ModalityLayout(336, (ImageSpan(32, 1, 16, 16),))
ALL = ["dense", "a_shape", "vertical_slash", "grid"]
TIGHT = dict(atol=1e-5, rtol=1e-5)


def random_qkv(heads=4, kv_heads=2, T=336, D=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(heads, T, D, generator=g), torch.randn(kv_heads, T, D, generator=g),
            torch.randn(kv_heads, T, D, generator=g))


def grid_head(layout, heads=2, D=32, strength=6.0, seed=0):
    """q/k of heads whose visual queries attend to the keys of their own image column (a stride-w
    grid in row-major order): both carry strength·e_col with orthonormal e_col, so a same-column
    logit is about 36/√32 ≈ 6.4 above the others."""
    q, k, v = random_qkv(heads, heads, layout.length, D, seed)
    q, k = q * 0.5, k * 0.5
    span = layout.images[0]
    cols = torch.arange(span.h * span.w) % span.w
    g = torch.Generator().manual_seed(seed + 100)
    basis = torch.linalg.qr(torch.randn(D, D, generator=g))[0][:span.w]  # (w, D) orthonormal rows
    q[:, span.start:span.end] += strength * basis[cols]
    k[:, span.start:span.end] += strength * basis[cols]
    return q, k, v


def test_layout_from_ids_and_grid_permutation_by_hand():
    image = 7
    ids = [1, 2, image, image, image, image, image, image, 3, image, image, 4]
    layout = layout_from_ids(ids, image, torch.tensor([[1, 4, 6], [1, 2, 4]]), merge_size=2)
    # grids in patches (1, 4, 6) and (1, 2, 4) -> merged (1, 2, 3) = 6 tokens and (1, 1, 2) = 2 tokens
    assert layout.images == (ImageSpan(2, 1, 2, 3), ImageSpan(9, 1, 1, 2))
    assert layout.visual_mask().tolist() == [False, False] + [True] * 6 + [False, True, True, False]
    # first image row-major [[2, 3, 4], [5, 6, 7]] -> column-major 2, 5, 3, 6, 4, 7; text stays put
    assert grid_permutation(layout).tolist() == [0, 1, 2, 5, 3, 6, 4, 7, 8, 9, 10, 11]


def test_layout_mismatch_names_the_counts():
    with pytest.raises(SparsePrefillError, match="2x3 merged tokens != 5"):
        layout_from_ids([7] * 5, 7, torch.tensor([[1, 4, 6]]))
    with pytest.raises(SparsePrefillError, match="1 images but the ids hold 2"):
        layout_from_ids([7, 1, 7], 7, torch.tensor([[1, 2, 2]]))


def test_all_ones_block_mask_equals_dense_sdpa_under_any_permutation():
    q, k, v = random_qkv()
    T = q.shape[1]
    nb = math.ceil(T / 16)
    g = torch.Generator().manual_seed(5)
    perm = torch.stack([torch.randperm(T, generator=g) for _ in range(4)])  # (H, T)
    plan = BlockPlan(perm, torch.ones(4, nb, nb, dtype=torch.bool), 16)
    want = dense_causal_attention(q, k, v)
    torch.testing.assert_close(block_sparse_attention_reference(q, k, v, plan), want, **TIGHT)


def test_budget_one_keeps_every_causal_block_and_is_dense():
    q, k, v = random_qkv()
    plan = build_block_plan(q, k, QWEN_LAYOUT, ALL, SparsePrefillConfig(block_size=16, budget=1.0))
    assert not plan.dense and plan.kept_fraction() == 1.0
    want = dense_causal_attention(q, k, v)
    torch.testing.assert_close(block_sparse_attention_reference(q, k, v, plan), want, **TIGHT)


def test_prompt_without_visual_tokens_is_exactly_dense():
    q, k, v = random_qkv(T=200)
    plan = build_block_plan(q, k, ModalityLayout(200), ["grid"] * 4, SparsePrefillConfig(block_size=16, budget=0.1))
    assert plan.dense and bool(plan.block_mask.all())
    want = dense_causal_attention(q, k, v)
    assert torch.equal(block_sparse_attention_reference(q, k, v, plan), want)
    assert torch.equal(sparse_prefill_attention(q, k, v, plan, backend="torch"), want)


@pytest.mark.parametrize("seed", [0, 1])
def test_error_within_the_recall_bound_at_stated_sparsity(seed):
    """Per query, o_dense = r·o_sparse + (1 - r)·o_dropped with r its kept softmax mass, so
    ‖o_sparse - o_dense‖ = (1 - r)‖o_sparse - o_dropped‖ <= 2(1 - r)·max‖v‖. Random q/k are the
    worst case for sparsity (flat attention), so here only the bound is asserted, at budget
    0.25 with at most 55% of the causal blocks computed (head 0 of 4 is dense, so all of its)."""
    q, k, v = random_qkv(seed=seed)
    plan = build_block_plan(q, k, QWEN_LAYOUT, ALL, SparsePrefillConfig(block_size=16, budget=0.25))
    assert plan.kept_fraction() <= 0.55
    recall = attention_recall(q, k, plan)  # (H, T)
    error = (block_sparse_attention_reference(q, k, v, plan) - dense_causal_attention(q, k, v)).norm(dim=-1)
    bound = 2 * (1 - recall) * v.norm(dim=-1).max()
    assert bool((error <= bound + 1e-5).all())
    assert float(error[0].max()) < 1e-5  # head 0 is "dense": exact


def test_grid_pattern_on_a_grid_head_at_a_quarter_budget():
    """Stated: budget 0.25 (<= 40% of causal blocks computed) on a grid head of the Qwen-like
    layout: the grid pattern keeps >= 95% of the visual queries' dense mass and their outputs
    are within 5% relative error; row-major patterns keep < 60% (a column is spread over
    every row block), which is why the permutation is needed."""
    q, k, v = grid_head(QWEN_LAYOUT)
    visual = QWEN_LAYOUT.visual_mask()
    dense = dense_causal_attention(q, k, v)
    config = SparsePrefillConfig(block_size=16, budget=0.25)
    plan = build_block_plan(q, k, QWEN_LAYOUT, ["grid", "grid"], config)
    assert plan.kept_fraction() <= 0.40
    assert float(attention_recall(q, k, plan)[:, visual].mean()) >= 0.95
    out = block_sparse_attention_reference(q, k, v, plan)
    relative = (out - dense).norm(dim=-1) / dense.norm(dim=-1)
    assert float(relative[:, visual].mean()) <= 0.05
    for name in ("a_shape", "vertical_slash"):
        row_major = build_block_plan(q, k, QWEN_LAYOUT, [name] * 2, config)
        assert float(attention_recall(q, k, row_major)[:, visual].mean()) < 0.6


def test_pattern_search_picks_grid_for_a_grid_head_and_saves_the_file(tmp_path):
    q, k, _ = grid_head(QWEN_LAYOUT)
    config = SparsePrefillConfig(block_size=16, budget=0.25)
    table = PatternTable(config=config)
    table.add_recalls(3, head_recalls(q, k, QWEN_LAYOUT, config))
    table.prompts += 1
    assert table.choose(min_recall=0.5).layers == {3: ["grid", "grid"]}
    assert table.choose(min_recall=0.99).layers == {3: ["dense", "dense"]}  # nothing reaches 99%
    loaded = PatternTable.load(table.save(tmp_path / "sparse_patterns.json"))
    assert loaded.config == config and loaded.layers == {3: ["dense", "dense"]}
    assert loaded.for_layer(0, 2) == ["grid", "grid"]  # unlisted layer: the default


def test_block_flops_by_hand():
    # T = 32, S = 16, D = 8: 2 blocks; keep (0,0), (1,1): 2·16·16·4·8 = 16384 sparse FLOPs;
    # dense causal pairs 32·33/2 = 528 -> 528·4·8 = 16896 per head
    plan = BlockPlan(torch.arange(32)[None], torch.tensor([[[True, False], [False, True]]]), 16)
    assert block_flops(plan, 8) == (16384.0, 16896.0)


@pytest.mark.parametrize("kwargs, key", [
    (dict(block_size=24), "block_size"), (dict(budget=0.0), "budget"), (dict(budget=1.5), "budget"),
    (dict(sink_blocks=-1), "sink_blocks"),
])
def test_bad_config_names_the_key(kwargs, key):
    with pytest.raises(SparsePrefillError, match=f"SparsePrefillConfig.{key}"):
        SparsePrefillConfig(**kwargs)


def test_bad_pattern_names_the_allowed_values(tmp_path):
    q, k, _ = random_qkv(heads=2)
    allowed = r"one of \('dense', 'a_shape', 'vertical_slash', 'grid'\), got 'stride'"
    with pytest.raises(SparsePrefillError, match=allowed):
        build_block_plan(q, k, QWEN_LAYOUT, ["grid", "stride"], SparsePrefillConfig(block_size=16))
    with pytest.raises(SparsePrefillError, match="2 entries for 2 heads|patterns has 1 entries"):
        build_block_plan(q, k, QWEN_LAYOUT, ["grid"], SparsePrefillConfig(block_size=16))
    with pytest.raises(SparsePrefillError, match="PatternTable.default must be one of"):
        PatternTable(default="sparse")
    bad = tmp_path / "sparse_patterns.json"
    bad.write_text('{"format": 1, "config": {"block_size": 16}, "layers": {"0": ["grid", "slash"]}}')
    with pytest.raises(SparsePrefillError, match=r"layers\[0\] must be one of"):
        PatternTable.load(bad)


def test_benchmark_recipe_layout_by_hand():
    from tests.benchmarks.helpers import load_benchmark

    bench = load_benchmark("sparse_prefill")
    # text per turn (8192 - 1024 system - 2 x 1000 visual) // 2 = 2584: images at 1024 and 1024 + 1000 + 2584
    assert bench.recipe_layout(8192, 2).images == (ImageSpan(1024, 1, 25, 40), ImageSpan(4608, 1, 25, 40))
    with pytest.raises(ValueError, match="cannot hold 8 screenshots"):
        bench.recipe_layout(8192, 8)

"""Sparse prefill plugged into GeneratorPolicy on the tiny Qwen-VL models: with budget 1 (every
causal block) greedy tokens equal the dense run on a left-padded batch; at budget 0.25 the
captured real-layout q/k/v of the model obey the recall error bound; decode and forwards outside
the prefill context are unchanged; `webrl sparse-search` writes the file "auto" reads; bad
settings name the key."""
import pytest
import torch

from tests.policy.helpers import PIXELS, observation
from webrl.config import ConfigError
from webrl.kernels.pattern_search import PATTERNS_FILE, PatternTable
from webrl.kernels.sparse_prefill import (SparsePrefillConfig, attention_recall, block_sparse_attention_reference,
                                          build_block_plan, dense_causal_attention)
from webrl.models import load_model, tiny_model
from webrl.policy import GeneratorConfig, GeneratorPolicy, PolicyRequest, PromptConfig, SamplingConfig
from webrl.policy.sparse_attention import ATTENTION_NAME, SparsePrefill, SparseSearchConfig, search_main

FAMILIES = ["qwen2.5-vl", "qwen3-vl"]
GREEDY = SamplingConfig(greedy=True, max_new_tokens=6)


def make_policy(path, sparse_prefill=""):
    model, processor = load_model(path)
    config = GeneratorConfig(prompt=PromptConfig(**PIXELS), sampling=GREEDY, sparse_prefill=sparse_prefill)
    return GeneratorPolicy(model, processor, config)


def requests():
    # different screenshot sizes -> different prompt lengths -> left padding in one batch
    return [PolicyRequest(observation(0, size=(320, 200))), PolicyRequest(observation(2, size=(200, 320)))]


def write_table(path, budget, default="grid"):
    return str(PatternTable(config=SparsePrefillConfig(block_size=16, budget=budget), default=default).save(path))


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_budget_one_generates_the_dense_tokens(family, tiny_model_paths, tmp_path):
    dense = make_policy(tiny_model_paths[family]).act(requests())
    assert len(dense[0].prompt_ids) != len(dense[1].prompt_ids)  # the batch is left-padded
    sparse_policy = make_policy(tiny_model_paths[family], write_table(tmp_path / PATTERNS_FILE, 1.0))
    assert sparse_policy.model.config.get_text_config()._attn_implementation == ATTENTION_NAME
    assert sparse_policy.model.config.vision_config._attn_implementation != ATTENTION_NAME
    sparse = sparse_policy.act(requests())
    for d, s in zip(dense, sparse):
        assert s.response_ids == d.response_ids and s.prompt_ids == d.prompt_ids
        torch.testing.assert_close(torch.tensor(s.logprobs), torch.tensor(d.logprobs), atol=1e-4, rtol=0)


def _captured(policy, budget):
    """Layer 0's q/k/v of one real prompt (system text, a screenshot, text) and its layout."""
    batch = policy.encode([policy.builder.render(requests()[0])])
    sparse = SparsePrefill(policy.model, PatternTable(config=SparsePrefillConfig(block_size=16, budget=budget)),
                           backend="torch")
    captured, values = {}, {}
    layer = policy.model.model.language_model.layers[0].self_attn
    hook = layer.v_proj.register_forward_hook(lambda m, i, o: values.setdefault(0, o))
    with torch.no_grad(), sparse.prefill(batch, capture=captured):
        policy.model(**batch)
    hook.remove()
    (q, k), = captured[0]
    v = values[0][0].reshape(q.shape[1], k.shape[0], -1).transpose(0, 1)  # (Hkv, T, D)
    return q, k, v, sparse.layouts(batch)[0]


@pytest.mark.parametrize("family", FAMILIES)
def test_real_layout_error_within_recall_bound(family, tiny_model_paths):
    policy = make_policy(tiny_model_paths[family])
    q, k, v, layout = _captured(policy, 0.25)
    assert layout.images and layout.images[0].h * layout.images[0].w > 16  # one screenshot, several blocks
    plan = build_block_plan(q, k, layout, ["grid", "a_shape", "vertical_slash", "grid"], SparsePrefillConfig(16, 0.25))
    assert plan.kept_fraction() < 1.0
    error = (block_sparse_attention_reference(q, k, v, plan) - dense_causal_attention(q, k, v)).norm(dim=-1)
    bound = 2 * (1 - attention_recall(q, k, plan)) * v.norm(dim=-1).max()
    assert bool((error <= bound + 1e-5).all())


def test_outside_the_prefill_context_the_model_is_unchanged(tiny_model_paths):
    policy = make_policy(tiny_model_paths["qwen3-vl"])
    batch = policy.encode([policy.builder.render(requests()[0])])
    with torch.no_grad():
        before = policy.model(**batch).logits
        SparsePrefill(policy.model, PatternTable(config=SparsePrefillConfig(block_size=16, budget=0.1)))
        after = policy.model(**batch).logits  # registered, but no prefill context: the fallback (sdpa)
    assert torch.equal(before, after)


@pytest.mark.slow
def test_search_writes_patterns_that_auto_reads(tmp_path):
    path = tiny_model("qwen3-vl", out_dir=tmp_path / "ckpt", seed=0)
    config = SparseSearchConfig(checkpoint=path, prompts=1, images=2, image_tokens=64,
                                config=SparsePrefillConfig(block_size=16, budget=0.25), min_recall=0.5)
    assert search_main(config) == 0
    table = PatternTable.load(tmp_path / "ckpt" / PATTERNS_FILE)
    assert sorted(table.layers) == [0, 1] and all(len(heads) == 4 for heads in table.layers.values())
    policy = make_policy(path, "auto")
    sparse = policy.backend.sparse
    assert sparse.table.layers == table.layers and sparse.table.config == table.config


def test_bad_settings_name_the_key(tiny_model_paths, tmp_path):
    with pytest.raises(ValueError, match="GeneratorConfig.sparse_prefill must be '' \\(off\\), 'auto' or a path"):
        GeneratorConfig(sparse_prefill="yes")
    for off in (False, "false", ""):
        assert GeneratorConfig(sparse_prefill=off).sparse_prefill == ""
    with pytest.raises(ConfigError, match="generator.sparse_prefill: no patterns file"):
        make_policy(tiny_model_paths["qwen3-vl"], str(tmp_path / "missing.json"))
    # a server engine renders prompts without the model: its prefill is the server's
    from webrl.models import load_model
    from webrl.policy import GeneratorPolicy

    _, processor = load_model(tiny_model_paths["qwen3-vl"])
    with pytest.raises(ValueError, match="sparse_prefill needs the model in this process"):
        GeneratorPolicy(None, processor, GeneratorConfig(sparse_prefill="auto"), family="qwen3-vl")
    with pytest.raises(ConfigError, match="sparse_search.checkpoint must be a model folder"):
        search_main(SparseSearchConfig())
    with pytest.raises(ConfigError, match="sparse_search.min_recall"):
        SparseSearchConfig(checkpoint="x", min_recall=2)

"""The in-process generator backend (webrl/engines/transformers.py) against uncached forwards.

Reference: one full forward over prompt + ids with no cache (`_uncached_logits`). The backend's
row path (forced ids, hidden states, prefix-cache reuse, token-by-token decoding) and its batched
`generate` path must both agree with it; a kept KV cache must stay right after another prompt's
prefill changed the model's per-prompt state (Qwen-VL's rope deltas, the element pointer's keys).
"""
import dataclasses

import pytest
import torch

from tests.policy.helpers import policy
from webrl.policy.backend import ENGINE_CAPABILITIES, capability_table, image_keyed, reusable_prefix
from webrl.policy.cascade.synthetic import make_steps
from webrl.policy.generator import SamplingConfig

PIXELS = dict(min_pixels=1024, max_pixels=48 * 28 * 28)


def _policy(path, new_tokens=6, **kw):
    return policy(path, sampling=SamplingConfig(greedy=True, max_new_tokens=new_tokens),
                  **{"action_format": "som", "think": False, **PIXELS, **kw})


def _uncached_logits(pol, prompt, ids):
    """(len(ids) + 1, V) logits predicting each of ids and the next token, from one full forward."""
    batch = pol.encode([prompt])
    P = batch["input_ids"].shape[1]
    full = torch.cat([batch["input_ids"], torch.tensor([ids], dtype=torch.long)], dim=1)
    mm = torch.cat([batch["mm_token_type_ids"], torch.zeros(1, len(ids), dtype=batch["mm_token_type_ids"].dtype)], 1)
    pol.model.model.rope_deltas = None
    with torch.no_grad():
        out = pol.model(input_ids=full, attention_mask=torch.ones_like(full), mm_token_type_ids=mm, use_cache=False,
                        pixel_values=batch["pixel_values"], image_grid_thw=batch["image_grid_thw"],
                        output_hidden_states=True)
    return out.logits[0, P - 1:].float(), out.hidden_states[-1][0].float()


def _uncached_greedy(pol, prompt, n):
    ids = []
    for _ in range(n):
        nxt = int(_uncached_logits(pol, prompt, ids)[0][-1].argmax())
        ids.append(nxt)
        if nxt in pol.stop_ids:
            break
    return ids


@pytest.fixture(scope="module")
def requests():
    return [s.request for s in make_steps(3, seed=5)]


@pytest.mark.parametrize("family", ["qwen2.5-vl", "qwen3-vl"])
def test_row_path_hidden_states_forced_ids_and_cached_decoding_equal_uncached_forwards(
        tiny_model_paths, requests, family):
    pol = _policy(tiny_model_paths[family])
    prompt = pol.builder.render(requests[0])
    row = pol.request(prompt)
    P = len(row.prompt_ids)
    # 1. hidden states of the prompt, nothing sampled: every row, none cached
    heads = pol.backend.generate([dataclasses.replace(row, max_new_tokens=0, hidden_layer=-1)])[0]
    logits, hidden = _uncached_logits(pol, prompt, [])
    assert heads.ids == [] and heads.finish == "none" and (heads.hidden_start, heads.cached_tokens) == (0, 0)
    assert heads.hidden.shape == hidden.shape and torch.allclose(heads.hidden, hidden, atol=1e-4)
    # 2. the decode that follows reuses P - 1 prompt tokens and gives the uncached greedy answer
    decoded = pol.backend.generate([row])[0]  # a kept prefix: the row path, continuing the cache
    assert decoded.cached_tokens == P - 1 and decoded.ids == _uncached_greedy(pol, prompt, 6)
    ref = torch.log_softmax(_uncached_logits(pol, prompt, decoded.ids)[0][:-1], -1)
    ref = ref.gather(-1, torch.tensor(decoded.ids).view(-1, 1)).flatten()
    assert torch.allclose(torch.tensor(decoded.logprobs), ref, atol=1e-4)
    # 3. scoring the same ids (forced, at temperature 2) equals the uncached log-probs at T = 2
    forced = pol.backend.generate([dataclasses.replace(row, forced_ids=decoded.ids, max_new_tokens=0,
                                                       forced_temperature=2.0)])[0]
    ref2 = torch.log_softmax(_uncached_logits(pol, prompt, decoded.ids)[0][:-1] / 2.0, -1)
    ref2 = ref2.gather(-1, torch.tensor(decoded.ids).view(-1, 1)).flatten()
    assert torch.allclose(torch.tensor(forced.forced_logprobs), ref2, atol=1e-4)
    # 4. the batched generate path (nothing kept to continue) answers the same
    pol.backend.clear_cache()
    batched = pol.backend.generate([row])[0]
    assert batched.ids == decoded.ids and batched.cached_tokens == 0
    assert torch.allclose(torch.tensor(batched.logprobs), torch.tensor(decoded.logprobs), atol=1e-4)


def test_a_kept_cache_stays_right_after_another_prompts_prefill(tiny_qwen25vl_path, requests):
    """Prefill prompt A (kept), then a prefill of prompt B with another image (which overwrites the
    model's rope deltas), then continue A from its cache: the continuation equals A's uncached answer."""
    pol = _policy(tiny_qwen25vl_path)
    a, b = (pol.builder.render(r) for r in requests[:2])
    row_a, row_b = pol.request(a), pol.request(b)
    pol.backend.generate([dataclasses.replace(row_a, max_new_tokens=0, hidden_layer=-1)])
    pol.backend.generate([dataclasses.replace(row_b, max_new_tokens=0, hidden_layer=-1)])
    again = pol.backend.generate([row_a])[0]
    assert again.cached_tokens == len(row_a.prompt_ids) - 1
    assert again.ids == _uncached_greedy(pol, a, 6)


def test_the_element_pointer_keys_are_restored_with_the_cache():
    """A pointer checkpoint: the LM head's element scores depend on the prompt's element list, which
    a later prefill replaces; continuing the first prompt's cache must score against its own list."""
    from webrl.policy.types import Observation, PolicyRequest

    from webrl.models.shipped import resolve_shipped

    pol = _policy(resolve_shipped("webrl:tiny-webagent-pointer"), action_format="pointer", prompt_version="brief", max_pixels=12544)
    reqs = [PolicyRequest(Observation(goal=f"click {name}", elements_text=f'<e1> button "{name}"\n<e2> link "x"'))
            for name in ("Go", "Stop and go")]
    a, b = (pol.builder.render(r) for r in reqs)
    row_a = pol.request(a)
    expected = pol.backend.generate([row_a])[0]  # batched, no cache
    pol.backend.generate([dataclasses.replace(row_a, max_new_tokens=0, hidden_layer=-1)])
    pol.backend.generate([dataclasses.replace(pol.request(b), max_new_tokens=0, hidden_layer=-1)])
    again = pol.backend.generate([row_a])[0]
    assert again.cached_tokens == len(row_a.prompt_ids) - 1 and again.ids == expected.ids
    assert torch.allclose(torch.tensor(again.logprobs), torch.tensor(expected.logprobs), atol=1e-4)


def test_decoding_never_picks_suppressed_ids_and_reports_raw_logprobs(tiny_qwen25vl_path, requests):
    pol = _policy(tiny_qwen25vl_path)
    prompt = pol.builder.render(requests[0])
    row = dataclasses.replace(pol.request(prompt), hidden_layer=-1, max_new_tokens=4)  # the row path
    free = pol.backend.generate([row])[0].ids
    backend = pol.backend
    banned = [free[0], *backend.suppress_ids]  # forbid what greedy would pick first, plus the vision tokens
    backend.suppress_ids = banned
    try:
        got = backend.generate([row])[0]
    finally:
        backend.suppress_ids = banned[1:]
    assert not set(got.ids) & set(banned)
    raw = _uncached_logits(pol, prompt, [])[0][-1]
    allowed = raw.clone()
    allowed[banned] = float("-inf")
    assert got.ids[0] == int(allowed.argmax())
    assert got.logprobs[0] == pytest.approx(float(torch.log_softmax(raw, -1)[got.ids[0]]), abs=1e-5)


def test_a_reuse_never_stops_inside_an_image_and_weight_loads_drop_the_cache(tiny_qwen25vl_path, requests):
    pol = _policy(tiny_qwen25vl_path)
    prompt = pol.builder.render(requests[0])
    row = pol.request(prompt)
    pol.backend.generate([dataclasses.replace(row, max_new_tokens=0, hidden_layer=-1)])
    other_image = dataclasses.replace(requests[0].observation, screenshot=pol.builder.render(requests[1]).images[-1])
    other = pol.builder.render(dataclasses.replace(requests[0], observation=other_image))
    # same ids up to the image, another picture: the pads are keyed by the image's bytes, so no reuse
    miss = pol.backend.generate([dataclasses.replace(pol.request(other), hidden_layer=-1)])[0]  # the row path
    assert miss.cached_tokens == 0
    pol.backend.generate([dataclasses.replace(row, max_new_tokens=0, hidden_layer=-1)])
    pol.backend.load_state({})  # any weight load clears the kept caches
    assert pol.backend.generate([dataclasses.replace(row, hidden_layer=-1)])[0].cached_tokens == 0


def test_prefix_helpers_and_the_capability_table():
    assert reusable_prefix([1, 2, 3, 4], [1, 2, 5, 4]) == 2 and reusable_prefix([1, 2], [1, 2, 3]) == 2
    from webrl.types import Image

    a, b = Image(b"a"), Image(b"b")
    assert reusable_prefix(image_keyed([5, 9, 9, 6], [a], 9), image_keyed([5, 9, 9, 6], [b], 9)) == 1
    table = capability_table()
    assert set(ENGINE_CAPABILITIES) == {"transformers", "server", "vllm"}
    assert "hidden_layers" in table and "rollout.engine=server" in table and "final" in table
    assert "rollout.server.protocol=vllm" in table and "in-process copy" in table


def test_a_seeded_row_samples_the_same_tokens_alone_beside_other_rows_and_on_the_row_path(tiny_qwen25vl_path,
                                                                                            requests):
    """A seed is the row's own: the same tokens and log-probs alone, in a batch beside other seeded
    and unseeded rows (in another position), and on the one-row path (forced by asking for
    hidden states); another seed draws other tokens."""
    pol = policy(tiny_qwen25vl_path, sampling=SamplingConfig(temperature=1.0, max_new_tokens=8),
                 **{"action_format": "som", "think": False, **PIXELS})
    a, b, c = (pol.request(pol.builder.render(r)) for r in requests)
    a = dataclasses.replace(a, seed=11)
    alone = pol.backend.generate([a])[0]
    beside = pol.backend.generate([dataclasses.replace(b, seed=12), a, c])[1]
    row_path = pol.backend.generate([dataclasses.replace(a, hidden_layer=-1)])[0]
    assert row_path.hidden is not None and row_path.cached_tokens == 0
    for other in (beside, row_path):
        assert other.ids == alone.ids and len(alone.ids) == 8
        assert torch.allclose(torch.tensor(other.logprobs), torch.tensor(alone.logprobs), atol=1e-4)
    pol.backend.clear_cache()
    draws = {tuple(pol.backend.generate([dataclasses.replace(a, seed=s)])[0].ids) for s in range(4)}
    assert len(draws) > 1

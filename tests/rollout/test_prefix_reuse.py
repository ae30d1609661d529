"""Prefix reuse across turns: the longest-common-prefix measure (by hand, images keyed by their
bytes), its exactness (a KV cache of the reusable prefix continued on the rest of the next prompt
gives the same next-token logits as the full prompt recomputed, as a radix cache would), and
`meta_info.cached_tokens` read into `DecisionStats` (checked field)."""
import pytest
import torch

from webrl.policy.backend import image_keyed, reusable_prefix
from webrl.engines.sglang import ServerEngine, ServerEngineError
from webrl.types import Image


def test_reusable_prefix_by_hand():
    assert reusable_prefix([1, 2, 3, 4], [1, 2, 5, 4]) == 2  # stops at the first difference
    assert reusable_prefix([1, 2, 3], [1, 2, 3, 9, 9]) == 3  # the whole cached sequence
    assert reusable_prefix([1, 2, 3, 9, 9], [1, 2, 3]) == 3  # at most the whole prompt
    assert reusable_prefix([], [1]) == 0 and reusable_prefix([7], [1]) == 0


def test_image_pads_match_only_the_same_image():
    a, b = Image(b"png-a", "png"), Image(b"png-b", "png")
    pad = 99
    ids = [5, pad, pad, 6, pad, pad, 7]  # two images of 2 pads each
    # same two images: all 7 tokens reusable
    assert reusable_prefix(image_keyed(ids, [a, b], pad), image_keyed(ids, [a, b], pad)) == 7
    # the second image differs (same size, so the same pad ids): reuse stops at its first pad
    assert reusable_prefix(image_keyed(ids, [a, a], pad), image_keyed(ids, [a, b], pad)) == 4
    assert reusable_prefix(ids, ids) == 7  # plain ids could not tell the images apart


def text_episode(processor, n):
    """Prompt ids of turns 0..n of a text-only episode and the recorded response ids of each."""
    from tests.policy.helpers import episode, observation
    from webrl.policy import GeneratorConfig, GeneratorPolicy, PolicyRequest

    prompts = GeneratorPolicy(None, processor, GeneratorConfig(), "qwen2.5-vl")
    turns, _ = episode(n, prompts.builder.format)
    turns = [t.__class__(**{**t.__dict__, "images": []}) for t in turns]
    end = prompts.tokenizer.get_vocab()["<|im_end|>"]
    out = []
    for t in range(n + 1):
        obs = observation(t, screenshot=None)
        ids = prompts.prompt_ids(prompts.builder.render(PolicyRequest(obs, turns[:t])))
        response = (prompts.tokenizer(turns[t].response_text, add_special_tokens=False)["input_ids"] + [end]
                    if t < n else [])
        out.append((ids, response))
    return out


@pytest.fixture(scope="module")
def tiny(tiny_qwen25vl_path):
    from webrl.models import load_model

    return load_model(tiny_qwen25vl_path)


def test_reusable_prefix_is_exact_for_a_kv_cache(tiny):
    """Turn 2's prompt from a cache of turn 1's prompt + response cut to the reusable prefix gives
    the next-token logits of turn 2's prompt computed from scratch (cached vs uncached)."""
    model, processor = tiny
    (p1, r1), (p2, _) = text_episode(processor, 2)[1:]
    reuse = reusable_prefix(p1 + r1, p2)
    assert 0 < reuse < len(p2) and (p1 + r1)[reuse] != p2[reuse]  # a real prefix, and not one token more
    with torch.no_grad():
        full = model(input_ids=torch.tensor([p2])).logits[0, -1]  # (V,)
        cache = model(input_ids=torch.tensor([p1 + r1]), use_cache=True).past_key_values
        cache.crop(reuse - len(p1 + r1))  # drop all but the reusable prefix (what a prefix cache keeps)
        rest = torch.tensor([p2[reuse:]])  # (1, P - R)
        positions = torch.arange(reuse, len(p2)).view(1, 1, -1).expand(3, 1, -1)  # text-only M-RoPE
        cached = model(input_ids=rest, cache=cache, position_ids=positions,
                       attention_mask=torch.ones(1, len(p2), dtype=torch.long)).logits[0, -1]
    assert torch.allclose(cached, full, atol=1e-4, rtol=0), (cached - full).abs().max()


def test_cached_tokens_are_read_and_checked(tiny):
    from webrl.policy.backend import GenerateRequest

    _, processor = tiny
    engine = ServerEngine(["http://127.0.0.1:9"], processor)
    word = processor.tokenizer("click", add_special_tokens=False)["input_ids"][0]
    row = GenerateRequest(list(range(10)), max_new_tokens=4)
    answer = {"meta_info": {"output_token_logprobs": [[-0.1, word, None]], "prompt_tokens": 10, "cached_tokens": 4}}
    got = engine.backend.read("http://s", answer, row)
    assert (got.ids, got.logprobs, got.cached_tokens) == ([word], [-0.1], 4)
    del answer["meta_info"]["cached_tokens"]  # a server without a prefix cache: 0
    assert engine.backend.read("http://s", answer, row).cached_tokens == 0
    for bad in (11, -1, "4", True):
        answer["meta_info"]["cached_tokens"] = bad
        with pytest.raises(ServerEngineError, match=r"http://s/generate: meta_info.cached_tokens must be an integer "
                                                    r"in \[0, 10\]"):
            engine.backend.read("http://s", answer, row)
    engine.close()

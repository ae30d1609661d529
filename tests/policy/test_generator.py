"""GeneratorPolicy: token-in/token-out, log-probs equal to the learner's recomputation, batching."""
import pytest
import torch

from tests.policy.helpers import episode, observation, policy
from webrl.policy import PolicyRequest, SamplingConfig
from webrl.policy.backend import cut_at_stop

FAMILIES = ["qwen2.5-vl", "qwen3-vl"]


def requests(fmt):
    """Three requests with different screenshot sizes and history lengths (so padding differs)."""
    turns, _ = episode(3, fmt)
    return [PolicyRequest(observation(0, size=(320, 200))),
            PolicyRequest(observation(3, size=(200, 320)), turns),
            PolicyRequest(observation(1, size=(640, 360)), turns[:1])]


def learner_logprobs(pol, request, decision, temperature):
    """A plain forward pass over prompt + response, as the learner computes it: (log-probs, ranks)."""
    enc = pol.encode([pol.builder.render(request)])
    assert enc["input_ids"][0].tolist() == decision.prompt_ids  # nothing re-tokenised differently
    P, R = len(decision.prompt_ids), len(decision.response_ids)
    ids = torch.tensor([decision.prompt_ids + decision.response_ids])  # (1, P + R)
    extra = {"mm_token_type_ids": torch.cat([enc["mm_token_type_ids"], torch.zeros(1, R, dtype=torch.long)], 1)} \
        if "mm_token_type_ids" in enc else {}
    with torch.no_grad():
        logits = pol.model(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=enc["pixel_values"],
                           image_grid_thw=enc["image_grid_thw"], **extra).logits  # (1, P + R, V)
    logp = torch.log_softmax(logits[0, P - 1:P + R - 1].float() / temperature, -1)  # (R, V)
    chosen = logp.gather(-1, ids[0, P:, None])  # (R, 1)
    ranks = (logp > chosen).sum(-1)  # (R,) rank of each sampled token (0 = argmax)
    return chosen.squeeze(-1), ranks


@pytest.mark.parametrize("family", FAMILIES)
def test_act_logprobs_match_learner_recomputation(family, tiny_model_paths):
    T = 0.7
    pol = policy(tiny_model_paths[family], sampling=SamplingConfig(temperature=T, max_new_tokens=10))
    reqs = requests(pol.builder.format)
    torch.manual_seed(0)
    decisions = pol.act(reqs)
    ranks = []
    for req, d in zip(reqs, decisions):
        assert len(d.response_ids) == len(d.logprobs) >= 1
        assert d.stats.prompt_tokens == len(d.prompt_ids) and d.stats.response_tokens == len(d.response_ids)
        recomputed, token_ranks = learner_logprobs(pol, req, d, T)
        assert torch.allclose(torch.tensor(d.logprobs), recomputed, atol=1e-4, rtol=0), \
            (d.logprobs, recomputed.tolist())
        ranks += token_ranks.tolist()
        assert d.response_text == pol.tokenizer.decode(d.response_ids).removesuffix("<|im_end|>").removesuffix(
            "<|endoftext|>")
    # top-k is off: the random model is near uniform over ~900 tokens, so among ~30 samples some
    # lie outside the 50 most likely (transformers' default top-k of 50 would forbid that).
    assert max(ranks) >= 50, ranks


@pytest.mark.parametrize("family", FAMILIES)
def test_batched_greedy_equals_one_by_one(family, tiny_model_paths):
    pol = policy(tiny_model_paths[family], sampling=SamplingConfig(greedy=True, max_new_tokens=12))
    reqs = requests(pol.builder.format)
    batched = pol.act(reqs)
    single = [pol.act([r])[0] for r in reqs]
    for b, s in zip(batched, single):
        assert b.prompt_ids == s.prompt_ids
        assert b.response_ids == s.response_ids
        assert torch.allclose(torch.tensor(b.logprobs), torch.tensor(s.logprobs), atol=1e-4)
    # greedy is deterministic
    assert [d.response_ids for d in pol.act(reqs)] == [d.response_ids for d in batched]


def test_response_is_cut_after_the_first_stop_token(tiny_qwen25vl_path):
    pol = policy(tiny_qwen25vl_path)
    vocab = pol.tokenizer.get_vocab()
    end, im_end, pad = vocab["</tool_call>"], vocab["<|im_end|>"], vocab["<|endoftext|>"]
    assert cut_at_stop([5, 6, end, pad, pad], pol.stop_ids) == ([5, 6, end], "stop")
    assert cut_at_stop([5, im_end, 7], pol.stop_ids) == ([5, im_end], "stop")
    assert cut_at_stop([5, 6, 7], pol.stop_ids) == ([5, 6, 7], "length")
    no_tool_stop = policy(tiny_qwen25vl_path, sampling=SamplingConfig(stop_at_tool_call=False))
    assert cut_at_stop([5, end, 7], no_tool_stop.stop_ids) == ([5, end, 7], "length")

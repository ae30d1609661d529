"""`SampledLogprobs`: sampled tokens' log-probs taken during generate, equal to the full-logits way."""
import math

import pytest
import torch

from webrl.policy.sampled_logprobs import LogitsProcessorList, SampledLogprobs


def test_log_probs_by_hand_one_step_behind_and_suppression_after_them():
    """V = 3, T = 2. Step 0 scores (0, 0, ln 4): log softmax(s / 2) = log (1, 1, 2) / 4;
    token 2 is sampled -> log 0.5. Step 1 scores (0, 0, 0): log 1/3 for token 0."""
    rec = SampledLogprobs(temperature=2.0, suppress_ids=[1])
    out = rec(torch.tensor([[7]]), torch.tensor([[0.0, 0.0, math.log(4.0)]]))
    assert out[0, 1] == -math.inf and out[0, 0] == 0.0  # suppressed for sampling only
    rec(torch.tensor([[7, 2]]), torch.tensor([[0.0, 0.0, 0.0]]))
    logp = rec.finish(torch.tensor([[7, 2, 0]]))
    torch.testing.assert_close(logp, torch.tensor([[math.log(0.5), math.log(1 / 3)]]))
    assert SampledLogprobs(1.0).finish(torch.tensor([[1, 2]])).shape == (1, 0)


@pytest.mark.parametrize("sample", [True, False])
def test_generate_gives_the_same_tokens_and_log_probs_as_full_logits(tiny_qwen25vl_path, sample):
    """The old path (suppress_tokens + output_logits, log softmax of the stacked raw logits) and
    the processor, from the same seed: identical tokens, log-probs equal to float rounding."""
    from webrl.models import load_model

    model, processor = load_model(tiny_qwen25vl_path)
    ids = torch.randint(5, 200, (3, 9), generator=torch.Generator().manual_seed(0))
    suppress = [processor.tokenizer.get_vocab()["<|image_pad|>"]]
    common = dict(max_new_tokens=12, do_sample=sample, top_k=None if not sample else 0, repetition_penalty=1.0,
                  return_dict_in_generate=True, pad_token_id=0, eos_token_id=[1])
    if sample:
        common.update(temperature=0.7, top_p=0.9)
    else:
        common.update(temperature=None, top_p=None)
    T = 0.7 if sample else 1.0
    torch.manual_seed(3)
    old = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), output_logits=True,
                         suppress_tokens=suppress, **common)
    new_tokens = old.sequences[:, 9:]
    want = torch.log_softmax(torch.stack(old.logits, 1).float() / T, -1).gather(-1, new_tokens[..., None])[..., 0]
    torch.manual_seed(3)
    rec = SampledLogprobs(T, suppress)
    new = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), logits_processor=LogitsProcessorList([rec]),
                         **common)
    assert torch.equal(new.sequences, old.sequences)
    torch.testing.assert_close(rec.finish(new.sequences), want, atol=1e-6, rtol=0)
    assert not hasattr(new, "logits") or new.logits is None

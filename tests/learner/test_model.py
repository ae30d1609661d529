"""PolicyModule without DeepSpeed: values position, and the ZeRO-3 dummy vision pass."""
import pytest
import torch

from tests.learner.helpers import make_samples
from webrl.learner.model import PolicyModule, last_prompt_index
from webrl.learner.samples import collate
from webrl.models import load_model


def test_last_prompt_index_by_hand():
    mask = torch.tensor([[0, 0, 0, 1, 1], [0, 1, 1, 1, 0], [0, 0, 0, 0, 0]])
    assert last_prompt_index(mask).tolist() == [2, 0, 0]  # first response at 3 and 1; no response -> 0


@pytest.mark.parametrize("family", ["qwen2.5-vl", "qwen3-vl"])
def test_dummy_vision_pass_changes_nothing_but_touches_the_tower(family, tiny_model_paths):
    """Under ZeRO-3 a text-only micro-batch still runs the vision tower (so every rank gathers the
    same parameters); its output enters as 0 x ..., so log-probs are unchanged and the tower's
    gradients exist and are zero."""
    model, processor = load_model(tiny_model_paths[family])
    batch, _ = collate(make_samples(processor, 2, images=False), pad_id=0)
    args = (batch.input_ids, batch.attention_mask, batch.loss_mask)
    plain, _, _ = PolicyModule(model)(*args)
    module = PolicyModule(model, value_head=True, always_run_vision=True)
    logprobs, entropy, values = module(*args)
    assert torch.equal(logprobs, plain)
    assert values.shape == (2,) and torch.equal(values, torch.zeros(2))  # zero-initialised head
    (logprobs.sum() + values.sum()).backward()
    grads = [p.grad for p in module.visual.parameters()]
    assert all(g is not None for g in grads) and all(torch.count_nonzero(g) == 0 for g in grads)

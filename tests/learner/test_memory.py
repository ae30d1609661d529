"""What keeps the learner's memory down: gradient checkpointing (the same update, recomputed
activations) and weights loaded directly in the training dtype."""
import pytest
import torch

from tests.learner.helpers import learner_config, learner_run, make_samples, with_rollout_logprobs
from webrl.learner import LearnerGroup
from webrl.learner.config import BatchingConfig
from webrl.models import load_model

pytestmark = pytest.mark.slow


def one_update(path, samples, **overrides):
    group = LearnerGroup(learner_config(batching=BatchingConfig(token_budget=400), **overrides), learner_run(path), 1,
                         use_ray=False)
    try:
        batch = with_rollout_logprobs(samples, group.compute_logprobs(samples).logprobs)
        model = group.ranks.workers[0].module.model
        calls, mlp = [], model.model.language_model.layers[0].mlp
        forward = mlp.forward  # counted by wrapping forward: torch runs the recompute without module hooks
        mlp.forward = lambda *args, **kwargs: (calls.append(1), forward(*args, **kwargs))[1]
        metrics = group.update(batch)
        del mlp.forward
        metrics["mlp0_calls"] = len(calls)
        return metrics, group.full_state_dict(), model
    finally:
        group.shutdown()


@pytest.mark.parametrize("family", ["qwen25vl", "qwen3vl"])
def test_gradient_checkpointing_gives_the_same_update(family, request):
    path = request.getfixturevalue(f"tiny_{family}_path")
    _, processor = load_model(path)
    samples = make_samples(processor, 4)
    plain, plain_state, plain_model = one_update(path, samples)
    ckpt, ckpt_state, ckpt_model = one_update(path, samples, gradient_checkpointing=True)
    checkpointing = lambda m: any(getattr(x, "gradient_checkpointing", False) for x in m.modules())  # noqa: E731
    assert checkpointing(ckpt_model) and not checkpointing(plain_model)
    # recomputed in backward: the first decoder layer's MLP runs twice per micro-batch instead of once
    assert ckpt["mlp0_calls"] == 2 * plain["mlp0_calls"] and plain["mlp0_calls"] >= 1
    assert ckpt["loss"] == pytest.approx(plain["loss"], abs=1e-6)
    assert ckpt["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-5) and plain["grad_norm"] > 0
    for name, tensor in plain_state.items():
        torch.testing.assert_close(ckpt_state[name], tensor, atol=2e-6, rtol=0, msg=name)


def test_a_bfloat16_learner_loads_its_weights_in_bfloat16_and_trains(tiny_qwen25vl_path):
    _, processor = load_model(tiny_qwen25vl_path)
    metrics, state, model = one_update(tiny_qwen25vl_path, make_samples(processor, 2), dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
    assert all(t.dtype == torch.bfloat16 for t in state.values() if t.is_floating_point())
    assert torch.isfinite(torch.tensor(metrics["loss"])) and metrics["grad_norm"] > 0

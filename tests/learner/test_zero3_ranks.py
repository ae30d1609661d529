"""ZeRO-3 on 2 ranks (spawned processes, gloo) when the ranks get different work in a step.

The batch: 6 image turns with a token budget that fits all of them into one micro-batch, so
`plan_update` gives rank 0 the real micro-batch and rank 1 a masked filler pass. Both run one
forward / backward per step (equal counts), but before `worker.touch_all_outputs` the filler's
loss reached only the log-probs while GRPO's also reaches the entropy (entropy_coef 0 still puts
it in the graph): one backward hook call fewer on rank 1, so ZeRO-3's module trace of rank 1
differed from rank 0's and the third update hung in a broadcast only one rank joined (found
with py-spy on `benchmarks/learner_step.py`, 2 ranks x ZeRO 3). The timeout turns a regression
into a failure instead of a hang.
"""
import pytest
import torch

from tests.learner.helpers import learner_config, make_samples, with_rollout_logprobs
from webrl.learner import LearnerGroup
from webrl.learner.batching import plan_update
from webrl.learner.config import BatchingConfig
from webrl.models import load_model

pytestmark = pytest.mark.slow
UPDATES = 3  # log-probs pass, then: trace recorded, invalidated (both ranks), re-recorded -> hang
BATCHING = BatchingConfig(token_budget=4096, max_samples_per_micro_batch=64)
#: 2 ranks (one only a filler) vs 1 rank: the same gradients up to summation order (see
#: test_group_ray.ATOL and helpers.learner_config for why this tolerance means something)
ATOL = 2e-6


def train(group, samples):
    """compute_logprobs, then UPDATES updates; (losses, full state dict after the last one)."""
    samples = with_rollout_logprobs(samples, group.compute_logprobs(samples).logprobs)
    losses = [group.update(samples)["loss"] for _ in range(UPDATES)]
    return losses, group.full_state_dict()


@pytest.mark.timeout(420)
def test_zero3_rank_with_only_a_filler_pass_trains_like_one_rank(tiny_qwen25vl_path):
    _, processor = load_model(tiny_qwen25vl_path)
    samples = make_samples(processor, 6)
    plans = plan_update([s.length for s in samples], 2, BATCHING.token_budget, BATCHING.max_samples_per_micro_batch)
    assert plans[0] == [sorted(range(6), key=lambda i: (-samples[i].length, i))] and plans[1] == [[]]

    zero3 = learner_config(tiny_qwen25vl_path, zero_stage=3, batching=BATCHING,
                           deepspeed_overrides={"zero_optimization": {"stage3_param_persistence_threshold": 0}})
    group = LearnerGroup(zero3, 2, use_ray=False)
    try:
        losses, state = train(group, samples)
    finally:
        group.shutdown()
    reference = LearnerGroup(learner_config(tiny_qwen25vl_path, zero_stage=1, batching=BATCHING), 1, use_ray=False)
    try:
        ref_losses, ref_state = train(reference, samples)
    finally:
        reference.shutdown()

    assert ref_losses[-1] < ref_losses[0], ref_losses
    assert losses == pytest.approx(ref_losses, abs=1e-5)
    assert state.keys() == ref_state.keys()
    for name in state:
        torch.testing.assert_close(state[name], ref_state[name], atol=ATOL, rtol=0, msg=name)

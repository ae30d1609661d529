"""ZeRO-3 on 2 ranks (spawned processes, gloo) when the ranks get different work in a step.

ZeRO-3 gathers parameters per module call, so every rank must call the same modules in the same
order, forward and backward, in every pass. Two batches broke that before their fixes:

A. 6 image turns with a token budget that fits all of them into one micro-batch, so
   `plan_update` gives rank 0 the real micro-batch and rank 1 a masked filler pass. Before
   `worker.touch_all_outputs` the filler's loss reached only the log-probs while GRPO's also
   reaches the entropy (entropy_coef 0 still puts it in the graph): one backward hook call fewer
   on rank 1, so its recorded module trace differed and the third update hung in a broadcast
   only rank 0 joined (found with py-spy on `benchmarks/learner_step.py`, 2 ranks x ZeRO 3).
B. One image turn and two text-only turns, each its own micro-batch: rank 0's first pass has the
   image, rank 1's is text-only. The dummy vision pass of a text-only micro-batch ran before the
   backbone, the real one after the token embedding, so the ranks all-gathered different
   parameters and gloo aborted on a size mismatch in the first log-prob pass (NCCL would hang).

The timeout turns a regression into a failure instead of a hang.
"""
import pytest
import torch

from tests.learner.helpers import learner_config, learner_run, make_samples, with_rollout_logprobs
from webrl.learner import LearnerGroup
from webrl.learner.batching import plan_update
from webrl.learner.config import BatchingConfig
from webrl.models import load_model

pytestmark = pytest.mark.slow
UPDATES = 3  # log-probs pass, then: trace recorded, invalidated (both ranks), re-recorded -> hang
BATCHING = BatchingConfig(token_budget=4096, max_samples_per_micro_batch=64)  # batch A: one micro-batch
MIXED_BATCHING = BatchingConfig(token_budget=60, max_samples_per_micro_batch=64)  # batch B: one sample each
#: 2 ranks (one only a filler) vs 1 rank: the same gradients up to summation order (see
#: test_group_ray.ATOL and helpers.learner_config for why this tolerance means something)
ATOL = 2e-6


def train(group, samples, mixed):
    """Batch A (`samples`): compute_logprobs, then UPDATES updates; then batch B (`mixed`, its own
    token budget): compute_logprobs and 2 updates. (losses, full state dict at the end)."""
    samples = with_rollout_logprobs(samples, group.compute_logprobs(samples).logprobs)
    losses = [group.update(samples)["loss"] for _ in range(UPDATES)]
    group.config.batching = MIXED_BATCHING  # the controller plans; the ranks never read it
    mixed = with_rollout_logprobs(mixed, group.compute_logprobs(mixed).logprobs)
    losses += [group.update(mixed)["loss"] for _ in range(2)]
    return losses, group.full_state_dict()


@pytest.mark.timeout(480)
def test_zero3_ranks_with_filler_or_text_only_passes_train_like_one_rank(tiny_qwen25vl_path):
    _, processor = load_model(tiny_qwen25vl_path)
    samples = make_samples(processor, 6)
    plans = plan_update([s.length for s in samples], 2, BATCHING.token_budget, BATCHING.max_samples_per_micro_batch)
    assert plans[0] == [sorted(range(6), key=lambda i: (-samples[i].length, i))] and plans[1] == [[]]
    mixed = make_samples(processor, 1) + make_samples(processor, 2, images=False, seed=3)
    lengths = [s.length for s in mixed]
    assert lengths[0] > MIXED_BATCHING.token_budget and max(lengths[1:]) * 2 > MIXED_BATCHING.token_budget
    # the image turn is the longest: rank 0 runs it, rank 1 the two text-only turns (the filler
    # after rank 0's image pass is the shortest sample, text-only too)
    assert plan_update(lengths, 2, MIXED_BATCHING.token_budget, 64)[0][0] == [0]

    run = learner_run(tiny_qwen25vl_path)
    zero3 = learner_config(zero_stage=3, batching=BATCHING,
                           deepspeed_overrides={"zero_optimization": {"stage3_param_persistence_threshold": 0}})
    group = LearnerGroup(zero3, run, 2, use_ray=False)
    try:
        losses, state = train(group, samples, mixed)
    finally:
        group.shutdown()
    reference = LearnerGroup(learner_config(zero_stage=1, batching=BATCHING), run, 1, use_ray=False)
    try:
        ref_losses, ref_state = train(reference, samples, mixed)
    finally:
        reference.shutdown()

    assert ref_losses[UPDATES - 1] < ref_losses[0], ref_losses
    assert losses == pytest.approx(ref_losses, abs=1e-5)
    assert state.keys() == ref_state.keys()
    for name in state:
        torch.testing.assert_close(state[name], ref_state[name], atol=ATOL, rtol=0, msg=name)


@pytest.mark.timeout(480)
def test_a_kl_reference_partitioned_over_two_zero3_ranks_gives_the_one_rank_update(tiny_qwen25vl_path):
    """KL in the loss (reference="copy"): under ZeRO-3 the frozen reference is a DeepSpeed engine
    partitioned over the ranks like the policy (not a full copy per rank). Its log-probs, the KL
    term and the trained weights after 2 updates equal one ZeRO-1 rank's, whose reference is a plain
    module; the KL is non-zero after the first step, so the reference really enters the loss."""
    from webrl.algos.losses import PolicyLossConfig

    _, processor = load_model(tiny_qwen25vl_path)
    samples = make_samples(processor, 3, images=False, seed=4)
    run = learner_run(tiny_qwen25vl_path)
    loss = PolicyLossConfig(kl_coef=0.5, kl_mode="loss", kl_estimator="k3")
    results = []
    for ranks, stage in ((2, 3), (1, 1)):
        overrides = {"zero_optimization": {"stage3_param_persistence_threshold": 0}} if stage == 3 else {}
        group = LearnerGroup(learner_config(zero_stage=stage, reference="copy", loss=loss,
                                            deepspeed_overrides=overrides), run, ranks, use_ray=False)
        try:
            reference = group.compute_logprobs(samples, reference=True).logprobs
            batch = with_rollout_logprobs(samples, group.compute_logprobs(samples).logprobs)
            metrics = [group.update(batch) for _ in range(2)]
            results.append((reference, metrics, group.full_state_dict()))
        finally:
            group.shutdown()
    (ref3, zero3, state3), (ref1, zero1, state1) = results
    for got, want in zip(ref3, ref1):
        torch.testing.assert_close(torch.as_tensor(got), torch.as_tensor(want), atol=1e-5, rtol=0)
    assert [m["kl"] for m in zero3] == pytest.approx([m["kl"] for m in zero1], abs=1e-6)
    assert zero1[1]["kl"] > 1e-6
    for name in state1:
        torch.testing.assert_close(state3[name], state1[name], atol=ATOL, rtol=0, msg=name)

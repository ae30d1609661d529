"""LearnerGroup on Ray with gloo: 2 ranks vs 1 rank (ZeRO 1 and 3), exact resume after a kill
(inside a placement group handed in from outside, as in a Tune trial), object-store weight sync
into a plain Hugging Face model. Every run trains GRPO on one fixed batch of 6 image turns whose
rollout log-probs are the initial policy's (so the first ratio is exactly 1)."""

import pytest
import torch

from tests.learner.helpers import learner_config, learner_run, make_samples, with_rollout_logprobs
from webrl.learner import LearnerGroup, apply_weight_update
from webrl.models import load_model

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]
STEPS = 3
#: 2 ranks vs 1: same gradients up to float summation order (all-reduce, micro-batch split);
#: with the tests' Adam eps (see helpers.learner_config) 3 steps keep parameters within this.
ATOL = 2e-6


def run(group, samples, steps, save_at=None, path=None):
    """`steps` updates; returns (losses, full state dict after each update)."""
    losses, states = [], []
    for k in range(1, steps + 1):
        losses.append(group.update(samples)["loss"])
        states.append(group.full_state_dict())
        if k == save_at:
            group.save(path, {"data_cursor": k * 6})
    return losses, states


@pytest.fixture(scope="module")
def one_rank(tiny_qwen25vl_path):
    """The reference: one rank, ZeRO 1, in this process (the same LearnerWorker code as an actor,
    one actor start cheaper). Also fixes the batch (rollout log-probs = its initial ones)."""
    _, processor = load_model(tiny_qwen25vl_path)
    group = LearnerGroup(learner_config(zero_stage=1), learner_run(tiny_qwen25vl_path), 1, use_ray=False)
    try:
        samples = make_samples(processor, 6)
        samples = with_rollout_logprobs(samples, group.compute_logprobs(samples).logprobs)
        losses, states = run(group, samples, STEPS)
    finally:
        group.shutdown()
    return samples, losses, states


@pytest.fixture(scope="module")
def zero1_two_ranks(ray_cluster, one_rank, tiny_qwen25vl_path, tmp_path_factory):
    samples = one_rank[0]
    path = str(tmp_path_factory.mktemp("resume") / "step-00000002")
    group = LearnerGroup(learner_config(zero_stage=1), learner_run(tiny_qwen25vl_path), 2)
    try:
        losses, states = run(group, samples, STEPS, save_at=2, path=path)
    finally:
        group.shutdown()  # kills the actors (ray.kill): nothing is flushed on the way out
    return losses, states, path


def assert_states_close(a, b, atol):
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=atol, rtol=0, msg=name)


def test_zero1_two_ranks_match_one_rank_and_loss_falls(one_rank, zero1_two_ranks):
    _, ref_losses, ref_states = one_rank
    losses, states, _ = zero1_two_ranks
    assert ref_losses[-1] < ref_losses[0] and losses[-1] < losses[0], (ref_losses, losses)
    assert losses == pytest.approx(ref_losses, abs=1e-5)
    for ref, mine in zip(ref_states, states):
        assert_states_close(ref, mine, ATOL)


def test_resume_after_kill_gives_the_uninterrupted_step_exactly(ray_cluster, one_rank, zero1_two_ranks,
                                                                tiny_qwen25vl_path):
    """Resumed in a 3-bundle placement group handed in from outside (bundle 0 is the trial's own,
    the learner takes bundles 1 and 2): the ranks run in that group, which outlives the learner."""
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    samples = one_rank[0]
    _, states, path = zero1_two_ranks
    config, derived = learner_config(zero_stage=1), learner_run(tiny_qwen25vl_path)
    pg = placement_group([{"CPU": 1}] * 3, strategy="PACK")
    ray.get(pg.ready())
    try:
        with pytest.raises(ValueError, match="bundle_offset 2 with 2 learner ranks"):
            LearnerGroup(config, derived, 2, placement_group=pg, bundle_offset=2)  # bundles 2, 3: one too many
        group = LearnerGroup(config, derived, 2, placement_group=pg, bundle_offset=1)
        try:
            pg_ids = ray.get([w.__ray_call__.remote(lambda self: ray.get_runtime_context().get_placement_group_id())
                              for w in group.ranks.workers])
            assert pg_ids == [pg.id.hex()] * 2
            assert wait_for_bundles_used(pg, free={0: 1.0}, used=(1, 2))
            client_state = group.load(path)
            assert client_state == {"data_cursor": 12} and group.policy_version == 2
            group.update(samples)  # step k + 1 = 3
            resumed = group.full_state_dict()
        finally:
            group.shutdown()
        assert placement_group_table(pg)["state"] == "CREATED"  # not the learner's to remove
    finally:
        remove_placement_group(pg)
    for name, tensor in states[2].items():
        assert torch.equal(tensor, resumed[name]), name


def test_zero3_two_ranks_match_one_rank_and_weights_gather(ray_cluster, one_rank, tiny_qwen25vl_path):
    samples, ref_losses, ref_states = one_rank
    config = learner_config(zero_stage=3,
                            deepspeed_overrides={"zero_optimization": {"stage3_param_persistence_threshold": 0}})
    group = LearnerGroup(config, learner_run(tiny_qwen25vl_path), 2)
    try:
        losses, states = run(group, samples, STEPS)
        update = ray.get(group.get_weights_ref())
    finally:
        group.shutdown()
    assert losses[-1] < losses[0], losses
    assert losses == pytest.approx(ref_losses, abs=1e-5)
    for ref, mine in zip(ref_states, states):
        assert_states_close(ref, mine, ATOL)
    # the object-store update holds full (gathered) tensors of every trainable parameter
    assert update.version == STEPS
    assert len(update.names) == len([k for k in states[-1] if not k.endswith("inv_freq")])
    for name, tensor in update.as_dict().items():
        assert torch.equal(tensor, states[-1][name]), name
    # a plain HF model (an inference worker's) takes the update in place and then holds the
    # learner's weights exactly
    receiver, _ = load_model(tiny_qwen25vl_path)
    assert apply_weight_update(receiver, update) == len(update.names)
    received = dict(receiver.named_parameters())
    for name, tensor in update.as_dict().items():
        assert torch.equal(received[name], tensor), name


def wait_for_bundles_used(pg, free, used, timeout_s=30.0):
    """True once Ray reports bundles `used` fully taken and bundles in `free` with that many CPUs
    left (bundle resources are named CPU_group_<i>_<pg id>; a fully used one is left out of
    available_resources())."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        avail = ray.available_resources()
        if (all(avail.get(f"CPU_group_{i}_{pg.id.hex()}") == n for i, n in free.items())
                and all(avail.get(f"CPU_group_{i}_{pg.id.hex()}", 0.0) == 0 for i in used)):
            return True
        time.sleep(0.5)
    return False

"""One learner rank in this process (no Ray): log-probs, micro-batch equivalence, SFT, export,
corrupt checkpoints, weight sync into the rollout's InferenceWorker.

The module shares one SFT learner (ZeRO 0, frozen vision tower, temperature 0.7) because
building a DeepSpeed engine costs seconds; tests that change its weights restore a checkpoint.
"""
import json
import subprocess
import sys
import textwrap

import pytest
import torch

from tests.learner.helpers import learner_config, learner_run, make_samples, naive_logprobs
from webrl.learner import CheckpointError, LearnerGroup, LearnerSample
from webrl.learner.config import BatchingConfig
from webrl.models import load_model

pytestmark = pytest.mark.slow
T = 0.7


@pytest.fixture(scope="module")
def setup(tiny_qwen25vl_path, tmp_path_factory):
    _, processor = load_model(tiny_qwen25vl_path)
    config = learner_config(objective="sft", zero_stage=0, freeze_vision_tower=True,
                            batching=BatchingConfig(token_budget=10_000))
    group = LearnerGroup(config, learner_run(tiny_qwen25vl_path, temperature=T), 1, use_ray=False)
    root = tmp_path_factory.mktemp("local-ckpt")
    initial = group.save(str(root / "initial"))
    yield group, processor, make_samples(processor, 6), initial, root
    group.shutdown()


def test_logprobs_equal_full_logits_reference(setup, tiny_qwen25vl_path):
    group, processor, samples, initial, _ = setup
    group.load(initial)  # the checkpoint's weights, whichever of this module's tests ran before here
    model, _ = load_model(tiny_qwen25vl_path)
    mixed = samples[:3] + make_samples(processor, 2, images=False, seed=3)  # with and without images
    result = group.compute_logprobs(mixed)
    for sample, got in zip(mixed, result.logprobs):
        assert got.shape == (len(sample.response_ids),)
        torch.testing.assert_close(torch.from_numpy(got), naive_logprobs(model, processor, sample, T),
                                   atol=2e-5, rtol=0)


def _trainable(group):
    return {k: v for k, v in group.full_state_dict().items() if not k.startswith("model.visual")}


def test_micro_batched_update_equals_one_micro_batch(setup):
    """token_budget 10000 (one micro-batch of 6 rows) vs 80 (each sample alone: 6 micro-batches,
    gradient accumulated with the full-batch scale): the same step up to float summation order."""
    group, _, samples, initial, _ = setup
    group.load(initial)
    metrics_one = group.update(samples)
    one = _trainable(group)
    group.load(initial)
    group.config.batching = BatchingConfig(token_budget=80)
    try:
        metrics_many = group.update(samples)
    finally:
        group.config.batching = BatchingConfig(token_budget=10_000)
    many = _trainable(group)
    assert metrics_one["micro_batches"] == 1 and metrics_many["micro_batches"] == 6
    assert metrics_one["loss"] == pytest.approx(metrics_many["loss"], rel=1e-5)
    for name in one:
        torch.testing.assert_close(one[name], many[name], atol=1e-6, rtol=0, msg=name)


def test_a_second_learner_in_this_process_leaves_the_first_one_working(setup, tiny_qwen25vl_path):
    """One-rank learners in one process share torch's default process group: shutting one down
    must not destroy it under another (the module's learner here, whose update all-reduces)."""
    import torch.distributed as dist

    group, _, samples, initial, _ = setup
    other = LearnerGroup(learner_config(objective="sft", zero_stage=0), learner_run(tiny_qwen25vl_path), 1,
                         use_ray=False)
    other.shutdown()
    assert dist.is_initialized()
    group.load(initial)
    assert group.update(samples[:2])["optimizer_steps"] >= 1


def test_sft_loss_falls_and_vision_tower_stays_frozen(setup):
    group, _, samples, initial, _ = setup
    group.load(initial)
    before = group.full_state_dict()
    losses = [group.update(samples)["loss"] for _ in range(4)]
    assert losses[-1] < losses[0] - 0.1, losses  # lr 1e-3 on 6 fixed samples: NLL drops fast
    after = group.full_state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if k.startswith("model.visual"))
    assert not torch.equal(before["lm_head.weight"], after["lm_head.weight"])
    names = group.get_weights().names
    assert names and not any(n.startswith("model.visual") for n in names)


def test_export_loads_with_plain_transformers_in_fresh_process(setup, tmp_path):
    group, processor, samples, initial, root = setup
    group.load(initial)
    group.update(samples)
    path = group.save(str(root / "step-00000001"), {"cursor": 3})
    sample = samples[0]
    ids = torch.tensor([sample.prompt_ids + sample.response_ids])
    from tests.learner.helpers import SIZE

    enc = processor.image_processor(images=[im.to_pil() for im in sample.images], size=SIZE, return_tensors="pt")
    inputs = dict(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=enc["pixel_values"],
                  image_grid_thw=enc["image_grid_thw"])
    torch.save(inputs, tmp_path / "inputs.pt")
    model = group.ranks.workers[0].module.model
    model.eval()
    with torch.no_grad():
        expected = model(**inputs, mm_token_type_ids=(ids == model.config.image_token_id).int()).logits
    script = textwrap.dedent(f"""
        import torch
        from transformers import AutoModelForImageTextToText
        model = AutoModelForImageTextToText.from_pretrained({path + '/hf'!r}, dtype=torch.float32).eval()
        inputs = torch.load({str(tmp_path / 'inputs.pt')!r})
        mm = (inputs["input_ids"] == model.config.image_token_id).int()
        with torch.no_grad():
            logits = model(**inputs, mm_token_type_ids=mm).logits
        torch.save(logits, {str(tmp_path / 'logits.pt')!r})
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    torch.testing.assert_close(torch.load(tmp_path / "logits.pt"), expected, atol=1e-5, rtol=0)
    state = json.loads((root / "step-00000001" / "learner_state.json").read_text())
    assert state["client_state"] == {"cursor": 3} and state["policy_version"] == 1


def test_corrupt_and_partial_checkpoints_fail_naming_the_file(setup, tmp_path):
    group, _, _, initial, root = setup
    path = group.save(str(root / "step-00000002"))
    states = next((root / "step-00000002" / "deepspeed").rglob("*model_states.pt"))
    data = bytearray(states.read_bytes())
    data[len(data) // 2] ^= 0xFF
    states.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=str(states.name) + " does not match its sha256"):
        group.load(path)
    (root / "step-00000002" / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match="partial checkpoint: .*manifest.json is missing"):
        group.load(path)
    group.load(initial)  # the learner is still usable after a refused load


def test_inference_worker_logprobs_equal_learner_after_set_weights(setup, tiny_qwen25vl_path):
    from tests.policy.helpers import observation
    from webrl.policy import PolicyRequest, SamplingConfig
    from webrl.policy.generator import GeneratorConfig, GeneratorPolicy
    from webrl.engines.engine import GeneratorEngine
    from webrl.rollout.inference import InferenceWorker

    group, _, samples, initial, _ = setup
    group.load(initial)
    for _ in range(2):
        group.update(samples)  # the learner's weights now differ from the checkpoint on disk
    update = group.get_weights()
    assert update.version == group.policy_version
    model, processor = load_model(tiny_qwen25vl_path)
    policy = GeneratorPolicy(model, processor, GeneratorConfig(sampling=SamplingConfig(temperature=T,
                                                                                       max_new_tokens=8)))
    worker = InferenceWorker(GeneratorEngine(policy))
    requests = [PolicyRequest(observation(0, size=(320, 200))), PolicyRequest(observation(2, size=(200, 320)))]

    def turns():
        torch.manual_seed(0)
        return [(obs, d) for obs, (d, _) in zip([r.observation for r in requests], worker.act(requests))]

    stale = turns()
    stale_learner = group.compute_logprobs([LearnerSample.from_turn(d.to_turn(o)) for o, d in stale]).logprobs
    assert any(not torch.allclose(torch.tensor(d.logprobs), torch.from_numpy(lp), atol=1e-3)
               for (_, d), lp in zip(stale, stale_learner))  # before the sync they disagree
    worker.set_weights(update.as_dict(), update.version)
    assert worker.version == update.version
    fresh = turns()
    learner = group.compute_logprobs([LearnerSample.from_turn(d.to_turn(o)) for o, d in fresh]).logprobs
    for (_, d), lp in zip(fresh, learner):
        torch.testing.assert_close(torch.from_numpy(lp), torch.tensor(d.logprobs), atol=1e-4, rtol=0)


def test_save_keeps_the_last_n_step_checkpoints(setup, tmp_path):
    """keep_last=2 (helpers.learner_config): the third step-N save deletes the oldest; a folder
    not named step-N is never pruned."""
    from webrl.learner import list_checkpoints

    group = setup[0]
    (tmp_path / "best").mkdir()
    for step in (1, 2, 3):
        group.save(str(tmp_path / f"step-{step:08d}"))
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000002", "step-00000003"]
    assert not (tmp_path / "step-00000001").exists() and (tmp_path / "best").is_dir()


def test_one_grpo_update_raises_positive_and_lowers_negative_advantage_responses(tiny_qwen25vl_path):
    """The sign of the whole path (samples -> clipped objective -> DeepSpeed step): on-policy
    samples with advantages +1 / -1, one update; the summed response log-prob of the +1 samples
    rises and that of the -1 samples falls. (Measured the same way on a recorded iteration of
    the default: -0.44 nats per update for negative responses, +0.10 for positive ones.)"""
    import numpy as np

    from tests.learner.helpers import with_rollout_logprobs

    _, processor = load_model(tiny_qwen25vl_path)
    group = LearnerGroup(learner_config(objective="grpo", zero_stage=0), learner_run(tiny_qwen25vl_path), 1,
                         use_ray=False)
    try:
        samples = make_samples(processor, 6)
        before = group.compute_logprobs(samples).logprobs
        samples = with_rollout_logprobs(samples, before)
        group.update(samples)
        after = group.compute_logprobs(samples).logprobs
    finally:
        group.shutdown()
    change = np.array([float(a.sum() - b.sum()) for a, b in zip(after, before)])
    advantage = np.array([s.advantage for s in samples])
    assert set(advantage) == {1.0, -1.0}
    assert change[advantage > 0].mean() > 0 > change[advantage < 0].mean(), change


def test_a_checkpoint_write_that_fails_names_it_and_leaves_the_last_one(setup, tmp_path, monkeypatch):
    """A full disk during a save (torch.save raising ENOSPC, as it does on a full filesystem):
    CheckpointError naming the checkpoint and the free space; no half-written folder stays
    behind, nothing is published, and the previous checkpoint still loads."""
    import errno

    import torch

    group = setup[0]
    good = group.save(str(tmp_path / "step-00000001"))

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(CheckpointError, match=r"writing checkpoint .*step-00000002 failed: OSError: .*No space left "
                                              r"on device.*MiB free on its filesystem"):
        group.save(str(tmp_path / "step-00000002"))
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000001"]  # no .tmp-step-00000002 left
    group.load(good)

"""Checkpoint file handling without a model: manifest, corruption errors, publish, retention."""
import pytest

from webrl.learner.checkpoint import (CheckpointError, checkpoint_name, latest_checkpoint, list_checkpoints,
                                      prune_checkpoints, publish, temp_path, verify_checkpoint)


def fake_checkpoint(root, step, payload=b"weights"):
    final = root / checkpoint_name(step)
    temp = temp_path(final)
    (temp / "deepspeed").mkdir(parents=True)
    (temp / "deepspeed" / "model.pt").write_bytes(payload)
    (temp / "learner_state.json").write_text("{}")
    return publish(temp, final)


def test_publish_is_atomic_and_verifies(tmp_path):
    path = fake_checkpoint(tmp_path, 3)
    assert path.name == "step-00000003" and not temp_path(path).exists()
    manifest = verify_checkpoint(path)
    assert set(manifest["files"]) == {"deepspeed/model.pt", "learner_state.json"}


def test_missing_manifest_is_partial(tmp_path):
    temp = temp_path(tmp_path / checkpoint_name(1))
    temp.mkdir()
    (temp / "learner_state.json").write_text("{}")
    with pytest.raises(CheckpointError, match=r"partial checkpoint: .*manifest.json is missing"):
        verify_checkpoint(temp)
    assert list_checkpoints(tmp_path) == []  # a .tmp- folder is never a checkpoint


def test_truncated_file_named(tmp_path):
    path = fake_checkpoint(tmp_path, 1)
    (path / "deepspeed" / "model.pt").write_bytes(b"weig")
    with pytest.raises(CheckpointError, match=r"deepspeed/model.pt has 4 bytes, the manifest says 7"):
        verify_checkpoint(path, mode="size")


def test_flipped_byte_caught_by_sha256_only(tmp_path):
    path = fake_checkpoint(tmp_path, 1)
    (path / "deepspeed" / "model.pt").write_bytes(b"weightz")  # same size
    verify_checkpoint(path, mode="size")
    with pytest.raises(CheckpointError, match=r"deepspeed/model.pt does not match its sha256"):
        verify_checkpoint(path, mode="sha256")


def test_missing_file_and_bad_manifest(tmp_path):
    path = fake_checkpoint(tmp_path, 1)
    (path / "learner_state.json").unlink()
    with pytest.raises(CheckpointError, match=r"learner_state.json is listed .* but missing"):
        verify_checkpoint(path)
    (path / "manifest.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"manifest.json is not a valid manifest"):
        verify_checkpoint(path)


def test_keep_last_and_latest(tmp_path):
    for step in (1, 2, 10, 3):
        fake_checkpoint(tmp_path, step)
    (tmp_path / "best").mkdir()  # not a step-N folder: never pruned
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000001", "step-00000002", "step-00000003",
                                                           "step-00000010"]
    deleted = prune_checkpoints(tmp_path, keep_last=2)
    assert [p.name for p in deleted] == ["step-00000001", "step-00000002"]
    assert latest_checkpoint(tmp_path).name == "step-00000010"
    assert (tmp_path / "best").is_dir()


def test_publish_replaces_existing(tmp_path):
    fake_checkpoint(tmp_path, 1, b"old")
    path = fake_checkpoint(tmp_path, 1, b"newer")
    assert (path / "deepspeed" / "model.pt").read_bytes() == b"newer"
    verify_checkpoint(path)

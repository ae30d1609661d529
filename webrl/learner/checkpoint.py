"""Checkpoint files: atomic publication, a manifest that catches partial or corrupt copies,
retention, RNG state.

Layout of one checkpoint folder (written by `LearnerWorker.save` on every rank):

    step-00000012/
      manifest.json          every other file: relative path, size, sha256 (written last)
      learner_state.json     policy version, update / optimizer step counts, world size, ZeRO
                             stage, and the caller's `client_state` (data cursors, ...)
      hf/                    the policy in Hugging Face format + processor (plain transformers)
      deepspeed/state/...    DeepSpeed module, optimizer (per-rank ZeRO shards) and scheduler
      rng/rank-00000.pt      python / numpy / torch (/ cuda) RNG states of each rank

Atomicity: everything is written to `.tmp-<name>` beside the final folder; rank 0 writes the
manifest last and renames the folder. A crash leaves either the old state or a `.tmp-` folder
that `list_checkpoints` ignores and the next save replaces. The checkpoint folder must be on a
filesystem every rank sees (one node, or shared storage).
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

MANIFEST = "manifest.json"
STATE_FILE = "learner_state.json"
STEP_PATTERN = re.compile(r"^step-(\d+)$")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, partial or corrupt; the message names the file."""


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def temp_path(final: Path | str) -> Path:
    final = Path(final)
    return final.parent / f".tmp-{final.name}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: Path | str) -> dict[str, Any]:
    """Record every file under `folder` (size and sha256) in folder/manifest.json."""
    folder = Path(folder)
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST):
        files[path.relative_to(folder).as_posix()] = {"size": path.stat().st_size, "sha256": _sha256(path)}
    manifest = {"format": 1, "files": files}
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, folder / MANIFEST)
    return manifest


def verify_checkpoint(folder: Path | str, mode: str = "sha256") -> dict[str, Any]:
    """Check `folder` against its manifest; raise `CheckpointError` naming the first bad file.

    mode: "size" (existence and size) or "sha256" (also the content hash).
    Returns the manifest.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {folder} does not exist")
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointError(f"partial checkpoint: {manifest_path} is missing (the save did not finish)")
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"corrupt checkpoint: {manifest_path} is not a valid manifest ({e})") from e
    for rel, meta in files.items():
        path = folder / rel
        if not path.is_file():
            raise CheckpointError(f"partial checkpoint: {path} is listed in {manifest_path} but missing")
        size = path.stat().st_size
        if size != meta["size"]:
            raise CheckpointError(f"corrupt checkpoint: {path} has {size} bytes, the manifest says {meta['size']}")
        if mode == "sha256" and _sha256(path) != meta["sha256"]:
            raise CheckpointError(f"corrupt checkpoint: {path} does not match its sha256 in {manifest_path}")
    return manifest


def publish(temp: Path | str, final: Path | str) -> Path:
    """Write the manifest of `temp` and rename it to `final` (replacing an older `final`)."""
    temp, final = Path(temp), Path(final)
    write_manifest(temp)
    if final.exists():
        old = final.parent / f".old-{final.name}"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(temp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(temp, final)
    return final


def list_checkpoints(root: Path | str) -> list[Path]:
    """Published `step-N` folders under `root` (those with a manifest), oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir()
             if (m := STEP_PATTERN.match(p.name)) and (p / MANIFEST).is_file()]
    return [p for _, p in sorted(found)]


def latest_checkpoint(root: Path | str) -> Path | None:
    found = list_checkpoints(root)
    return found[-1] if found else None


def prune_checkpoints(root: Path | str, keep_last: int) -> list[Path]:
    """Delete all but the newest `keep_last` `step-N` checkpoints under `root`; returns the
    deleted folders. Folders not named `step-N` are never touched."""
    found = list_checkpoints(root)
    doomed = found[:-keep_last] if keep_last > 0 else found
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed


def read_state(folder: Path | str) -> dict[str, Any]:
    path = Path(folder) / STATE_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"corrupt checkpoint: cannot read {path} ({e})") from e


def write_state(folder: Path | str, state: dict[str, Any]) -> None:
    (Path(folder) / STATE_FILE).write_text(json.dumps(state, indent=1, sort_keys=True))


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def rng_file(folder: Path | str, rank: int) -> Path:
    return Path(folder) / "rng" / f"rank-{rank:05d}.pt"


def load_rng(folder: Path | str, rank: int) -> dict[str, Any]:
    path = rng_file(folder, rank)
    try:
        return torch.load(path, weights_only=False)
    except Exception as e:  # torch raises several types for a damaged zip
        raise CheckpointError(f"corrupt checkpoint: cannot read {path} ({e})") from e


FULL_DISK_BYTES = 64 << 20
"""Below this much free space a failed checkpoint write is reported as a full disk."""


def write_failed(final: Path, temp: Path, error: Exception, remove: bool) -> CheckpointError:
    """The error for a checkpoint write that failed (torch reports a full disk as "unexpected
    pos" or "iostream error"): it names the checkpoint, the free space left and that the last
    published checkpoint is untouched. Removes the unpublished folder (rank 0), so a retry after
    space was freed starts clean and the space it took is given back."""
    if remove:
        shutil.rmtree(temp, ignore_errors=True)
    try:
        free = shutil.disk_usage(final.parent).free
    except OSError:
        free = -1
    full = " (the disk is full)" if 0 <= free < FULL_DISK_BYTES else ""
    return CheckpointError(
        f"writing checkpoint {final} failed: {type(error).__name__}: {error}; {free / 2 ** 20:.1f} MiB free on "
        f"its filesystem{full}. The last published checkpoint is untouched: free space and resume from it "
        f"(run.resume=true)")

"""Disk cache of judge verdicts, keyed by a hash of the judged content.

The key is the SHA-256 of a canonical JSON document holding everything that can change a
verdict: the judge's name and settings, the backend identity (server and model), the prompt
files' content hashes, and the judged content itself (task, action history, final answer,
screenshot digests, task parameters). Two trajectories that show the judge the same thing
share a verdict; any change to what the judge sees is a new key.

Entries are small JSON files `<dir>/<key[:2]>/<key>.json`, written atomically (temp file then
rename), so concurrent judges and processes can share one folder. Only verdicts are cached:
a drop (timeout, server error) is not, so the next run asks again.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Optional


def content_key(document: Any) -> str:
    """SHA-256 hex of `document` as canonical JSON (sorted keys, no whitespace)."""
    blob = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class VerdictCache:
    """get/put JSON values by key in a folder; `hits` / `misses` count lookups."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.hits = self.misses = 0

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> Optional[dict[str, Any]]:
        try:
            value = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):  # absent, or a torn/corrupt file: treat as a miss
            self.misses += 1
            return None
        self.hits += 1
        return value

    def put(self, key: str, value: dict[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(value, f, ensure_ascii=False)
        os.replace(tmp, path)

    def __len__(self) -> int:
        return sum(1 for _ in self.directory.glob("*/*.json"))

"""The weights side of the server backends (`ServerBackend`, and through it vLLM's): loads from
a folder, the version each server must answer with, and the restore of a server that comes back
on older weights after a restart.

A mixin: the backend owns `http` (`webrl.chat.server_http.ServerHTTP`), `pool` (a thread pool),
`urls` and `down_wait_s`, and calls `init_weights(urls)` in its constructor. Departure from
SGLang's and vLLM's own clients: a server answering with its launch weights or one of the run's
older loads is given the run's newest folder again by whichever engine meets the stale answer;
neither server does that itself (SGLang's `--weight-version` is a label only).
"""
from __future__ import annotations

import threading
import time
from typing import Optional, Sequence

from webrl.chat.server_http import ServerEngineError, ServerUnreachableError


class ServerWeights:
    """Weight versions and folder loads of the servers a backend samples on."""

    def init_weights(self, urls: Sequence[str]) -> None:
        self.weight_version: Optional[str] = None
        """The version last loaded through this engine (None: whatever the servers started with)."""
        self.loaded: Optional[tuple[str, str]] = None
        """(folder, version) last loaded into the servers, by this engine or (`note_weights` with a
        path) by another of the run's: what a server answering with older weights gets back."""
        self.earlier: set[str] = set()
        """Versions loaded before `loaded`'s: a server reporting one of them holds the run's own
        older weights (a restart restored what it last saw), not another writer's."""
        self._reloading = {url: threading.RLock() for url in urls}

    LAUNCH_VERSIONS: tuple[str, ...] = ("default", "0")
    """Versions a server reports on its launch weights (SGLang's `--weight-version` default;
    `webrl serve`'s)."""

    def note_weights(self, version: str, path: Optional[str] = None) -> None:
        """Another engine of the run has just loaded `version` into these servers (from `path`,
        when a folder): expect it, and restore it into a server that comes back without it."""
        self._remember(str(path) if path else None, str(version))

    def load_weights_from_disk(self, path: str, version: Optional[int | str] = None) -> str:
        """Every server loads `path` in place, stamped `version` (read back from /model_info).
        Returns the version the servers report."""
        label = str(version) if version is not None else None
        reported = list(self.pool.map(lambda url: self.reload_when_up(url, path, label), self.urls))
        if len(set(reported)) != 1:
            raise ServerEngineError(f"servers report different weight versions after the update: "
                                    f"{dict(zip(self.urls, reported))}")
        self._remember(str(path), reported[0])
        return reported[0]

    def _remember(self, path: Optional[str], version: str) -> None:
        if self.weight_version is not None and self.weight_version != version:
            self.earlier.add(self.weight_version)
        self.weight_version = version
        self.loaded = (path, version) if path else None

    def reload_when_up(self, url: str, path: str, label: Optional[str]) -> str:
        """`_reload`, sent again while the server is unreachable, until `down_wait_s` has passed:
        a launched server that dies during the load (the connection drops) is restarted by its
        launcher, and takes the folder once it answers (user-started servers: down_wait_s 0, the
        first failure is raised)."""
        deadline = time.monotonic() + self.down_wait_s
        while True:
            try:
                return self._reload(url, path, label)
            except ServerUnreachableError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    def _reload(self, url: str, path: str, label: Optional[str]) -> str:
        """One server loads `path` (stamped `label`); the version it reports afterwards."""
        with self._reloading[url]:
            return self.http.update_from_disk(url, {"model_path": path, **({"weight_version": label} if label else {})})

    def server_version(self, url: str) -> str:
        info = self.http.request(url, "GET", "/model_info")
        return str(info.get("weight_version")) if isinstance(info, dict) else ""

    def restore(self, url: str, versions: set[str]) -> None:
        """A server answering with other weights than the run loaded: if they are its launch weights
        or the run's own older ones (a restarted server; its launcher restores what it last saw,
        which misses a load just before the death), load `loaded` into it again. Another writer's
        weights are left alone (the answer stays refused). Once per server at a time: a row that
        waited for another's reload finds the server current and loads nothing."""
        if self.loaded is None or not versions <= set(self.LAUNCH_VERSIONS) | self.earlier:
            return
        path, label = self.loaded
        try:
            with self._reloading[url]:
                if self.server_version(url) != label:
                    self._reload(url, path, label)
        except ServerEngineError:
            pass  # still restarting: the row is tried again, and so is this

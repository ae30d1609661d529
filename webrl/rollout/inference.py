"""InferenceWorker: a policy behind a dynamic batcher, stamped with a weight version.

Many trajectories ask for actions independently; the worker gathers the requests that arrive
within a short window (or until `max_batch_size`) and decides them in one `policy.act` call.
Every decision comes back with the policy version that produced it, and `set_weights` never
runs in the middle of a batch (one lock orders them), so a decision's version is exact.

Weights arrive three ways: a state dict or learner `WeightUpdate` from Ray's object store
(`set_weights`), a broadcast from the learner's rank 0 in a group this worker joined
(`join_weight_group` once, then `receive_weights` per sync; `webrl.learner.weight_broadcast`), or a
checkpoint folder a server engine loads itself.

The engine is whatever implements `Engine` (`act` + `load_weights`): the transformers
generator policy, or `webrl.engines.sglang.ServerEngine` over SGLang-native servers
(weights as a folder path), without touching the coordinator.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

from webrl.policy.types import Decision, PolicyRequest
from webrl.config import fixed


class Engine(Protocol):
    def act(self, requests: Sequence[PolicyRequest]) -> list[Decision]: ...

    def load_weights(self, weights: Mapping[str, Any]) -> None: ...


@dataclass
class InferenceConfig:
    batch_window_s: float = fixed(0.02, "the batcher waits 20 ms for more requests to join a batch")
    """How long the first request of a batch waits for others to join."""
    max_batch_size: int = 16
    """Most requests decided in one forward pass."""

    def __post_init__(self) -> None:
        if self.batch_window_s < 0:
            raise ValueError(f"inference.batch_window_s must be >= 0, got {self.batch_window_s}")
        if self.max_batch_size < 1:
            raise ValueError(f"inference.max_batch_size must be >= 1, got {self.max_batch_size}")


class DynamicBatcher:
    """Collects `submit`ted items into batches for `fn(items) -> results` (same order).

    The first item of a batch waits at most `window_s` for more; a full batch goes at once.
    `fn` runs in a worker thread so the event loop keeps accepting requests meanwhile.
    """

    def __init__(self, fn: Callable[[list[Any]], list[Any]], window_s: float, max_batch: int):
        self.fn, self.window_s, self.max_batch = fn, window_s, max_batch
        self._pending: list[tuple[Any, asyncio.Future]] = []
        self._runner: Optional[asyncio.Task] = None
        self.loop = asyncio.get_running_loop()  # asyncio primitives belong to one loop
        self._wake = asyncio.Event()
        self.lock = asyncio.Lock()
        self.batch_sizes: list[int] = []

    async def submit(self, item: Any) -> Any:
        loop = asyncio.get_running_loop()
        if loop is not self.loop:
            raise RuntimeError("DynamicBatcher used from a different event loop than it was made in")
        fut = loop.create_future()
        self._pending.append((item, fut))
        self._wake.set()
        if self._runner is None or self._runner.done():
            self._runner = loop.create_task(self._run())
        return await fut

    async def _run(self) -> None:
        while self._pending:
            start = time.monotonic()
            while len(self._pending) < self.max_batch and time.monotonic() - start < self.window_s:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), self.window_s - (time.monotonic() - start))
                except asyncio.TimeoutError:
                    break
            batch, self._pending = self._pending[:self.max_batch], self._pending[self.max_batch:]
            self.batch_sizes.append(len(batch))
            try:
                async with self.lock:
                    results = await asyncio.to_thread(self.fn, [item for item, _ in batch])
                if len(results) != len(batch):
                    raise RuntimeError(f"batch function returned {len(results)} results for {len(batch)} items")
            except Exception as e:  # every waiter learns of the failure; the loop goes on
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            for (_, fut), result in zip(batch, results):
                if not fut.done():
                    fut.set_result(result)


class InferenceWorker:
    """Plain class: an engine plus its weight version. Tested without Ray."""

    def __init__(self, engine: Engine, config: InferenceConfig | None = None, version: int = 0):
        self.engine, self.config, self.version = engine, config or InferenceConfig(), version
        self._batcher: Optional[DynamicBatcher] = None
        self.busy_s = 0.0
        """Seconds spent inside `engine.act` (the benchmark's "inference busy" share)."""
        self.decisions = 0
        self.engine_calls = 0

    def act(self, requests: Sequence[PolicyRequest]) -> list[tuple[Decision, int]]:
        """Decide a batch now; each decision paired with the version that made it."""
        version, start = self.version, time.monotonic()
        decisions = self.engine.act(list(requests))
        self.busy_s += time.monotonic() - start
        self.decisions += len(decisions)
        self.engine_calls += 1
        return [(d, version) for d in decisions]

    async def act_one(self, request: PolicyRequest) -> tuple[Decision, int]:
        """Decide one request, batched with whatever else arrives within the window."""
        return await self._loop_batcher().submit(request)

    async def act_batch(self, requests: Sequence[PolicyRequest]) -> list[tuple[Decision, int]]:
        """Decide a whole batch now, off the event loop, never while weights change."""
        async with self._loop_batcher().lock:
            return await asyncio.to_thread(self.act, list(requests))

    def _loop_batcher(self) -> DynamicBatcher:
        if self._batcher is None or self._batcher.loop is not asyncio.get_running_loop():
            self._batcher = DynamicBatcher(self.act, self.config.batch_window_s, self.config.max_batch_size)
        return self._batcher

    async def set_weights_async(self, weights: Mapping[str, Any], version: int, label: Optional[str] = None) -> int:
        """Swap weights between batches (never during one)."""
        if self._batcher is None or self._batcher.loop is not asyncio.get_running_loop():
            await asyncio.to_thread(self.set_weights, weights, version, label)
        else:
            async with self._batcher.lock:
                await asyncio.to_thread(self.set_weights, weights, version, label)
        return self.version

    def set_weights(self, weights: Mapping[str, Any] | str, version: int, label: Optional[str] = None) -> None:
        """A state dict (in-process engines) or a Hugging Face folder path (server engines, which
        load it themselves, stamped `label`: unique per load, so a server never looks up to date
        with other weights)."""
        if version < self.version:
            raise ValueError(f"weights version {version} is older than the current {self.version}")
        if isinstance(weights, str):
            self.engine.load_weights(weights, label or str(version))
        else:
            self.engine.load_weights(weights)
        self.version = version

    def join_weight_group(self, master_address: str, master_port: int, rank: int, world_size: int, backend: str,
                          group_name: str, timeout_s: float, specs: Sequence[Any], bucket_bytes: int) -> None:
        """Join the learner's weight-broadcast group as `rank` (blocks until it forms, or raises
        `webrl.learner.weight_broadcast.GroupSetupError` after `timeout_s`); `specs` / `bucket_bytes`:
        what every later broadcast carries (`learner.weight_sync.mode=collective`)."""
        from webrl.learner.weight_broadcast import WeightBroadcastGroup

        self._weight_group = WeightBroadcastGroup.join(master_address, master_port, rank, world_size,
                                                       backend=backend, group_name=group_name, timeout_s=timeout_s)
        self._weight_specs, self._bucket_bytes = list(specs), int(bucket_bytes)

    def receive_weights(self, version: int) -> int:
        """Receive one broadcast bucket by bucket into the engine (`load_weights` per bucket),
        then take `version`. The header rank 0 sends first must carry the same version and sizes."""
        from webrl.learner.weight_buckets import header_of

        group = getattr(self, "_weight_group", None)
        if group is None:
            raise RuntimeError("receive_weights before join_weight_group: this worker is in no weight-broadcast group")
        if version < self.version:
            raise ValueError(f"weights version {version} is older than the current {self.version}")
        for bucket in group.receive(self._weight_specs, self._bucket_bytes, header_of(version, self._weight_specs)):
            self.engine.load_weights(dict(bucket))
        self.version = version
        return version

    async def receive_weights_async(self, version: int) -> int:
        """`receive_weights` between batches (never during one)."""
        if self._batcher is None or self._batcher.loop is not asyncio.get_running_loop():
            return await asyncio.to_thread(self.receive_weights, version)
        async with self._batcher.lock:
            return await asyncio.to_thread(self.receive_weights, version)

    async def note_weights_async(self, version: int, label: str, path: Optional[str] = None) -> int:
        """A server engine whose servers another worker of the run just updated: take the new
        version without loading anything (between batches)."""
        if self._batcher is None or self._batcher.loop is not asyncio.get_running_loop():
            self.engine.note_weights(label, path)
        else:
            async with self._batcher.lock:
                self.engine.note_weights(label, path)
        self.version = version
        return version

    def batch_sizes(self) -> list[int]:
        return list(self._batcher.batch_sizes) if self._batcher else []


class InferenceRestarted(RuntimeError):
    """The inference worker's process died and Ray started it again: it holds the checkpoint's
    weights, not the policy's, so it decides nothing until the next weight sync reaches it."""


class InferenceActor:
    """Ray shell (async actor): `ray.remote(num_cpus=...)(InferenceActor).remote(factory, config)`.

    `engine_factory` is a picklable zero-argument callable that builds the engine inside the
    actor (so model weights load where they run, not in the driver). Restarted by Ray after its
    process died (`start_inference_workers`' max_restarts), a worker that takes the policy's
    weights (`takes_weights`) raises `InferenceRestarted` on every decision until a weight sync
    (set_weights, receive_weights, note_weights) reaches it: the coordinator retries those
    trajectories as infrastructure errors, and the run's next sync revives the worker, instead of
    a dead actor ending the run or a revived one answering with stale weights.
    """

    def __init__(self, engine_factory: Callable[[], Engine], config: InferenceConfig | None = None,
                 version: int = 0, takes_weights: bool = False):
        self.worker = InferenceWorker(engine_factory(), config, version)
        self.stale = takes_weights and _restarted_by_ray()

    def _check(self) -> None:
        if self.stale:
            raise InferenceRestarted("this inference worker was restarted after its process died and holds the "
                                     "checkpoint's weights: it decides again once the run's next weight sync "
                                     "reaches it")

    async def act_one(self, request: PolicyRequest) -> tuple[Decision, int]:
        self._check()
        return await self.worker.act_one(request)

    async def set_weights(self, weights: Any, version: Optional[int] = None, label: Optional[str] = None) -> int:
        """`weights`: name -> tensor with `version`, a learner `WeightUpdate` (carries both;
        hand the learner's object-store ref to every worker so the bytes travel once), or the
        path of a Hugging Face folder with `version` (server engines)."""
        if hasattr(weights, "as_dict"):
            weights, version = weights.as_dict(), weights.version if version is None else version
        if version is None:
            raise ValueError("set_weights needs a version")
        version = await self.worker.set_weights_async(weights, version, label)
        self.stale = False
        return version

    async def join_weight_group(self, *args) -> None:
        """See `InferenceWorker.join_weight_group` (runs off the event loop: it blocks until the group forms)."""
        await asyncio.to_thread(self.worker.join_weight_group, *args)

    async def receive_weights(self, version: int) -> int:
        """One broadcast from the learner's rank 0 (`learner.weight_sync.mode=collective`)."""
        version = await self.worker.receive_weights_async(version)
        self.stale = False
        return version

    async def note_weights(self, version: int, label: str, path: Optional[str] = None) -> int:
        """Server engines: another worker loaded `label` into the shared servers (see InferenceWorker)."""
        version = await self.worker.note_weights_async(version, label, path)
        self.stale = False
        return version

    async def act_batch(self, requests: list[PolicyRequest]) -> list[tuple[Decision, int]]:
        """Decide a whole batch in one call (lock-step drivers; the coordinator uses act_one)."""
        self._check()
        return await self.worker.act_batch(requests)

    async def version(self) -> int:
        return self.worker.version

    async def counters(self) -> dict[str, float]:
        """busy_s (time in the engine), decisions, batches (engine calls) so far."""
        return {"busy_s": self.worker.busy_s, "decisions": float(self.worker.decisions),
                "batches": float(self.worker.engine_calls)}

    async def batch_sizes(self) -> list[int]:
        return self.worker.batch_sizes()


def _restarted_by_ray() -> bool:
    """Whether this process is a Ray actor that Ray restarted (False outside Ray)."""
    try:
        import ray

        return bool(ray.is_initialized() and ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # not inside a Ray actor
        return False

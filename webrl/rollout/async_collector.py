"""AsyncCollector: rollouts go on while the learner trains, bounded by `max_staleness`.

A background thread runs its own event loop and keeps groups of G trajectories going over the
coordinator's env slots with whatever weights the inference workers hold at each turn (every
turn carries the `policy_version` that decided it). The trainer asks for a batch:

    collector = AsyncCollector(coordinator, sample_task)   # starts the background loop
    trajectories, stats = collector.next_batch(learner_version, num_groups, iteration)
    ... learner.update(...) while the collector already collects the next batch ...
    collector.close()

Notation: v = the learner's current policy version (the weights its next update starts from),
S = max_staleness, G = group size, N = groups per batch.

Staleness rule: a group is returned only if every turn of every member was decided at version
>= v - S. A group with one older turn is discarded whole (its trajectories are counted in
`stats.stale`) and the collector starts a replacement group on a fresh task: GRPO advantages
are relative within a group, so a group with members cut out would bias them, and finishing an
old trajectory with new weights cannot make its early turns fresher. Groups come back oldest
first (FIFO), so a group is used while it is still fresh rather than left to go stale.

How far ahead it collects: while `next_batch` waits, the collector keeps exactly the groups
still missing from the batch ready-or-running; between calls (the learner is training) it keeps
N groups (the last batch's size) going, i.e. at most one batch ahead. With S = 0 nothing is
collected ahead (everything collected during training would be stale), so S = 0 behaves as sync
mode: each batch is collected entirely after the call, with the current weights.

Departure from AsyncWebRL-style fully asynchronous pipelines: no off-policy correction here;
the learner gets each turn's version and behaviour logprobs and decides (e.g. importance ratio
against the stored logprobs, which the clipped objective already uses).
"""
from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import Any, Callable, Optional, Sequence

from webrl.rollout.coordinator import RolloutConfig, RolloutCoordinator, RolloutStats
from webrl.types import Trajectory


def oldest_version(group: Sequence[Trajectory]) -> Optional[int]:
    """The lowest `policy_version` over all turns of `group`; None when it has no turns."""
    versions = [turn.policy_version for traj in group for turn in traj.turns]
    return min(versions) if versions else None


def is_fresh(group: Sequence[Trajectory], current_version: int, max_staleness: int) -> bool:
    """Whether no turn of `group` is older than `current_version - max_staleness`.

    A group without turns (all members dropped by infrastructure errors) is fresh: it carries
    nothing to train on and goes back so its drops are seen and counted like in sync mode.
    """
    oldest = oldest_version(group)
    return oldest is None or current_version - oldest <= max_staleness


class AsyncCollector:
    """Background group collection over a `RolloutCoordinator`; `next_batch` hands out fresh groups.

    sample_task() -> Task is called on the collector's thread whenever a new group starts (it
    must not share unlocked state with the caller's thread; a dedicated RNG is enough).
    progress(stats, total), if given, is called as groups finish (total = N * G of the request).
    """

    def __init__(self, coordinator: RolloutCoordinator, sample_task: Callable[[], Any],
                 config: Optional[RolloutConfig] = None,
                 progress: Optional[Callable[[RolloutStats, int], None]] = None):
        self.coordinator, self.sample_task = coordinator, sample_task
        self.config = config or coordinator.config
        self.progress = progress
        self._cond = threading.Condition()
        self._ready: collections.deque[list[Trajectory]] = collections.deque()
        self._in_flight = 0
        self._demand = 0  # groups to keep ready-or-running (see module docstring)
        self._batch_groups = 1  # groups of the latest request (the progress bar's total)
        self._iteration = 0
        self._stats, self._since = RolloutStats(), time.monotonic()
        self._groups_started = 0
        self._error: Optional[BaseException] = None
        self._closing = False
        self._loop = asyncio.new_event_loop()
        self._wake: Optional[asyncio.Event] = None
        self._thread = threading.Thread(target=self._run_loop, name="webrl-async-rollout", daemon=True)
        self._thread.start()

    # -- the trainer's side -----------------------------------------------------------------
    def next_batch(self, current_version: int, num_groups: int, iteration: int = 0,
                   timeout_s: Optional[float] = None) -> tuple[list[Trajectory], RolloutStats]:
        """`num_groups` complete groups, none with a turn older than `current_version - max_staleness`.

        Returns the trajectories grouped (G consecutive per group) and the stats of every group
        finished since the previous call, stale ones included. `iteration` sets the horizon of
        groups started from now on.
        """
        if num_groups < 1:
            raise ValueError(f"next_batch num_groups must be >= 1, got {num_groups}")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        batch: list[list[Trajectory]] = []
        stale = 0
        with self._cond:
            self._iteration = iteration
            self._demand = self._batch_groups = num_groups
            self._notify_loop()
            while len(batch) < num_groups:
                group = self._wait_for_group(deadline)
                if is_fresh(group, current_version, self.config.max_staleness):
                    batch.append(group)
                else:
                    stale += len(group)
                # ask for exactly what is still missing (a stale group gets replaced)
                self._demand = num_groups - len(batch)
                self._notify_loop()
            self._demand = num_groups if self.config.max_staleness > 0 else 0
            self._notify_loop()
            stats, self._stats = self._stats, RolloutStats()
            now = time.monotonic()
            stats.wall_s, self._since = now - self._since, now
        stats.stale = stale
        return [traj for group in batch for traj in group], stats

    def pause(self, timeout_s: Optional[float] = None) -> None:
        """Start no more groups and wait until the running ones finished (they stay ready for the
        next batch). Call it before anything else uses the same env slots, e.g. an evaluation;
        the next `next_batch` resumes collection."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            self._demand = 0
            while self._in_flight and self._error is None and not self._closing:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"pause: {self._in_flight} groups still running")
                self._cond.wait(timeout=left if left is not None else 1.0)

    def close(self) -> None:
        """Stop starting groups, cancel running ones, end the thread (env slots stay usable)."""
        with self._cond:
            self._closing = True
            self._notify_loop()
        self._thread.join(timeout=60)

    def __enter__(self) -> "AsyncCollector":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def groups_started(self) -> int:
        return self._groups_started

    @property
    def ready_groups(self) -> int:
        """Complete groups waiting for the next `next_batch`."""
        with self._cond:
            return len(self._ready)

    def _wait_for_group(self, deadline: Optional[float]) -> list[Trajectory]:
        while not self._ready:
            if self._error is not None:
                raise RuntimeError("async rollout loop failed") from self._error
            if self._closing:
                raise RuntimeError("AsyncCollector is closed")
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError("next_batch: no complete group before the timeout")
            self._cond.wait(timeout=left if left is not None else 1.0)
        return self._ready.popleft()

    def _notify_loop(self) -> None:
        if self._wake is not None:
            try:
                self._loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:  # the loop already ended (closed, or it failed: next_batch raises)
                pass

    # -- the collector's thread -------------------------------------------------------------
    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._supervise())
        except BaseException as e:  # surfaced to the caller by next_batch
            with self._cond:
                self._error = e
                self._cond.notify_all()
        finally:
            self._loop.close()

    async def _supervise(self) -> None:
        self._wake = asyncio.Event()
        slots = self.coordinator.slot_queue()
        running: set[asyncio.Task] = set()
        try:
            while True:
                self._wake.clear()
                with self._cond:
                    if self._closing:
                        return
                    to_start = self._demand - self._in_flight - len(self._ready)
                    self._in_flight += max(to_start, 0)
                    iteration = self._iteration
                for _ in range(to_start):
                    task = self._loop.create_task(self._group(slots, iteration))
                    running.add(task)
                    task.add_done_callback(running.discard)
                await self._wake.wait()
        finally:
            for task in list(running):
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    async def _group(self, slots: asyncio.Queue, iteration: int) -> None:
        try:
            task = self.sample_task()
            number = self._groups_started
            self._groups_started += 1
            stats = RolloutStats()
            group_id = f"{iteration}:a{number}:{task.spec.id}"
            group = await self.coordinator.run_group(task, group_id, self.config.horizon(iteration), slots, stats)
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            with self._cond:
                self._error = e
                self._in_flight -= 1
                self._cond.notify_all()
            raise
        with self._cond:
            self._in_flight -= 1
            self._ready.append(group)
            self._stats.add(stats)
            snapshot = RolloutStats(**{**self._stats.__dict__, "wall_s": time.monotonic() - self._since})
            total = max(snapshot.trajectories, self._batch_groups * self.config.group_size)
            self._cond.notify_all()
        if self.progress:
            self.progress(snapshot, total)
        self._wake.set()

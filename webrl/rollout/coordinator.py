"""RolloutCoordinator: G trajectories per task, each an independent loop, no per-turn barrier.

Each trajectory runs `reset -> (act -> step)*` on its own: it borrows a free env slot (one
BrowserContext in some EnvWorker), asks an InferenceWorker for each action (where requests
from many trajectories are batched), and returns the slot when it ends. Nothing waits for
other trajectories between turns; a group is complete when all its members finish or drop.

Failures: an infrastructure error (browser crash reported in `info["infra_error"]`, a dead
EnvWorker actor, a step or trajectory timeout) restarts that trajectory from scratch on
another slot, up to `max_retries` times; after that the trajectory is dropped with the
reason. An env error that says the task or the configuration is wrong (`NOT_RETRIED`: a
ValueError, say) is not retried: the trajectory is dropped at once with the error's type, whole
message and task. Dropped trajectories are counted and never scored as task failures. Each env call
has `step_timeout_s`, each inference call `inference_timeout_s`; the whole trajectory's limit
defaults to their sum over the turn limit (`RolloutConfig.trajectory_timeout`), so a long
episode whose every call is on time is never cut for being long.

Modes: `collect` is sync mode (a whole batch, then train). Async mode (rollouts go on while
the learner trains, bounded by `max_staleness`) is `AsyncCollector` (async_collector.py), which
runs `run_group` on a background loop over the same slots and inference workers.

Departure from OpenWebRL: the recipe's driver steps all envs of a batch in lock-step; here each
trajectory advances as soon as its own action is ready (the asynchronous design AsyncWebRL
argues for), which removes the wait on the slowest page at every turn.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from webrl.policy.seeds import derive_seed
from webrl.policy.types import PolicyRequest
from webrl.rollout.balanced import BalancedRolloutConfig
from webrl.rollout.dynamic_sampling import DynamicSamplingConfig
from webrl.rollout.episode import Decide, Episode, EpisodeInfraError, EpisodeSpec, run_episode_async
from webrl.rollout.slots import slot_env_call
from webrl.rollout.progress import LOG_IMAGES, log_fraction
from webrl.engines.server_config import ServerConfig
from webrl.types import Trajectory, TrajectoryInfo
from webrl.config import fixed

ENGINES = ("transformers", "server")


NOT_RETRIED = (ValueError, TypeError, KeyError, AttributeError)
"""Env errors that say the task or the configuration is wrong (a start URL the network policy
refuses raises ValueError): another attempt on another slot fails the same way, so the
trajectory is dropped at once with the whole message instead of as an infrastructure error."""


def env_error_cause(error: BaseException) -> BaseException:
    """The exception the env raised: a Ray task error's cause (`RayTaskError.cause`), else `error`."""
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, BaseException) else error


def run_coroutine(coro: Any) -> Any:
    """`asyncio.run(coro)`, also from a thread whose event loop is already running.

    A running loop in the calling thread (a Jupyter kernel, or Playwright's sync API, which
    keeps its loop registered in the thread while a browser is open) makes `asyncio.run`
    refuse; then the coroutine runs to completion on a fresh loop in a helper thread.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="webrl-rollout") as pool:
        return pool.submit(asyncio.run, coro).result()


@dataclass
class RolloutConfig:
    group_size: int = 4
    """G: trajectories sampled per task (the GRPO group)."""
    max_turns: int = 15
    """Most agent steps per trajectory (before any horizon schedule)."""
    horizon_schedule: list[list[int]] = field(default_factory=list)
    """[[from_iteration, max_turns], ...]: e.g. [[0, 15], [90, 30]] as in OpenWebRL."""
    step_timeout_s: float = 60.0
    """One env call (reset or step) longer than this is an infrastructure error."""
    inference_timeout_s: float = 300.0
    """One inference call longer than this (queueing at a busy engine included) is an
    infrastructure error; apart from step_timeout_s so that a long queue does not fail env steps."""
    stop_after_parse_failures: int = 0
    """End an episode right after this many consecutive turns whose response did not parse into
    an action (the recipe's rule: 3; its reward scores such an episode -1); 0 = never."""
    trajectory_timeout_s: float = 0.0
    """A whole trajectory longer than this is an infrastructure error. 0 = auto: the longest a
    trajectory can take when every call keeps within its own limit, `trajectory_timeout(max_turns)`
    = step_timeout_s (the reset) + max_turns x (step_timeout_s + inference_timeout_s), so the limit
    grows with the turn limit (horizon_schedule included) instead of cutting long episodes."""
    log_trajectories: str = "all"
    """Which finished trajectories the run's trajectory log keeps: all | none | a fraction in (0, 1]
    of groups, chosen by a hash of (run.seed, group id), so reruns log the same ones
    (`webrl.rollout.progress`)."""
    log_images: str = "auto"
    """Images in the trajectory log: auto (JPEG where it is smaller than the env's PNG, else the
    PNG) | jpeg (always re-encoded, lossy) | png (the env's lossless bytes) | none (no image files)."""
    max_retries: int = 2
    """Infrastructure-error restarts of one trajectory before it is dropped."""
    retry_backoff_s: float = fixed(2.0, "a restarted trajectory waits 2 s * 2**attempt")
    """Wait before restart k of a trajectory: retry_backoff_s * 2**k (a dead EnvWorker actor
    needs seconds to restart with a fresh browser)."""
    screenshot: str = "som"
    """Screenshot the policy sees: som (boxes drawn) | raw | none."""
    keep_history_images: int = 1
    """Past turns whose images travel with a request (the policy shows at most this many)."""
    mode: str = "sync"
    """sync: collect a whole batch, then train | async: rollouts go on while the learner trains
    (webrl.rollout.async_collector.AsyncCollector), bounded by max_staleness."""
    max_staleness: int = 1
    """async mode: a group with any turn decided more than this many policy versions before the
    learner's current one is discarded (counted as "stale"); 0 collects nothing ahead (= sync)."""
    engine: str = "transformers"
    """Who samples: "transformers" (the generator inside each inference worker) or "server"
    (SGLang-native servers at rollout.server.urls, `webrl.engines.sglang`; weights reach
    them as a Hugging Face folder after every update)."""
    server: ServerConfig = field(default_factory=ServerConfig)
    """The servers of rollout.engine=server."""
    balanced: BalancedRolloutConfig = field(default_factory=BalancedRolloutConfig)
    """Orchard's Balanced Adaptive Rollout (sync mode): which drawn tasks run and how many of the
    iteration's tasks x group_size rollouts each gets, from per-family success estimates
    (`webrl.rollout.balanced`). Off by default."""
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    """DAPO's dynamic sampling (sync GRPO): extra rounds of tasks until the batch holds
    target_groups groups with a reward difference (`webrl.rollout.dynamic_sampling`)."""

    def __post_init__(self) -> None:
        if self.balanced.enabled and self.mode != "sync":
            raise ValueError("rollout.balanced.enabled plans the tasks of a sync iteration; rollout.mode=async draws "
                             "on its own thread, so set rollout.mode=sync or rollout.balanced.enabled=false")
        if self.engine not in ENGINES:
            raise ValueError(f"rollout.engine must be one of {ENGINES}, got {self.engine!r}")
        if self.engine == "server" and not self.server.urls and self.server.launch == "none":
            raise ValueError("rollout.engine=server needs servers: rollout.server.urls (the base URLs of servers you "
                             "started) or rollout.server.launch=webrl|sglang (the run starts them)")
        if self.engine != "server" and self.server != ServerConfig():
            default = ServerConfig()
            changed = [f"rollout.server.{name}={getattr(self.server, name)!r}" for name in ServerConfig.__dataclass_fields__
                       if getattr(self.server, name) != getattr(default, name)]
            raise ValueError(f"rollout.server.* is set but rollout.engine is not 'server' ({', '.join(changed)}); set "
                             f"rollout.engine=server or leave these keys at their defaults")
        b = self.balanced
        if b.enabled and not b.min_group <= self.group_size <= b.max_group:
            raise ValueError(f"rollout.group_size={self.group_size} must lie in [rollout.balanced.min_group, "
                             f"rollout.balanced.max_group] = [{b.min_group}, {b.max_group}] with balanced rollout on: "
                             f"the iteration's tasks x group_size rollouts are split into groups of that size range")
        if self.group_size < 1 or self.max_turns < 1:
            raise ValueError("rollout.group_size and rollout.max_turns must be >= 1")
        for name in ("step_timeout_s", "inference_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"rollout.{name} must be > 0, got {getattr(self, name)!r}")
        if not self.trajectory_timeout_s >= 0:
            raise ValueError(f"rollout.trajectory_timeout_s must be > 0 (seconds) or 0 (auto), "
                             f"got {self.trajectory_timeout_s!r}")
        if self.trajectory_timeout_s and self.inference_timeout_s >= self.trajectory_timeout_s:
            raise ValueError(f"rollout.inference_timeout_s ({self.inference_timeout_s}) must be below "
                             f"rollout.trajectory_timeout_s ({self.trajectory_timeout_s}), which would end the "
                             f"trajectory first")
        if not isinstance(self.stop_after_parse_failures, int) or self.stop_after_parse_failures < 0:
            raise ValueError(f"rollout.stop_after_parse_failures must be an integer >= 0 (0 = never), "
                             f"got {self.stop_after_parse_failures!r}")
        if self.log_images not in LOG_IMAGES:
            raise ValueError(f"rollout.log_images must be one of {' | '.join(LOG_IMAGES)}, got {self.log_images!r}")
        if log_fraction(self.log_trajectories) == 0 and self.log_images != "auto":  # raises naming the key
            raise ValueError(f"rollout.log_images={self.log_images!r} has no effect with rollout.log_trajectories=none "
                             f"(no trajectory is logged); leave it at 'auto' or log some trajectories")
        if self.mode not in ("sync", "async"):
            raise ValueError(f"rollout.mode must be sync | async, got {self.mode!r}")
        if not isinstance(self.max_staleness, int) or self.max_staleness < 0:
            raise ValueError(f"rollout.max_staleness must be an integer >= 0, got {self.max_staleness!r}")
        if self.screenshot not in ("som", "raw", "none"):
            raise ValueError(f"rollout.screenshot must be som | raw | none, got {self.screenshot!r}")
        for entry in self.horizon_schedule:
            if len(entry) != 2 or entry[1] < 1:
                raise ValueError(f"rollout.horizon_schedule entries are [from_iteration, max_turns], got {entry}")

    def trajectory_timeout(self, max_turns: int) -> float:
        """Seconds one trajectory of at most `max_turns` turns may take: trajectory_timeout_s when
        set, else (auto) one reset plus max_turns env steps and inference calls at their limits."""
        if self.trajectory_timeout_s:
            return float(self.trajectory_timeout_s)
        return self.step_timeout_s + max_turns * (self.step_timeout_s + self.inference_timeout_s)

    def horizon(self, iteration: int) -> int:
        """Max turns at `iteration`: the last schedule entry that has started, else max_turns."""
        turns = self.max_turns
        for start, value in sorted(self.horizon_schedule):
            if iteration >= start:
                turns = value
        return turns


@dataclass
class RolloutStats:
    """Counters of one collection (sync: one `collect`; async: groups finished since the last
    batch). env_time_s / inference_time_s are summed over trajectories: the time their env slot
    spent in reset/step, and waiting for an action (queueing and batching included)."""

    trajectories: int = 0
    dropped: int = 0
    retries: int = 0
    env_steps: int = 0
    successes: int = 0
    env_time_s: float = 0.0
    inference_time_s: float = 0.0
    wall_s: float = 0.0
    stale: int = 0
    """async mode: trajectories discarded because their group held a turn older than max_staleness."""
    log_bytes: int = 0
    """Bytes the trajectory log (`on_trajectory`, when it returns a count) wrote for these trajectories."""
    prompt_tokens: int = 0
    """Prompt tokens of every decision (`DecisionStats.prompt_tokens`), the engines' prefill work."""
    cached_tokens: int = 0
    """Of those, the tokens the engine's prefix cache served (`DecisionStats.cached_tokens`; 0 for
    webrl's own engines, which recompute every prompt)."""

    @property
    def steps_per_s(self) -> float:
        return self.env_steps / self.wall_s if self.wall_s else 0.0

    def add(self, other: "RolloutStats") -> None:
        """Accumulate `other`'s counters (wall_s is left to the caller)."""
        for f in dataclasses.fields(self):
            if f.name != "wall_s":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


async def _await(ref: Any, timeout: float) -> Any:
    """Await a Ray ObjectRef or a coroutine with a timeout."""
    return await asyncio.wait_for(_as_awaitable(ref), timeout)


def _as_awaitable(x: Any):
    if asyncio.iscoroutine(x) or isinstance(x, asyncio.Future):
        return x
    return asyncio.wrap_future(x.future()) if hasattr(x, "future") else x


class RolloutCoordinator:
    """Runs groups of trajectories over env slots and inference workers.

    env_slots: (env_worker, slot_index) pairs; env_worker has `reset(slot, seed, options)` and
      `step(slot, action)`, each returning an `EnvStepResult` (webrl.envs.worker), either as
      Ray actor handles (`.remote`) or plain objects with async methods.
    inference: handles with `act_one(request)` -> (Decision, version) (Ray or plain async).
    on_trajectory(traj): called once per finished trajectory in a thread of the loop's default
      executor (a log's encoding and writing must not stall the other trajectories); an int it
      returns is added to `RolloutStats.log_bytes` (`TrajectoryLog` returns the bytes it wrote).
    seed: the run's seed; member m of group g samples with `derive_seed(seed, g, m)` (its turn t
      with a sub-seed of that, `webrl.policy.seeds`), a retry as the first attempt did. None:
      unseeded (the engine's RNG).
    """

    def __init__(self, env_slots: Sequence[tuple[Any, int]], inference: Sequence[Any],
                 config: RolloutConfig, on_trajectory: Optional[Callable[[Trajectory], Any]] = None,
                 progress: Optional[Callable[[RolloutStats, int], None]] = None, seed: Optional[int] = None):
        if not env_slots or not inference:
            raise ValueError("RolloutCoordinator needs at least one env slot and one inference worker")
        self.env_slots, self.inference, self.config = list(env_slots), list(inference), config
        self.on_trajectory, self.progress, self.seed = on_trajectory, progress, seed
        self._next_inference = itertools.cycle(range(len(self.inference)))

    # -- one call per batch ----------------------------------------------------------------
    def collect(self, tasks: Sequence[Any], iteration: int = 0, group_sizes: Optional[Sequence[int]] = None,
                first_group: int = 0, group_prefix: Optional[str] = None) -> tuple[list[Trajectory], RolloutStats]:
        """G trajectories for every task (or group_sizes[i] for task i); returns them grouped in
        task order, plus stats. Task i's group id is "{iteration}:{first_group + i}:{task id}"
        (a later collection of the same iteration, e.g. a dynamic-sampling round, numbers on);
        `group_prefix` replaces the iteration there, so collections of different iterations
        sample with the same seeds (the sampled evaluation's common random numbers)."""
        return run_coroutine(self.collect_async(tasks, iteration, group_sizes, first_group, group_prefix))

    async def collect_async(self, tasks: Sequence[Any], iteration: int = 0,
                            group_sizes: Optional[Sequence[int]] = None, first_group: int = 0,
                            group_prefix: Optional[str] = None) -> tuple[list[Trajectory], RolloutStats]:
        sizes = [self.config.group_size] * len(tasks) if group_sizes is None else [int(n) for n in group_sizes]
        if len(sizes) != len(tasks) or any(n < 1 for n in sizes):
            raise ValueError(f"collect needs one group size >= 1 per task, got {list(sizes)} for {len(tasks)} tasks")
        stats, start = RolloutStats(), time.monotonic()
        slots = self.slot_queue()
        max_turns = self.config.horizon(iteration)
        total = sum(sizes)
        prefix = iteration if group_prefix is None else group_prefix
        groups = await asyncio.gather(*(self.run_group(task, f"{prefix}:{first_group + i}:{task.spec.id}", max_turns,
                                                       slots, stats, total, start, size)
                                        for i, (task, size) in enumerate(zip(tasks, sizes))))
        stats.wall_s = time.monotonic() - start
        return [traj for group in groups for traj in group], stats

    def slot_queue(self) -> asyncio.Queue:
        """The free env slots, as a queue of the running loop (one per collection loop)."""
        slots: asyncio.Queue = asyncio.Queue()
        for s in self.env_slots:
            slots.put_nowait(s)
        return slots

    async def run_group(self, task: Any, group_id: str, max_turns: int, slots: asyncio.Queue,
                        stats: RolloutStats, total: int = 0, start: Optional[float] = None,
                        size: Optional[int] = None) -> list[Trajectory]:
        """The G (or `size`) trajectories of one task, each on its own (complete when all finish or drop)."""
        start = time.monotonic() if start is None else start
        return list(await asyncio.gather(*(self._trajectory(task, group_id, member, max_turns, slots, stats, total,
                                                            start)
                                           for member in range(self.config.group_size if size is None else size))))

    # -- one trajectory, retried on infrastructure errors ----------------------------------
    async def _trajectory(self, task: Any, group_id: str, member: int, max_turns: int, slots: asyncio.Queue,
                          stats: RolloutStats, total: int, start: float) -> Trajectory:
        reason, limit_s = "", self.config.trajectory_timeout(max_turns)
        for attempt in range(self.config.max_retries + 1):
            slot = await slots.get()
            try:
                traj = await asyncio.wait_for(self._episode(task, group_id, member, max_turns, slot, stats), limit_s)
                traj.info.attempts = attempt + 1
                break
            except asyncio.TimeoutError:
                c = self.config
                reason = (f"timeout: trajectory over {limit_s:g}s, an env call over {c.step_timeout_s}s or "
                          f"an inference call over {c.inference_timeout_s}s (rollout.*_timeout_s)")
            except EpisodeInfraError as e:
                reason = str(e)
            except Exception as e:  # a dead actor or a transport error: the env side failed
                cause = env_error_cause(e)
                reason = f"{type(cause).__name__}: {cause}"
                if isinstance(cause, NOT_RETRIED):
                    traj = Trajectory(task_id=task.spec.id, group_id=group_id, goal=task.spec.goal,
                                      info=TrajectoryInfo(attempts=attempt + 1))
                    traj.drop(f"env error in task {task.spec.id!r} (not retried: retrying cannot fix it): {reason}")
                    break
            finally:
                slots.put_nowait(slot)
            if attempt < self.config.max_retries:
                stats.retries += 1
                await asyncio.sleep(self.config.retry_backoff_s * 2 ** attempt)
        else:
            traj = Trajectory(task_id=task.spec.id, group_id=group_id, goal=task.spec.goal,
                              info=TrajectoryInfo(attempts=self.config.max_retries + 1))
            traj.drop(f"infrastructure error after {self.config.max_retries + 1} attempts: {reason}")
        stats.trajectories += 1
        stats.dropped += traj.status == "dropped"
        stats.successes += traj.status == "ok" and (traj.info.task_reward or 0) > 0
        stats.wall_s = time.monotonic() - start
        if self.on_trajectory:  # off the event loop: encoding and writing images must not stall other trajectories
            written = await asyncio.get_running_loop().run_in_executor(None, self.on_trajectory, traj)
            stats.log_bytes += written if isinstance(written, int) else 0
        if self.progress and total:  # total 0: the caller reports progress (AsyncCollector)
            self.progress(stats, total)
        return traj

    def episode_spec(self, task: Any, group_id: str, max_turns: int, member: int = 0, **overrides: Any) -> EpisodeSpec:
        """The `EpisodeSpec` of a rollout trajectory under this coordinator's config (its sampling
        seed from the run's seed, the group id and the member)."""
        c = self.config
        seed = None if self.seed is None else derive_seed(self.seed, group_id, member)
        fields = dict(task=task, group_id=group_id, member=member, seed=seed, max_turns=max_turns, screenshot=c.screenshot,
                      keep_history_images=c.keep_history_images, stop_after_parse_failures=c.stop_after_parse_failures)
        return EpisodeSpec(**{**fields, **overrides})

    async def episode(self, spec: EpisodeSpec, slot: tuple[Any, int], stats: Optional[RolloutStats] = None) -> Episode:
        """Run one episode (`webrl.rollout.episode`) on `slot`, deciding with the inference workers;
        env calls under `step_timeout_s`. Adds its env and inference time to `stats`."""
        worker, index = slot
        episode = await run_episode_async(spec, slot_env_call(self.call, worker, index), self.decide)
        if stats is not None:
            stats.env_time_s += episode.env_time_s
            stats.inference_time_s += episode.decide_time_s
            stats.env_steps += episode.env_steps
            stats.prompt_tokens += episode.prompt_tokens
            stats.cached_tokens += episode.cached_tokens
        return episode

    async def decide(self, call: Decide | PolicyRequest) -> tuple[Any, int]:
        """(decision, policy version) for a request, from the next inference worker (round robin),
        under `inference_timeout_s`."""
        request = call.request if isinstance(call, Decide) else call
        inference = self.inference[next(self._next_inference)]
        return await self.call(inference, "act_one", request, timeout=self.config.inference_timeout_s)

    async def _episode(self, task: Any, group_id: str, member: int, max_turns: int, slot: tuple[Any, int],
                       stats: RolloutStats) -> Trajectory:
        episode = await self.episode(self.episode_spec(task, group_id, max_turns, member), slot, stats)
        return episode.trajectory

    async def call(self, target: Any, method: str, *args: Any, timeout: Optional[float] = None) -> Any:
        """`target.method(*args)` (a Ray actor or a local object), under `timeout` (default: the step timeout)."""
        fn = getattr(target, method)
        call = fn.remote(*args) if hasattr(fn, "remote") else fn(*args)
        return await _await(call, self.config.step_timeout_s if timeout is None else timeout)

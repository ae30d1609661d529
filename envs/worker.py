"""`EnvWorker`: N environment slots on one or more Chromiums, and its thin Ray actor shell.

Each slot is a `WebEnv` with its own BrowserContext (isolated cookies and storage; kept across
episodes and scrubbed in between, `webrl.envs.context_pool`).
Observations leave the worker with the screenshot as PNG bytes (`obs["screenshot"]`), never as
a pickled array: a 1280x1000 RGB array is 3.8 MB, its PNG tens of kB.

Concurrency: the slots are split round-robin over `config.browser_groups` browser groups (slot i
in group i % groups). A group is one thread with its own sync-Playwright driver and its own
`BrowserSession` (one Chromium); its slots' calls run on that thread only, because sync
Playwright objects may only be used from the thread that made them. Calls for slots of
different groups run at the same time; calls for slots of one group queue on its thread.
With threads=1 nothing changes from a single-threaded worker: one Chromium, and calls run
inline on the caller's thread (tests may then touch `worker.envs[i].page` directly).

Why threads and not async Playwright: `WebEnv` (actions, readiness waits, the watchdog, tasks'
`setup/reward/solve` hooks written by users) is sync Playwright code; an async worker would need
all of it written twice. A step is mostly waiting on Chromium (IPC, page loads, server time),
during which the GIL is free, so threads overlap exactly what is slow. The price is one
Chromium browser process per group (its renderers are per context either way; measured about
190 MB PSS per further group, benchmarks/results/env_concurrency_2026-12-01), hence
`threads=0` (the default) starts one browser per slot only up to `AUTO_THREADS` (4), and a
worker with many slots sets it (e.g. the 4B preset's 30 slots on 10 browsers, or a divisor of
num_slots to share browsers between slots). `config.browser_groups` is the number started.

The Ray shell is `ray.remote(...)(EnvWorker)` with `max_concurrency=1` when threads=1 (all
calls on one thread, as sync Playwright needs) and `num_slots + 1` otherwise (every slot's call
can wait on its group's thread at once, and a ping still gets through); `max_restarts` brings a
dead worker back with fresh browsers (calls in flight fail with RayActorError and the caller
decides what to retry). A dead Chromium in one group ends that group's running episodes with
`info["infra_error"]` and is relaunched; other groups' episodes go on.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union

import numpy as np

from webrl.actions import Action
from webrl.envs.browser import BrowserSession, InfraError
from webrl.envs.config import PNG_COMPRESS_LEVEL, EnvWorkerConfig, WebEnvConfig
from webrl.envs.observation import SOM_OVERLAY, blank_observation, encode_png
from webrl.envs.task import TaskSource
from webrl.envs.web_env import WebEnv


@dataclass
class EnvStepResult:
    """What a worker returns for one reset or step of one slot.

    observation: the env's obs dict, except "screenshot" is PNG bytes (Set-of-Mark boxes drawn).
    reward / terminated / truncated: as Gymnasium returns them (reset: 0.0, False, False).
    info: the env's info ("elements", "task_id", "infra_error", ...).
    """

    slot: int
    observation: dict[str, Any]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class _BrowserGroup:
    """One thread's sync Playwright + BrowserSession; every call on its objects goes through `run`.

    inline=True runs calls on the caller's thread (the threads=1 worker); otherwise the group owns
    a one-thread executor, so whoever calls `run`, Playwright sees one thread.
    """

    def __init__(self, index: int, inline: bool):
        self.index = index
        self.session: Optional[BrowserSession] = None
        self._executor = None if inline else ThreadPoolExecutor(1, thread_name_prefix=f"webrl-env-group{index}")

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._executor is None:
            return fn(*args, **kwargs)
        return self._executor.submit(fn, *args, **kwargs).result()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A future for `fn(*args)` on the group's thread (inline groups run it now)."""
        if self._executor is None:
            future: Future = Future()
            try:
                future.set_result(fn(*args))
            except BaseException as error:  # delivered by .result(), like an executor's future
                future.set_exception(error)
            return future
        return self._executor.submit(fn, *args)

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)


class EnvWorker:
    """N `WebEnv` slots over `threads` browsers; reset/step address a slot. Plain class (tests use it).

    include_raw_screenshot: also return info["raw_screenshot_png"] (the screenshot without
    Set-of-Mark boxes; a run sets it when `rollout.screenshot=raw`). env_config: the slots'
    `WebEnvConfig` in place of `config.web_env_config()`, for settings the run config does not
    carry (Chromium `extra_args`: benchmarks cap the JS heap).
    """

    def __init__(self, config: Union[EnvWorkerConfig, Mapping[str, Any], None] = None,
                 tasks: Optional[TaskSource] = None, *, include_raw_screenshot: bool = False,
                 env_config: Optional[WebEnvConfig] = None):
        config = as_worker_config(config)
        self.config = config
        self.env_config = env_config if env_config is not None else config.web_env_config()
        self.include_raw_screenshot = include_raw_screenshot
        groups = config.browser_groups
        self.groups = [_BrowserGroup(g, inline=groups == 1) for g in range(groups)]
        self.envs: list[WebEnv] = [None] * config.num_slots  # type: ignore[list-item]
        # groups start their browsers at the same time, each on its own thread
        futures = [group.submit(self._start_group, group, tasks) for group in self.groups]
        errors = [f.exception() for f in futures]
        if any(errors):
            self.close()
            raise next(e for e in errors if e is not None)

    def _start_group(self, group: _BrowserGroup, tasks: Optional[TaskSource]) -> None:
        """On the group's thread: its browser, then its slots' envs."""
        group.session = BrowserSession(self.env_config.browser)
        group.session.start()
        for slot in range(group.index, self.config.num_slots, len(self.groups)):
            self.envs[slot] = WebEnv(self.env_config, tasks=tasks, session=group.session)

    @property
    def num_slots(self) -> int:
        return len(self.envs)

    @property
    def session(self) -> BrowserSession:
        """The first group's browser (the only one with threads=1)."""
        assert self.groups[0].session is not None
        return self.groups[0].session

    @property
    def sessions(self) -> list[BrowserSession]:
        """Every group's browser, group order (slot i uses sessions[i % threads])."""
        return [g.session for g in self.groups if g.session is not None]

    def reset(self, slot: int, seed: Optional[int] = None,
              options: Optional[dict[str, Any]] = None) -> EnvStepResult:
        """Start an episode in `slot`. A reset that fails twice comes back truncated with
        info["infra_error"] instead of raising, so one bad task cannot kill the worker."""
        return self._group(slot).run(self._reset, slot, seed, options)

    def step(self, slot: int, action: Union[Action, str]) -> EnvStepResult:
        return self._group(slot).run(self._step, slot, action)

    def timings(self, slot: int) -> dict[str, float]:
        """The slot's last reset/step wall time in seconds."""
        return dict(self._env(slot).last_timings)

    def ping(self) -> bool:
        """Every group's browser is running."""
        return all(g.run(g.session.is_alive) for g in self.groups if g.session is not None)

    def close(self) -> None:
        """Close every group's envs and browser; a group that fails to close does not keep the
        others open (the first error is raised once all are done)."""
        first: Optional[BaseException] = None
        for group in self.groups:
            try:
                group.run(self._close_group, group)
            except Exception as e:  # a dying driver: still shut the other groups down
                first = first or e
            finally:
                group.shutdown()
        if first is not None:
            raise first

    def _close_group(self, group: _BrowserGroup) -> None:
        for slot in range(group.index, len(self.envs), len(self.groups)):
            if self.envs[slot] is not None:
                self.envs[slot].close()
        if group.session is not None:
            group.session.close()

    # -- on the slot's group thread --------------------------------------------------------------
    def _reset(self, slot: int, seed: Optional[int], options: Optional[dict[str, Any]]) -> EnvStepResult:
        env = self.envs[slot]
        try:
            obs, info = env.reset(seed=seed, options=options)
        except InfraError as error:
            width, height = env.viewport
            obs = blank_observation(height, width, goal="", step=0, error=str(error))
            info = {"elements": [], "infra_error": f"reset_failed: {error}",
                    "truncation_reason": "infra_error", "task_id": "", "reward_details": {}, "action": None}
            return self._pack(slot, obs, 0.0, False, True, info)
        return self._pack(slot, obs, 0.0, False, False, info)

    def _step(self, slot: int, action: Union[Action, str]) -> EnvStepResult:
        obs, reward, terminated, truncated, info = self.envs[slot].step(action)
        return self._pack(slot, obs, reward, terminated, truncated, info)

    def _group(self, slot: int) -> _BrowserGroup:
        self._env(slot)  # range check
        return self.groups[slot % len(self.groups)]

    def _env(self, slot: int) -> WebEnv:
        if not 0 <= slot < len(self.envs):
            raise IndexError(f"slot {slot} out of range 0..{len(self.envs) - 1}")
        return self.envs[slot]

    def _pack(self, slot: int, obs: dict[str, Any], reward: float, terminated: bool,
              truncated: bool, info: dict[str, Any]) -> EnvStepResult:
        return pack_result(slot, obs, reward, terminated, truncated, info,
                           include_raw_screenshot=self.include_raw_screenshot)


def pack_result(slot: int, obs: dict[str, Any], reward: float, terminated: bool, truncated: bool,
                info: dict[str, Any], png_compress_level: int = PNG_COMPRESS_LEVEL,
                include_raw_screenshot: bool = False, som_overlay: bool = SOM_OVERLAY) -> EnvStepResult:
    """A `WebEnv`'s (obs, reward, terminated, truncated, info) as an `EnvStepResult`: the
    screenshot as PNG bytes (the raw PNG itself when no boxes are drawn on it), and
    info["raw_screenshot_png"] kept only with `include_raw_screenshot`."""
    observation = dict(obs)
    raw = info.get("raw_screenshot_png", b"")
    if raw and not som_overlay:
        observation["screenshot"] = raw  # identical pixels: skip re-encoding
    else:
        observation["screenshot"] = encode_png(np.ascontiguousarray(obs["screenshot"]), png_compress_level)
    info = dict(info)
    if not include_raw_screenshot:
        info.pop("raw_screenshot_png", None)
    return EnvStepResult(slot, observation, float(reward), bool(terminated), bool(truncated), info)


def actor_concurrency(config: EnvWorkerConfig) -> int:
    """Ray max_concurrency of the worker's shell: 1 for one inline browser, else a call per slot
    plus one (a call for one group's slot never waits on another group's; ping and close still
    queue on each group's thread behind its step in flight)."""
    return 1 if config.browser_groups == 1 else config.num_slots + 1


def as_worker_config(config: Union[EnvWorkerConfig, Mapping[str, Any], None]) -> EnvWorkerConfig:
    """An EnvWorkerConfig from itself, a flat mapping of its fields, or None (defaults)."""
    if config is None:
        return EnvWorkerConfig()
    if isinstance(config, Mapping):
        return EnvWorkerConfig(**dict(config))
    return config


def make_env_worker_actor(config: Union[EnvWorkerConfig, Mapping[str, Any], None] = None,
                          tasks: Optional[TaskSource] = None, *, num_cpus: float = 1.0,
                          max_restarts: int = 3, include_raw_screenshot: bool = False, **actor_options: Any) -> Any:
    """Start `EnvWorker` as a Ray actor (threaded, `actor_concurrency(config)` calls at once) and
    return its handle."""
    import ray

    config = as_worker_config(config)
    actor_class = ray.remote(num_cpus=num_cpus, max_restarts=max_restarts,
                             max_concurrency=actor_concurrency(config))(EnvWorker)
    if actor_options:
        actor_class = actor_class.options(**actor_options)
    return actor_class.remote(config, tasks, include_raw_screenshot=include_raw_screenshot)


"""`EnvWorker`: N environment slots on one Chromium, and its thin Ray actor shell.

Each slot is a `WebEnv` with its own BrowserContext per episode (isolated cookies and storage);
all slots share the worker's `BrowserSession`, so one process and one browser serve many envs.
Observations leave the worker with the screenshot as PNG bytes (`obs["screenshot"]`), never as
a pickled array: a 1280x1000 RGB array is 3.8 MB, its PNG tens of kB.

The Ray shell is `ray.remote(...)(EnvWorker)` with `max_concurrency=1` (sync Playwright must
stay on one thread) and `max_restarts` (a worker that dies comes back with a fresh browser;
calls that were in flight fail with RayActorError and the caller decides what to retry).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

import numpy as np

from webrl.actions import Action
from webrl.envs.browser import BrowserSession, InfraError
from webrl.envs.config import WebEnvConfig, as_config
from webrl.envs.observation import blank_observation, encode_png
from webrl.envs.task import TaskSource
from webrl.envs.web_env import WebEnv


@dataclass
class EnvWorkerConfig:
    """One worker process: how many env slots share its browser, and their env config."""

    num_slots: int = 4
    """Environments hosted on the worker's single Chromium."""
    env: WebEnvConfig = field(default_factory=WebEnvConfig)
    """Config of every slot."""
    png_compress_level: int = 1
    """zlib level for the screenshot PNG (1: fast; 6: a bit smaller, several times slower)."""
    include_raw_screenshot: bool = False
    """Also return info["raw_screenshot_png"] (the screenshot without Set-of-Mark boxes)."""

    def __post_init__(self) -> None:
        if not isinstance(self.env, WebEnvConfig):
            self.env = as_config(self.env)
        if not 1 <= self.num_slots <= 256:
            raise ValueError(f"EnvWorkerConfig.num_slots must be in 1..256, got {self.num_slots!r}")
        if not 0 <= self.png_compress_level <= 9:
            raise ValueError(f"EnvWorkerConfig.png_compress_level must be in 0..9, got {self.png_compress_level!r}")


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


class EnvWorker:
    """N `WebEnv` slots on one browser; reset/step address a slot. Plain class (tests use it)."""

    def __init__(self, config: Union[EnvWorkerConfig, Mapping[str, Any], None] = None,
                 tasks: Optional[TaskSource] = None):
        if config is None:
            config = EnvWorkerConfig()
        elif isinstance(config, Mapping):
            config = EnvWorkerConfig(**dict(config))
        self.config = config
        self.session = BrowserSession(config.env.browser)
        self.session.start()
        self.envs = [WebEnv(config.env, tasks=tasks, session=self.session)
                     for _ in range(config.num_slots)]

    @property
    def num_slots(self) -> int:
        return len(self.envs)

    def reset(self, slot: int, seed: Optional[int] = None,
              options: Optional[dict[str, Any]] = None) -> EnvStepResult:
        """Start an episode in `slot`. A reset that fails twice comes back truncated with
        info["infra_error"] instead of raising, so one bad task cannot kill the worker."""
        env = self._env(slot)
        try:
            obs, info = env.reset(seed=seed, options=options)
        except InfraError as error:
            width, height = env.viewport
            obs = blank_observation(height, width, goal="", step=0, error=str(error))
            info = {"elements": [], "infra_error": f"reset_failed: {error}",
                    "truncation_reason": "infra_error", "task_id": "", "reward_details": {}, "action": None}
            return self._pack(slot, obs, 0.0, False, True, info)
        return self._pack(slot, obs, 0.0, False, False, info)

    def step(self, slot: int, action: Union[Action, str]) -> EnvStepResult:
        obs, reward, terminated, truncated, info = self._env(slot).step(action)
        return self._pack(slot, obs, reward, terminated, truncated, info)

    def timings(self, slot: int) -> dict[str, float]:
        """The slot's last reset/step wall time in seconds."""
        return dict(self._env(slot).last_timings)

    def ping(self) -> bool:
        return self.session.is_alive()

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.session.close()

    def _env(self, slot: int) -> WebEnv:
        if not 0 <= slot < len(self.envs):
            raise IndexError(f"slot {slot} out of range 0..{len(self.envs) - 1}")
        return self.envs[slot]

    def _pack(self, slot: int, obs: dict[str, Any], reward: float, terminated: bool,
              truncated: bool, info: dict[str, Any]) -> EnvStepResult:
        observation = dict(obs)
        raw = info.get("raw_screenshot_png", b"")
        if raw and not self.config.env.observation.som_overlay:
            observation["screenshot"] = raw  # identical pixels: skip re-encoding
        else:
            observation["screenshot"] = encode_png(np.ascontiguousarray(obs["screenshot"]),
                                                   self.config.png_compress_level)
        info = dict(info)
        if not self.config.include_raw_screenshot:
            info.pop("raw_screenshot_png", None)
        return EnvStepResult(slot, observation, float(reward), bool(terminated), bool(truncated), info)


def make_env_worker_actor(config: Union[EnvWorkerConfig, Mapping[str, Any], None] = None,
                          tasks: Optional[TaskSource] = None, *, num_cpus: float = 1.0,
                          max_restarts: int = 3, **actor_options: Any) -> Any:
    """Start `EnvWorker` as a Ray actor (sync, max_concurrency=1) and return its handle."""
    import ray

    actor_class = ray.remote(num_cpus=num_cpus, max_restarts=max_restarts, max_concurrency=1)(EnvWorker)
    if actor_options:
        actor_class = actor_class.options(**actor_options)
    return actor_class.remote(config, tasks)

"""Env slots the episode runner's drivers step: `GymSlot` (an in-process Gymnasium `WebEnv`) and
`WorkerSlot` (one slot of an in-process `EnvWorker`) for `run_episode`, `slot_env_call` (a slot
of an `EnvWorker` handle, a Ray actor or a plain object) for `run_episode_async`. Each answers
`Reset` / `Step` with an `EnvStepResult`, exactly as an `EnvWorker` returns it."""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Union

from webrl.rollout.episode import Reset, Step


class GymSlot:
    """An in-process Gymnasium web env (`WebEnv`) as an episode's env: reset(task) / step(action)
    -> `EnvStepResult` with the screenshot as PNG bytes, exactly as an `EnvWorker` returns it."""

    def __init__(self, env: Any, png_compress_level: int = 1, include_raw_screenshot: bool = True):
        from webrl.envs.worker import pack_result

        self.env, self._pack = env, pack_result
        self.png_compress_level, self.include_raw_screenshot = png_compress_level, include_raw_screenshot

    def reset(self, task: Any) -> Any:
        obs, info = self.env.reset(options={"task": task})
        return self._pack(0, obs, 0.0, False, False, info, self.png_compress_level, self.include_raw_screenshot)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._pack(0, obs, reward, terminated, truncated, info, self.png_compress_level,
                          self.include_raw_screenshot)


class WorkerSlot:
    """Slot `index` of an in-process `EnvWorker` as an episode's env."""

    def __init__(self, worker: Any, index: int):
        self.worker, self.index = worker, index

    def reset(self, task: Any) -> Any:
        return self.worker.reset(self.index, None, {"task": task})

    def step(self, action: Any) -> Any:
        return self.worker.step(self.index, action)


def slot_env_call(call_target: Callable[..., Awaitable[Any]], worker: Any, index: int):
    """`run_episode_async`'s env for slot `index` of an `EnvWorker` handle (a Ray actor or a
    plain object with async methods), each call through `call_target(worker, method, *args)`."""
    async def env_call(call: Union[Reset, Step]) -> Any:
        if isinstance(call, Reset):
            return await call_target(worker, "reset", index, None, {"task": call.task})
        return await call_target(worker, "step", index, call.action)
    return env_call

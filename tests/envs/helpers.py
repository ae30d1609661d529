"""Shared helpers for the envs tests (not a fixture plugin: plain functions)."""
from __future__ import annotations

from typing import Any, Optional

from webrl.envs import BaseTask, TaskSpec, WebEnv, WebEnvConfig
from webrl.envs.task import TaskReward

# Small viewport keeps screenshots cheap; 800x600 is the "cpu" preset.
VIEWPORT_W, VIEWPORT_H = 800, 600


def small_config(**safety: Any) -> WebEnvConfig:
    return WebEnvConfig.from_dict({"browser": {"viewport": "cpu"}, "safety": safety})


def make_env(session, **safety: Any) -> WebEnv:
    return WebEnv(small_config(**safety), session=session)


def spec(server, page: str = "basic.html", goal: str = "test goal", **kwargs: Any) -> TaskSpec:
    return TaskSpec(id=f"test/{page}", goal=goal, start_url=server.url(page), **kwargs)


def element_id(info: dict, dom_id: str) -> int:
    """The Set-of-Mark id of the element whose id attribute is `dom_id`."""
    matches = [e["id"] for e in info["elements"] if e["dom_id"] == dom_id]
    assert len(matches) == 1, f"{dom_id!r} found {len(matches)} times in {info['elements']}"
    return matches[0]


def center(info: dict, dom_id: str) -> tuple[int, int]:
    x, y, w, h = info["elements"][element_id(info, dom_id)]["bbox"]
    return x + w // 2, y + h // 2


class ClickTask(BaseTask):
    """Reward 1 once #out says "clicked 1"; `done` when it does (exercises the done hook)."""

    def _text(self, page: Any) -> str:
        return page.inner_text("#out")

    def done(self, page: Any) -> bool:
        return self._text(page) == "clicked 1"

    def reward(self, page: Any, answer: Optional[str]) -> TaskReward:
        text = self._text(page)
        return TaskReward(1.0 if text == "clicked 1" else 0.0, {"out": text})

"""The live-web env `webrl/LiveWeb-v0`: one goal on a real website, which only a judge can score.

`make_live_web_env` is its Gymnasium entry point (`webrl.envs.registry`): a `WebEnv` that always
runs the same `LiveWebTask`. Live-web task files (Online-Mind2Web, WebVoyager, DeepShop) load
with `webrl.envs.loaders`. A live site pulls stylesheets, scripts and images from CDNs on hosts
its allowed domains do not name, so a live-web env runs under LIVE_WEB_SUBRESOURCE_POLICY
("public": subresources from any public host, nothing from an internal address) unless its config
sets a policy itself.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from webrl.envs.browser import BrowserSession
from webrl.envs.task import FixedTaskSource, LiveWebTask, TaskSpec
from webrl.envs.web_env import WebEnv

LIVE_WEB_SUBRESOURCE_POLICY = "public"


def make_live_web_env(goal: str, start_url: str, allowed_domains: tuple[str, ...] = (),
                      max_steps: int = 15, task_id: str = "liveweb", config: Any = None,
                      session: Optional[BrowserSession] = None, render_mode: Optional[str] = None) -> WebEnv:
    """Entry point of `webrl/LiveWeb-v0`: one live-web goal starting at `start_url`. A config given
    as a dict (or none) runs under the live-web network policy (`safety.subresource_policy=
    "public"`: subresources from public hosts, nothing internal) unless it sets a policy itself."""
    if config is None or isinstance(config, Mapping):
        config = dict(config or {})
        safety = dict(config.get("safety") or {})
        safety.setdefault("subresource_policy", LIVE_WEB_SUBRESOURCE_POLICY)
        config["safety"] = safety
    spec = TaskSpec(id=task_id, goal=goal, start_url=start_url, allowed_domains=tuple(allowed_domains),
                    max_steps=max_steps, site="liveweb")
    return WebEnv(config=config, tasks=FixedTaskSource(LiveWebTask(spec)), session=session,
                  render_mode=render_mode)

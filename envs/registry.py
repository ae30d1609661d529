"""Environment registration: Gymnasium ids and Ray Tune's env registry, one `make_env` for both.

`register_envs()` registers `webrl/LiveWeb-v0` in Gymnasium (idempotent). A user's own site is
registered either way:

    gymnasium.register("mysite/Checkout-v0", entry_point=..., kwargs=...)
    ray.tune.registry.register_env("mysite-checkout", lambda env_config: MyEnv(**env_config))

and `make_env(name, config)` builds it: Ray Tune's registry is consulted first (its creators
take one `env_config` mapping), then Gymnasium's (`config` becomes keyword arguments of
`gymnasium.make`). Ray is only imported when it is already loaded or the id is not a Gymnasium
one, so plain Gymnasium users do not pay Ray's import time.
"""
from __future__ import annotations

import sys
from typing import Any, Mapping, Optional

import gymnasium

LIVE_WEB_ID = "webrl/LiveWeb-v0"


def register_envs() -> list[str]:
    """Register the envs this module owns in Gymnasium; returns their ids."""
    if LIVE_WEB_ID not in gymnasium.registry:
        gymnasium.register(id=LIVE_WEB_ID, entry_point="webrl.envs.live_web:make_live_web_env",
                           nondeterministic=False)
    return [LIVE_WEB_ID]


def _ray_creator(name: str, force_import: bool) -> Optional[Any]:
    if not force_import and "ray.tune" not in sys.modules:
        return None
    try:
        from ray.tune.registry import ENV_CREATOR, _global_registry
    except ImportError:
        return None
    if _global_registry.contains(ENV_CREATOR, name):
        return _global_registry.get(ENV_CREATOR, name)
    return None


def make_env(name: str, config: Optional[Mapping[str, Any]] = None) -> gymnasium.Env:
    """Build env `name` from Ray Tune's registry or Gymnasium's; `config` is its settings.

    Ray creators receive `config` as their `env_config` dict; Gymnasium ids receive it as
    keyword arguments (`make_env("webrl/LiveWeb-v0", {"goal": ..., "start_url": ...})`).
    Raises KeyError naming both registries when `name` is in neither.
    """
    config = dict(config or {})
    creator = _ray_creator(name, force_import=name not in gymnasium.registry)
    if creator is not None:
        return creator(config)
    if name in gymnasium.registry:
        return gymnasium.make(name, **config)
    raise KeyError(f"no environment {name!r} in Ray Tune's registry (ray.tune.registry.register_env) "
                   f"or Gymnasium's (gymnasium.register); webrl ids start with 'webrl/'")

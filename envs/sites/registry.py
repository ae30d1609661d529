"""Gymnasium ids of the sandbox sites: `WebEnv` with a `SandboxTaskSource` as `tasks`.

    webrl/Shop-v0  webrl/Travel-v0  webrl/Wiki-v0  webrl/Widgets-v0   one site, every level
    webrl/Sandbox-v0                                                  all four sites

Difficulty (and split, sites) are options of the task source, so any id can be narrowed:

    gymnasium.make("webrl/Sandbox-v0", tasks=SandboxTaskSource(levels=(0,), split="test"))

`register_site_envs()` is idempotent; the lead's `webrl.envs` import calls it.
"""
from __future__ import annotations

from webrl.envs.sites.source import SITE_NAMES, SandboxTaskSource

WEB_ENV_ENTRY_POINT = "webrl.envs.web_env:WebEnv"
SITE_ENV_IDS = {"shop": "webrl/Shop-v0", "travel": "webrl/Travel-v0", "wiki": "webrl/Wiki-v0",
                "widgets": "webrl/Widgets-v0"}
SANDBOX_ENV_ID = "webrl/Sandbox-v0"


def register_site_envs() -> list[str]:
    """Register the five ids in Gymnasium (once); returns them."""
    import gymnasium

    sources = {env_id: SandboxTaskSource(sites=(site,)) for site, env_id in SITE_ENV_IDS.items()}
    sources[SANDBOX_ENV_ID] = SandboxTaskSource(sites=SITE_NAMES)
    for env_id, source in sources.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=WEB_ENV_ENTRY_POINT, kwargs={"tasks": source})
    return list(sources)

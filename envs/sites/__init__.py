"""The sandbox web suite: four local websites (Shop, Travel, Wiki, Widgets) with task
generators, server-side checkers and oracle solvers, served in-process by one threaded WSGI
server on 127.0.0.1.

    from webrl.envs.sites import SandboxTaskSource, make_task, register_site_envs
    task = make_task("shop", level=2, split="train", seed=7)   # a `Task` (envs/task.py)

Modules: server.py (Flask app, lazy per-process server, session cookie), state.py (per-episode
server state), common.py (matching, oracle look-ups, `SiteTask`), source.py (task sampling),
registry.py (Gymnasium ids), demos.py (oracle rollouts), cli.py (`webrl sites`, `webrl demos`);
one subpackage per site with its app, data generator, tasks and templates.
"""
from webrl.envs.sites.common import SiteTask
from webrl.envs.sites.source import SITE_NAMES, SandboxTaskSource, make_task

__all__ = ["SITE_NAMES", "SandboxTaskSource", "SiteTask", "make_task", "register_site_envs"]


def register_site_envs() -> list[str]:
    from webrl.envs.sites.registry import register_site_envs as register

    return register()

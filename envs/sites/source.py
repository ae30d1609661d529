"""Task generation across the four sites: `make_task` (deterministic from site, level, split
and seed) and `SandboxTaskSource`, the `TaskSource` the registered envs draw from.

A seed fixes everything: the generator's choices (target, variant, wording) and the
per-episode page variations (`SessionState.seed`: featured order, widget layout). The world
(catalogue, flights, articles) is fixed; train and test tasks use disjoint entities of it.
"""
from __future__ import annotations

import importlib
import random
from dataclasses import dataclass
from typing import Any, Sequence

from webrl.envs.sites.common import LEVELS, MAX_STEPS, SPLITS, SiteTask
from webrl.envs.task import TaskSpec

SITE_NAMES = ("shop", "travel", "wiki", "widgets")
PLACEHOLDER_BASE = "http://127.0.0.1"


def site_module(site: str):
    if site not in SITE_NAMES:
        raise ValueError(f"site must be one of {SITE_NAMES}, got {site!r}")
    return importlib.import_module(f"webrl.envs.sites.{site}.tasks")


def base_url(start_server: bool) -> str:
    """The sites' base URL; without starting the server a placeholder (SiteTask.setup fixes
    the host:port in the process that runs the episode)."""
    if not start_server:
        return PLACEHOLDER_BASE
    from webrl.envs.sites.server import ensure_server

    return ensure_server()


def make_task(site: str, level: int, split: str, seed: int, start_server: bool = True) -> SiteTask:
    """One task instance; the same arguments always give the same task."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    module = site_module(site)
    rng = random.Random(f"{site}:{level}:{split}:{seed}")
    generator = rng.choice(module.GENERATORS[level])
    goal, start_path, params = generator(rng, split, seed)
    spec = TaskSpec(id=f"{site}/l{level}/{split}/{params['kind']}/{seed}", goal=goal,
                    start_url=base_url(start_server) + start_path, max_steps=MAX_STEPS[level],
                    site=site, level=level, split=split, params=params)
    return SiteTask(spec, seed, module.CHECKERS, module.ORACLES)


@dataclass
class SandboxTaskSource:
    """Draws sandbox tasks: a site and a level uniformly from the lists, a seed from the rng."""

    sites: Sequence[str] = SITE_NAMES
    """Sites to draw from; any of "shop", "travel", "wiki", "widgets"."""
    levels: Sequence[int] = LEVELS
    """Difficulty levels to draw from: 0 (one step), 1 (2-4 steps), 2 (5-15 steps)."""
    split: str = "train"
    """"train" or "test": test tasks use entities (products, cities, articles, labels) never
    used by train tasks."""
    start_server: bool = True
    """Start the sites' server when sampling (False: placeholder URL, fixed at setup)."""

    def __post_init__(self) -> None:
        self.sites = tuple(self.sites)
        self.levels = tuple(int(x) for x in self.levels)
        bad = [s for s in self.sites if s not in SITE_NAMES]
        if not self.sites or bad:
            raise ValueError(f"SandboxTaskSource.sites must be a non-empty subset of {SITE_NAMES}, got {self.sites!r}")
        if not self.levels or any(lv not in LEVELS for lv in self.levels):
            raise ValueError(f"SandboxTaskSource.levels must be a non-empty subset of {LEVELS}, got {self.levels!r}")
        if self.split not in SPLITS:
            raise ValueError(f"SandboxTaskSource.split must be one of {SPLITS}, got {self.split!r}")

    def sample(self, rng: Any) -> SiteTask:
        site = self.sites[int(rng.integers(len(self.sites)))]
        level = self.levels[int(rng.integers(len(self.levels)))]
        return make_task(site, level, self.split, int(rng.integers(2**31 - 1)), self.start_server)

"""Task generation across the four sites: `make_task` (deterministic from site, level, split
and seed) and `SandboxTaskSource`, the `TaskSource` the registered envs draw from.

A seed fixes everything: the generator's choices (target, variant, wording) and the
per-episode page variations (`SessionState.seed`: featured order, widget layout). The world
(catalogue, flights, articles) is fixed; train and test tasks use disjoint entities of it.
"""
from __future__ import annotations

import functools
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
    kinds: Sequence[str] = ()
    """Task kinds to keep (`spec.params["kind"]`, e.g. "click_button"); empty = every kind.
    A draw of another kind is skipped and the site, level and seed are drawn again."""

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
        self.kinds = tuple(self.kinds)
        if self.kinds:
            available = task_kinds(self.sites, self.levels)
            unknown = [k for k in self.kinds if k not in available]
            if unknown:
                raise ValueError(f"SandboxTaskSource.kinds: {unknown} are not kinds of sites {self.sites} "
                                 f"at levels {self.levels}; they have {available}")

    def sample(self, rng: Any) -> SiteTask:
        for _ in range(MAX_DRAWS):
            site = self.sites[int(rng.integers(len(self.sites)))]
            level = self.levels[int(rng.integers(len(self.levels)))]
            task = make_task(site, level, self.split, int(rng.integers(2**31 - 1)), self.start_server)
            if not self.kinds or task.spec.params["kind"] in self.kinds:
                return task
        raise RuntimeError(f"no task of kinds {self.kinds} in {MAX_DRAWS} draws from {self.sites} levels {self.levels}")


MAX_DRAWS = 10_000  # kinds are checked to exist (task_kinds), so this only bounds a very rare kind
PROBE_SEEDS = 300  # seeds per site and level that task_kinds looks at


def task_kinds(sites: Sequence[str] = SITE_NAMES, levels: Sequence[int] = LEVELS) -> list[str]:
    """The task kinds the generators of `sites` at `levels` produce (found by generating the
    train tasks of PROBE_SEEDS seeds each: every generator's kinds show up well within that)."""
    return sorted({kind for site in sites for level in levels for kind in _kinds_of(site, int(level))})


@functools.lru_cache(maxsize=None)
def _kinds_of(site: str, level: int) -> frozenset[str]:
    return frozenset(make_task(site, level, "train", seed, start_server=False).spec.params["kind"]
                     for seed in range(PROBE_SEEDS))

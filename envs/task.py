"""The `Task` protocol: what a web environment needs from a task, beside the generic browser shell.

A web env = generic browser shell (`WebEnv`) + a `Task`. The shell owns the browser, the
observation and action execution; the task owns the goal, where to start, what counts as
success, and optionally a scripted oracle that solves it from live observations.

Lifecycle inside one episode::

    task.prepare()                        # optional: in the env's process, before the start URL opens
    page.goto(task.entry_url())           # optional hook; without it spec.start_url is opened
    task.setup(page)                      # after the first page opens, before the first observation
    ... agent steps; each step the shell may ask task.oracle_action(obs) (demos, tests) ...
    reward = task.reward(page, answer)    # float in [0, 1], or None: needs a judge
    task.teardown(page)
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, runtime_checkable
from urllib.parse import urlparse

from webrl.actions import Action


@dataclass
class TaskSpec:
    """Static description of one task instance.

    id: unique, stable id (e.g. "shop/l1/train/00042").
    goal: the natural-language instruction shown to the agent.
    start_url: first page of the episode.
    allowed_domains: hosts (host or host:port) the episode may reach; empty = start_url's host.
    max_steps: episode truncates after this many agent steps.
    site / level / split: provenance for metrics ("shop", 0..2, "train"|"test").
    params: generator parameters, JSON-able (what the checker needs).
    """

    id: str
    goal: str
    start_url: str
    allowed_domains: tuple[str, ...] = ()
    max_steps: int = 15
    site: str = ""
    level: int = 0
    split: str = "train"
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.allowed_domains:
            host = urlparse(self.start_url).netloc
            self.allowed_domains = (host,) if host else ()
        self.allowed_domains = tuple(self.allowed_domains)


def origin(url: str) -> str:
    """The origin of a URL: "http://127.0.0.1:41234/a?b=1" -> "http://127.0.0.1:41234"."""
    parts = urlparse(url)
    return f"{parts.scheme}://{parts.netloc}"


@dataclass(frozen=True)
class OriginAlias:
    """Show `real` (an origin, "http://127.0.0.1:41234") as `shown` ("http://sandbox.test").

    Why: a local site server binds a free port, so without an alias the prompt's URL digits
    change from run to run, and with them a policy's greedy choice wherever two actions are
    close (measured: 2 of 48 sandbox tasks flipped between evaluations of the same weights).
    """

    real: str
    shown: str

    @classmethod
    def of(cls, url: str, shown: str) -> "OriginAlias":
        """Show the origin of `url` (its scheme and host:port) as `shown`."""
        return cls(real=origin(url), shown=shown)

    def show(self, text: str) -> str:
        """`text` with every occurrence of the real origin (not followed by another port
        digit) replaced by the shown one."""
        return re.sub(re.escape(self.real) + r"(?!\d)", lambda _: self.shown, text)

    def resolve(self, url: str) -> str:
        """A URL the agent typed: on the shown origin -> on the real one; anything else as is."""
        return re.sub("^" + re.escape(self.shown) + r"(?=[/?#]|$)", lambda _: self.real, url)


@runtime_checkable
class Task(Protocol):
    """What `WebEnv` calls. `page` is a Playwright sync `Page`."""

    spec: TaskSpec

    # Optional, not part of the protocol check: `prepare(self) -> None`, called in the process
    # that runs the episode before the browser opens `spec.start_url` (e.g. start a local site
    # server there and point the URL at it, for tasks built in another process).
    # Optional: `entry_url(self) -> str`, the URL the browser opens first instead of
    # `spec.start_url` (e.g. one that sets this episode's session cookie and redirects to the
    # start page, so the episode starts with one navigation). Must be on an allowed domain.
    # Optional: `url_alias(self) -> Optional[OriginAlias]`, asked after `prepare`: the episode's
    # observations show the alias's stable origin in place of the real one (a local server on a
    # free port), and URLs the agent types on the stable origin go to the real one.

    def setup(self, page: Any) -> None:
        """Prepare the episode (e.g. log in, reset server state, seed the page)."""

    def reward(self, page: Any, answer: Optional[str]) -> Optional[float]:
        """Score the final state: a float in [0, 1], or None when only a judge can tell."""

    def oracle_action(self, observation: dict[str, Any]) -> Optional[Action]:
        """Scripted solver: the next action from the live observation, or None if it has none."""

    def teardown(self, page: Any) -> None:
        """Release anything setup acquired."""


class BaseTask:
    """Convenience base with no-op hooks; subclasses override what they need."""

    def __init__(self, spec: TaskSpec):
        self.spec = spec

    def prepare(self) -> None:
        return None

    def setup(self, page: Any) -> None:
        return None

    def reward(self, page: Any, answer: Optional[str]) -> Optional[float]:
        return None

    def oracle_action(self, observation: dict[str, Any]) -> Optional[Action]:
        return None

    def teardown(self, page: Any) -> None:
        return None


@runtime_checkable
class TaskSource(Protocol):
    """Where an env gets its next task: `WebEnv.reset(seed=...)` calls `sample(rng)` unless
    `reset(options={"task": task})` hands one in. Sources must be picklable (Ray ships them)."""

    def sample(self, rng: Any) -> Task:
        """A task instance drawn with `rng` (a `numpy.random.Generator`)."""

"""The `Task` protocol: what a web environment needs from a task, beside the generic browser shell.

A web env = generic browser shell (`WebEnv`) + a `Task`. The shell owns the browser, the
observation and action execution; the task owns the goal, where to start, what counts as
success, and optionally a scripted oracle that solves it from live observations.

Lifecycle inside one episode (every hook is called, in this order; `BaseTask` has defaults)::

    task.prepare()                        # in the env's process, before the browser opens
    page.goto(task.entry_url())           # default: spec.start_url
    alias = task.url_alias()              # default None: observations show real URLs
    task.setup(page)                      # after the first page opens, before the first observation
    ... agent steps; after each, task.done(page) may end the episode (default False);
        the shell may ask task.oracle_action(obs) (demos, tests) ...
    result = task.reward(page, answer)    # TaskReward(value in [0, 1] or None = needs a judge, details)
    task.teardown(page)

Objects written against the older, smaller protocol (`spec`, `setup`, `reward`,
`oracle_action`, `teardown` only, `reward` returning a bare float or None) keep working:
`as_task` fills in the missing hooks with `BaseTask`'s defaults and `as_task_reward` wraps a
bare value with empty details. Anything else `reward` returns is a TypeError.

`LiveWebTask` (a goal on a live site, scored by a judge) and `FixedTaskSource` (the same task
every time) are what the live-web env runs (`webrl.envs.live_web`, `webrl.envs.loaders`).
"""
from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Protocol, runtime_checkable
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


@dataclass(frozen=True)
class TaskReward:
    """What `Task.reward` returns: the score of the final state and the checker's evidence.

    value: success in [0, 1], or None when only a judge can tell (a live website).
    details: JSON-able facts the checker read (cart lines, the page's raw reward, ...). The env
        puts a copy in the final step's `info["reward_details"]`; the rollout keeps that as
        `Trajectory.info.checker_details`.
    """

    value: Optional[float]
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        value = self.value
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"TaskReward.value must be a number in [0, 1] or None, got "
                                f"{type(value).__name__} {value!r}")
            if math.isnan(value) or not 0.0 <= value <= 1.0:
                raise ValueError(f"TaskReward.value must be in [0, 1] or None, got {value!r}")
            object.__setattr__(self, "value", float(value))
        if not isinstance(self.details, Mapping):
            raise TypeError(f"TaskReward.details must be a mapping, got {type(self.details).__name__}")
        object.__setattr__(self, "details", dict(self.details))


def as_task_reward(returned: Any, task_id: str = "") -> TaskReward:
    """What a task's `reward()` returned, as a `TaskReward`.

    A `TaskReward` passes through; a bare number or None (the older protocol) becomes
    `TaskReward(returned, {})`. Anything else is a TypeError naming the task and the type.
    """
    if isinstance(returned, TaskReward):
        return returned
    if returned is None or (isinstance(returned, numbers.Real) and not isinstance(returned, bool)):
        return TaskReward(returned)
    raise TypeError(f"task {task_id!r}: reward() must return a TaskReward (or a number in [0, 1], "
                    f"or None), got {type(returned).__name__} {returned!r}")


@runtime_checkable
class Task(Protocol):
    """What `WebEnv` calls, every hook on every episode. `page` is a Playwright sync `Page`."""

    spec: TaskSpec

    def prepare(self) -> None:
        """Called in the process that runs the episode before the browser opens anything (e.g.
        start a local site server there and point `spec.start_url` at it, for tasks built in
        another process)."""

    def entry_url(self) -> str:
        """The URL the browser opens first (e.g. one that sets this episode's session cookie
        and redirects to the start page, so the episode starts with one navigation). Must be
        on an allowed domain."""

    def url_alias(self) -> Optional[OriginAlias]:
        """Asked after `prepare`: observations show the alias's stable origin in place of the
        real one (a local server on a free port), and URLs the agent types on the stable
        origin go to the real one. None: URLs are shown as they are."""

    def setup(self, page: Any) -> None:
        """Prepare the episode once the first page is open (log in, reset server state, seed
        the page)."""

    def done(self, page: Any) -> bool:
        """Asked after every step that did not end the episode: True when the page has ended
        the task by itself (a MiniWoB++ page after its final click)."""

    def reward(self, page: Any, answer: Optional[str]) -> TaskReward:
        """Score the final state: `answer` is the agent's `answer(...)` text, None after
        `stop()` or `done()`."""

    def oracle_action(self, observation: dict[str, Any]) -> Optional[Action]:
        """Scripted solver: the next action from the live observation, or None if it has none."""

    def teardown(self, page: Any) -> None:
        """Release anything setup acquired. `page` is None when every tab is gone."""


class BaseTask:
    """The `Task` hooks with their default behaviour; subclasses override what they need."""

    def __init__(self, spec: TaskSpec):
        self.spec = spec

    def prepare(self) -> None:
        """Nothing to prepare."""
        return None

    def entry_url(self) -> str:
        """`spec.start_url`."""
        return self.spec.start_url

    def url_alias(self) -> Optional[OriginAlias]:
        """None: observations show real URLs."""
        return None

    def setup(self, page: Any) -> None:
        """Nothing to set up."""
        return None

    def done(self, page: Any) -> bool:
        """False: only the agent's `answer`/`stop` or the step limit end the episode."""
        return False

    def reward(self, page: Any, answer: Optional[str]) -> TaskReward:
        """`TaskReward(None)`: a judge has to score the episode."""
        return TaskReward(None)

    def oracle_action(self, observation: dict[str, Any]) -> Optional[Action]:
        """None: no scripted solver."""
        return None

    def teardown(self, page: Any) -> None:
        """Nothing to release."""
        return None


class LiveWebTask(BaseTask):
    """A goal on a live site: the agent starts at `start_url`; only a judge can score it."""

    def reward(self, page: Any, answer: Optional[str]) -> TaskReward:
        """`TaskReward(None)`: the page alone cannot tell whether a live-web goal was met."""
        return TaskReward(None)


# The older protocol's hooks; a task object must have these (and `spec`).
REQUIRED_HOOKS = ("setup", "reward", "oracle_action", "teardown")
OPTIONAL_HOOKS = ("prepare", "entry_url", "url_alias", "done")


class DefaultedTask(BaseTask):
    """A task object that lacks some optional hooks, completed with `BaseTask`'s defaults.

    `wrapped` is the user's object; `spec` is read through to it (its `prepare` may replace
    it), and every hook it has is called on it.
    """

    def __init__(self, wrapped: Any):
        self.wrapped = wrapped
        for name in REQUIRED_HOOKS + OPTIONAL_HOOKS:
            if hasattr(wrapped, name):
                setattr(self, name, getattr(wrapped, name))

    @property
    def spec(self) -> TaskSpec:  # type: ignore[override]
        return self.wrapped.spec

    def __repr__(self) -> str:
        return f"DefaultedTask({self.wrapped!r})"


def as_task(task: Any) -> Task:
    """`task` as a full `Task`: itself when it has every hook, else a `DefaultedTask` around it.

    TypeError naming what is missing when it lacks `spec` or a hook of the older protocol
    (`setup`, `reward`, `oracle_action`, `teardown`).
    """
    if isinstance(task, Task):
        return task
    missing = [name for name in ("spec",) + REQUIRED_HOOKS if not hasattr(task, name)]
    if missing:
        raise TypeError(f"a task must implement the Task protocol: {type(task).__name__} lacks "
                        f"{', '.join(missing)}")
    return DefaultedTask(task)


@runtime_checkable
class TaskSource(Protocol):
    """Where an env gets its next task: `WebEnv.reset(seed=...)` calls `sample(rng)` unless
    `reset(options={"task": task})` hands one in. Sources must be picklable (Ray ships them)."""

    def sample(self, rng: Any) -> Task:
        """A task instance drawn with `rng` (a `numpy.random.Generator`)."""


@dataclass
class FixedTaskSource:
    """A `TaskSource` that always hands out the same task (picklable)."""

    task: Any

    def sample(self, rng: Any) -> Any:
        return self.task


def draw_tasks(source: Any, rng: Any, n: int, in_order: bool = False) -> list:
    """`n` tasks from `source`; `in_order` takes a fixed list's first `n` (each once) when the
    source holds one (`.tasks`), so an evaluation on a tasks file covers distinct tasks."""
    fixed = getattr(source, "tasks", None)
    if in_order and isinstance(fixed, list):
        return list(fixed[:n])
    return [source.sample(rng) for _ in range(n)]


STREAMS = {"rl": 1, "eval": 2}


def task_rng(seed: int, stream: str, iteration: int = 0):
    """The generator of one draw stream: "rl" (iteration i's training tasks depend only on
    (seed, i), so a resumed run draws what an uninterrupted one would) or "eval" (the same
    held-out tasks at every evaluation)."""
    import numpy as np

    return np.random.default_rng([seed, STREAMS[stream], iteration])

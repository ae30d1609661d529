"""MiniWoB++ tasks for `WebEnv`: the PyPI `miniwob` package's HTML, served over local HTTP.

Each MiniWoB++ page carries its own task generator and checker in JavaScript (core/core.js).
A `MiniWoBTask` episode is::

    page.goto(http://127.0.0.1:<port>/miniwob/<name>.html)       # the shell, or setup if not there
    Math.seedrandom(seed); core.setDataMode(mode);
    core.EPISODE_MAX_TIME = ms; core.startEpisodeReal()        # setup: a seeded problem
    wait for WOB_TASK_READY; goal = core.getUtterance()
    ... agent acts; the page ends the episode itself (WOB_DONE_GLOBAL) on submit / final click
    reward = max(0, WOB_RAW_REWARD_GLOBAL)                      # reward()

Reward mapping (departs from MiniWoB's gym wrapper, which returns the time-discounted
`WOB_REWARD_GLOBAL` in [-1, 1]): webrl rewards are success in [0, 1], so we take the raw,
undiscounted reward and clip it at 0. A solved task gives 1, a wrong final answer or a JS-side
time-out (raw -1) gives 0, the few tasks with partial credit (flight forms, *-soft) keep their
fraction. An episode the page has not ended (agent stopped or ran out of steps) scores 0. The
time discount is dropped because step latency of a VLM policy is not the agent's skill; the
JS time limit (`episode_max_time_ms`) defaults to minutes, not MiniWoB's 10 s, for the same
reason. The raw values come along as the reward's details (`info["reward_details"]`).

Screen: the HUD MiniWoB draws for human players (last reward, average, countdown) is hidden by
default (`hide_human_display`), as BrowserGym does: it is not part of the task, it would show
the policy its reward history, and its countdown keeps the DOM changing every second.

Server: one `ThreadingHTTPServer` per process on 127.0.0.1 and a free port, started lazily
the first time a task needs a URL (so a `MiniWoBTaskSource` pickled into a Ray actor starts
its own server there). Flight tasks (`flight.AA`, ...) need http anyway.

Task list: the 125 standard tasks plus the 3 flight tasks the package registers in
Gymnasium (`miniwob/<name>-v1`); the 5 unregistered debug pages (button-delay, chase-circle,
hover-shape, moving-items, simon-says) are left out like upstream does.
"""
from __future__ import annotations

import functools
import json
import os
import threading
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional

from webrl.actions import Action
from webrl.envs.task import BaseTask, OriginAlias, TaskReward, TaskSpec

DATA_MODES = ("default", "train", "test")
ENV_ID_FORMAT = "webrl/miniwob.{}-v0"
WEB_ENV_ENTRY_POINT = "webrl.envs.web_env:WebEnv"


@dataclass
class MiniWoBConfig:
    """Settings shared by every MiniWoB++ task of a source."""

    max_steps: int = 15
    """Agent steps before the env truncates (MiniWoB tasks need 1-12 actions)."""
    episode_max_time_ms: int = 300_000
    """JS-side episode limit (core.EPISODE_MAX_TIME); when it runs out the page ends the
    episode with raw reward -1. MiniWoB's own default is 10 s, too short for a VLM policy."""
    data_mode: str = "default"
    """core.setDataMode: "default" | "train" | "test" (transfer / nl / flight tasks read it)."""
    ready_timeout_ms: int = 5_000
    """How long setup waits for WOB_TASK_READY (flight pages load an iframe first)."""
    hide_human_display: bool = True
    """Hide the HUD MiniWoB draws for human players beside the task (last reward, 10-episode
    average, countdown, click marks) and stop its once-a-second countdown updates: it leaks
    reward history into the screenshot and keeps the DOM changing. BrowserGym hides it too."""

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(f"MiniWoBConfig.max_steps must be >= 1, got {self.max_steps}")
        if self.episode_max_time_ms < 1_000:
            raise ValueError("MiniWoBConfig.episode_max_time_ms must be >= 1000 (ms), "
                             f"got {self.episode_max_time_ms}")
        if self.data_mode not in DATA_MODES:
            raise ValueError(f"MiniWoBConfig.data_mode must be one of {DATA_MODES}, got {self.data_mode!r}")
        if not isinstance(self.hide_human_display, bool):
            raise ValueError(f"MiniWoBConfig.hide_human_display must be True or False, got {self.hide_human_display!r}")
        if self.ready_timeout_ms < 1:
            raise ValueError(f"MiniWoBConfig.ready_timeout_ms must be >= 1, got {self.ready_timeout_ms}")


# -- the package's files and task list --------------------------------------------------------


@functools.lru_cache(maxsize=1)
def miniwob_html_dir() -> Path:
    """miniwob/html/ of the installed `miniwob` package (ImportError with a hint if missing)."""
    import importlib.util

    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("MiniWoB++ tasks need the `miniwob` package: pip install miniwob")
    return Path(list(spec.submodule_search_locations)[0]) / "html"


@functools.lru_cache(maxsize=1)
def miniwob_task_names() -> tuple[str, ...]:
    """All registered MiniWoB++ task names, sorted: 125 standard + 3 `flight.*`.

    Read from the ids the `miniwob` package registers in Gymnasium on import; falls back to
    the HTML files (all 130 pages) if that registry is empty.
    """
    import gymnasium
    import miniwob  # noqa: F401  (registers miniwob/<name>-v1)

    names = sorted(env_id[len("miniwob/"):].rsplit("-v", 1)[0]
                   for env_id in gymnasium.registry if env_id.startswith("miniwob/"))
    if not names:
        names = sorted(p.stem for p in (miniwob_html_dir() / "miniwob").glob("*.html"))
    return tuple(names)


def task_path(name: str) -> str:
    """URL path of a task page under the server root."""
    if name.startswith("flight."):
        return "flight/" + name[len("flight."):] + "/wrapper.html"
    return f"miniwob/{name}.html"


# -- the per-process HTTP server --------------------------------------------------------------


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # one line per request is noise
        return None

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):  # the tab navigated away mid-answer (a reset)
            pass


_SERVER_LOCK = threading.Lock()
_SERVER: dict[str, Any] = {"pid": None, "httpd": None, "url": None}
SHOWN_ORIGIN = "http://miniwob.test"  # what observations show for the server's free-port origin


def miniwob_base_url() -> str:
    """`http://127.0.0.1:<port>/` of this process's MiniWoB server, starting it if needed.

    Keyed by pid: a forked child (Ray worker, multiprocessing) has no serving thread, so it
    starts its own server instead of pointing at the parent's port.
    """
    with _SERVER_LOCK:
        if _SERVER["pid"] != os.getpid():
            handler = functools.partial(_QuietHandler, directory=str(miniwob_html_dir()))
            httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            httpd.daemon_threads = True
            threading.Thread(target=httpd.serve_forever, name="miniwob-http", daemon=True).start()
            _SERVER.update(pid=os.getpid(), httpd=httpd,
                           url=f"http://127.0.0.1:{httpd.server_address[1]}/")
        return _SERVER["url"]


# -- the task ---------------------------------------------------------------------------------

# One round trip: seed, start, and report readiness + utterance.
# `opts` = {seed, mode, maxTime, hideDisplay}.
_START_JS = """(opts) => {
  if (opts.hideDisplay) {  // the human HUD: last reward, average, countdown, click marks
    if (!document.getElementById('webrl-hide-hud')) {
      const style = document.createElement('style');
      style.id = 'webrl-hide-hud';
      style.textContent = '#reward-display, #click-canvas { display: none !important; }';
      document.head.appendChild(style);
    }
    core.countdownTimer = function () {};  // display only; the episode timer is separate
  }
  Math.seedrandom(opts.seed);
  core.setDataMode(opts.mode);
  core.EPISODE_MAX_TIME = opts.maxTime;
  core.startEpisodeReal();
  return {ready: WOB_TASK_READY === true, utterance: core.getUtterance()};
}"""
_STATE_JS = """() => ({done: WOB_DONE_GLOBAL === true, reward: WOB_REWARD_GLOBAL,
  raw_reward: WOB_RAW_REWARD_GLOBAL, reason: WOB_REWARD_REASON === null ? null : String(WOB_REWARD_REASON)})"""


def flight_goal(utterance: str) -> str:
    """Flight pages put a JSON object in #query; agents read "Key: value, ..." better."""
    try:
        fields = json.loads(utterance)
    except json.JSONDecodeError:
        return utterance
    if not isinstance(fields, dict):
        return utterance
    return "Search for flights with " + ", ".join(f"{k}: {v}" for k, v in fields.items()) + "."


class MiniWoBTask(BaseTask):
    """One seeded MiniWoB++ episode.

    `spec.goal` is a placeholder until `setup` has generated the problem, then the page's
    utterance. `done(page)` tells whether the page has ended the episode (the shell uses it to
    set `terminated`); `reward` carries the page's raw values (`page_state`) as its details.
    """

    def __init__(self, name: str, seed: int = 0, config: Optional[MiniWoBConfig] = None):
        if name not in miniwob_task_names():
            raise ValueError(f"unknown MiniWoB++ task {name!r}; see miniwob_task_names()")
        self.name, self.seed = name, int(seed)
        self.config = config or MiniWoBConfig()
        start_url = miniwob_base_url() + task_path(name)
        super().__init__(TaskSpec(id=f"miniwob/{name}/{self.seed}",
                                  goal=f"(MiniWoB++ {name}: the goal is generated at setup)",
                                  start_url=start_url, max_steps=self.config.max_steps,
                                  site="miniwob", split=self.config.data_mode,
                                  params={"task": name, "seed": self.seed}))

    def __reduce__(self):  # a copy in another process gets that process's server URL
        return (MiniWoBTask, (self.name, self.seed, self.config))

    def url_alias(self) -> OriginAlias:
        """Observations show the pages at a stable origin, whatever port the server bound."""
        return OriginAlias.of(self.spec.start_url, SHOWN_ORIGIN)

    def setup(self, page: Any) -> None:
        if page.url.split("#")[0] != self.spec.start_url:
            page.goto(self.spec.start_url, wait_until="load")
        else:
            page.wait_for_load_state("load")  # core.startEpisode runs in window.onload
        state = page.evaluate(_START_JS, {"seed": self.seed, "mode": self.config.data_mode,
                                          "maxTime": self.config.episode_max_time_ms,
                                          "hideDisplay": self.config.hide_human_display})
        if not state["ready"]:  # flight pages: the iframe sets WOB_TASK_READY when loaded
            page.wait_for_function("() => WOB_TASK_READY === true",
                                   timeout=self.config.ready_timeout_ms)
            state["utterance"] = page.evaluate("() => core.getUtterance()")
        utterance = state["utterance"]
        self.spec.goal = flight_goal(utterance) if self.name.startswith("flight.") else utterance

    def page_state(self, page: Any) -> dict[str, Any]:
        """{done, reward (time-discounted), raw_reward, reason} as the page holds them."""
        return page.evaluate(_STATE_JS)

    def done(self, page: Any) -> bool:
        return bool(self.page_state(page)["done"])

    def reward(self, page: Any, answer: Optional[str]) -> TaskReward:
        """The raw reward clipped to [0, 1] once the page has ended the episode, else 0."""
        state = self.page_state(page)
        value = max(0.0, min(1.0, float(state["raw_reward"]))) if state["done"] else 0.0
        return TaskReward(value, state)

    def oracle_action(self, observation: dict[str, Any]) -> Optional[Action]:
        from webrl.envs.miniwob_oracles import ORACLES

        solver = ORACLES.get(self.name)
        return solver(observation) if solver is not None else None


@dataclass
class MiniWoBTaskSource:
    """A picklable `TaskSource`: draws a task name uniformly from `names` and a fresh seed."""

    names: tuple[str, ...] = ()
    """Task names (see `miniwob_task_names()`); empty = all of them."""
    config: MiniWoBConfig = field(default_factory=MiniWoBConfig)
    """Shared settings of the tasks drawn."""

    def __post_init__(self) -> None:
        self.names = tuple(self.names) or miniwob_task_names()
        unknown = sorted(set(self.names) - set(miniwob_task_names()))
        if unknown:
            raise ValueError(f"MiniWoBTaskSource.names: unknown MiniWoB++ tasks {unknown}")

    def sample(self, rng: Any) -> MiniWoBTask:
        name = self.names[int(rng.integers(len(self.names)))]
        return MiniWoBTask(name, seed=int(rng.integers(2**31 - 1)), config=self.config)


def register_miniwob_envs(entry_point: str = WEB_ENV_ENTRY_POINT) -> list[str]:
    """Register `webrl/miniwob.<task>-v0` for every task; returns the ids. Idempotent.

    `gymnasium.make(id, config=...)` builds `WebEnv(config=..., tasks=MiniWoBTaskSource((task,)))`.
    """
    import gymnasium

    ids = []
    for name in miniwob_task_names():
        env_id = ENV_ID_FORMAT.format(name)
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry_point,
                               kwargs={"tasks": MiniWoBTaskSource(names=(name,))})
        ids.append(env_id)
    return ids

"""`WebEnv`: a generic live-browser shell around a `Task`, as a Gymnasium environment.

Departures from the OpenWebRL recipe and why:
- Actions are element ids (Set-of-Mark) or screenshot points, both in one typed `Action`;
  OpenWebRL's agent clicks points only. Points stay available (`click_at`).
- Env feedback text ("Clicked <button> 'Search'; page navigated to ...") is built from what
  the browser reported, like the recipe; in addition a failed action is reported separately
  in `last_action_error` and never ends the episode.
- Infrastructure failures (browser crash, page stuck in a script, step or episode over its time
  limit) end the episode as truncated with `info["infra_error"]` (`webrl.envs.infra_errors`);
  OpenWebRL likewise removes such samples instead of scoring them 0.
- With `config.skills_dir`, `skill(name, args)` runs a library skill's steps as one env step
  (WebXSkill's grounded mode; `webrl.envs.skill_run` says where it interprets the paper).
- With `config.tools`, `tool(name, args)` calls a tool the site exposes (a site API, a search URL,
  a macro) as one env step (The Tool Illusion; `webrl.envs.tools`).
- Episodes of one env reuse its BrowserContext and first tab, scrubbed in between
  (`webrl.envs.context_pool` lists what is cleared); `WebEnv(reuse_context=False)` opens a new
  context per episode. Recorded/replayed episodes, and the episode after an infra error, always
  get a new one.
"""
from __future__ import annotations

import time
from typing import Any, Mapping, Optional, Union

import gymnasium
import numpy as np
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from webrl.actions import Action, ActionError, ParseError, parse_compact
from webrl.envs.browser import BrowserSession, EpisodeEvents, InfraError, viewport_size
from webrl.envs.config import WebEnvConfig, as_config
from webrl.envs.context_pool import ReusableContext
from webrl.envs.episode import Episode, Tabs, count_repeats, resolve_alias, settle
from webrl.envs.execute import ActionContext, ActionFailed, PageUnresponsive, execute_action
from webrl.envs.infra_errors import infra_error_reason, infra_error_step
from webrl.envs.observation import AnyText, build_observation, collect_elements, observation_space, tabs_text
from webrl.envs.network import AddressPolicy
from webrl.envs.recording import Recorder
from webrl.envs.safety import Deadline, DomainAllowlist, StepTimeLimit, guard_proxy, install_guards
from webrl.envs.skill_run import EpisodeSkillSteps, run_skill, skill_step_count, skills_text
from webrl.envs.tool_run import EpisodeToolRunner, run_tool
from webrl.envs.tools import Tool, load_tools_file, task_tools, tool_step_count, tools_text
from webrl.envs.task import LiveWebTask, Task, TaskSource, TaskSpec, as_task, as_task_reward
from webrl.envs import watchdog as step_watchdog  # WATCHDOG_GRACE_S read at call time (a soak patches it)
from webrl.envs.watchdog import BrowserWatchdog
from webrl.envs.skills import SkillLibrary

MAX_ACTION_CHARS = 4096


class WebEnv(gymnasium.Env):
    """A website as a Gymnasium environment: a Chromium tab set plus a `Task`.

    ## Action space
    `AnyText`: a string in the compact grammar (`click(12)`, `type(5, "blue mug")`,
    `click_at(340, 220)`, `scroll("down")`, `answer("42")`, ... see `webrl.actions`), or a typed
    `Action` directly. Unparsable or impossible actions set `last_action_error`; the episode goes on.
    `skill("search_products", query="blue mug")` runs a skill of `config.skills_dir` step by step
    as one env step (each skill step with a step's own time limit), stopping at the first step that
    fails (`last_action_error` names it; the feedback lists the steps that ran);
    `info["skill"]` holds the record (`webrl.envs.skill_run`).
    `tool("search_catalog", query="mug")` calls a tool of `config.tools` as one env step: the
    result (an http tool's response text, cut to the tool's size) or the error goes into the
    feedback / `last_action_error`; `info["tool"]` holds the record (`webrl.envs.tool_run`).

    ## Observation space
    `Dict` with "screenshot" (H, W, 3) uint8 with numbered Set-of-Mark boxes (H, W = viewport),
    "url", "title", "goal", "elements_text" (`[12] button "Add to cart"` per line), "feedback"
    (what the last action did), "last_action_error" ("" if none), "tabs" (one line per tab, the
    current one marked), "skills" (the library's skills applying to the page, one
    `name(param: type): description` per line; "" without a library), "tools" (the episode's
    tools, same line shape; "" without tools), "step" (steps taken).
    URLs in the text fields show a task's stable
    origin where it has one (`task.url_alias()`: the sandbox and MiniWoB++ servers bind free
    ports); `goto`/`new_tab` URLs on that origin go to the real one. `info` carries "elements"
    (dicts with id, tag, role, name, bbox, ...), "raw_screenshot_png", "task_id",
    "reward_details", "action"; with `config.recording` on, also "recording" (the episode's HAR
    file) and "recording_missing" (requests a replay did not find in it; `webrl.envs.recording`).

    ## Reward
    0 on every step but the last; on `answer`/`stop` or when `task.done(page)`, the value of
    `task.reward(page, answer)` (a `TaskReward`) in [0, 1], and its details in
    `info["reward_details"]` ({} on every other step). If the task needs a judge (value None,
    e.g. `webrl/LiveWeb-v0`) the env reward is 0 and `info["needs_judge"]` is True.

    ## Episode end
    Terminated: `answer(...)`, `stop()`, or `task.done(page)` (the task's page ended it). Truncated:
    `max_steps` reached ("max_steps"), or an infrastructure failure ("infra_error" with
    `info["infra_error"]` = reason: browser crash, page stuck, step/episode time limit).
    `info["truncation_reason"]` says which.

    ## Arguments
    `config` (WebEnvConfig or dict), `tasks` (a TaskSource drawn from at reset), `session` (a
    shared BrowserSession; the env launches its own if None), `render_mode` ("rgb_array"),
    `reuse_context` (True: one context per slot, scrubbed between episodes; False: one per episode).
    `reset(seed, options={"task": task})` runs a given Task (or TaskSpec: a live-web task); a
    task object lacking optional hooks gets `BaseTask`'s defaults (`webrl.envs.task.as_task`).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 1}

    def __init__(self, config: Union[WebEnvConfig, Mapping[str, Any], None] = None,
                 tasks: Optional[TaskSource] = None, session: Optional[BrowserSession] = None,
                 render_mode: Optional[str] = None, *, reuse_context: bool = True):
        self.config = as_config(config)
        self.reuse_context = reuse_context
        """Keep the slot's context and first tab across episodes, scrubbed in between
        (`webrl.envs.context_pool`); False: a new context per episode (tests, benchmarks)."""
        # loaded before any browser starts: a bad skill file fails fast (SkillFileError)
        self.skills = SkillLibrary.load(self.config.skills_dir) if self.config.skills_dir else None
        self._file_tools = load_tools_file(self.config.tools) if self.config.tools not in ("", "task") else ()
        self.tools: dict[str, Tool] = {}  # the running episode's tools, by name
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self.tasks = tasks
        self._owns_session = session is None
        self.session = session or BrowserSession(self.config.browser)
        # launch settings come from the session's config, everything per-context from this env's
        self.viewport = viewport_size(self.config.browser.viewport)
        width, height = self.viewport
        self.observation_space = observation_space(height, width)
        self.action_space = AnyText(max_length=MAX_ACTION_CHARS)
        self.recorder = Recorder(self.config.recording)
        self._contexts = ReusableContext(self.session)  # this slot's context across episodes
        self._episode: Optional[Episode] = None
        self._last_obs: Optional[dict[str, Any]] = None
        self.last_timings: dict[str, float] = {}  # seconds; outside `info` to keep it deterministic
        self.screenshot_early = False
        """Whether the last observation's screenshot was taken inside the readiness wait
        (`webrl.envs.episode._early_screenshot`); outside `info`, which must not depend on timing."""

    # -- Gymnasium API --------------------------------------------------------------------------
    def reset(self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None):
        super().reset(seed=seed)
        started = time.perf_counter()
        task = self._pick_task(options or {})
        # one budget and one watchdog for every browser call of the reset, retry included: a reset
        # that cannot finish ends within the limit + grace (+ KILL_AFTER_S), as an InfraError
        deadline = Deadline(self.config.safety.step_timeout_s + self.config.browser.load_timeout_s)
        watchdog = BrowserWatchdog(None, deadline.seconds + step_watchdog.WATCHDOG_GRACE_S, session=self.session)
        failure: Optional[Exception] = None
        with watchdog:
            for attempt in range(2):  # one relaunch if the browser is dead or dies during reset
                try:
                    (obs, info), failure = self._start_episode(task, deadline, watchdog), None
                    break
                except (PlaywrightError, InfraError, PageUnresponsive, StepTimeLimit) as error:
                    failure = error
                    self._close_episode(clean=False)  # the retry gets a fresh context
                    if watchdog.fired or deadline.remaining() < 1.0:
                        break  # a retry could only overrun the reset's limit
                    if not self.session.is_alive():  # a shared browser is relaunched only when dead
                        self.session.relaunch()
        if failure is not None:
            if not self.session.is_alive():  # killed by the watchdog, or crashed: the next reset gets one
                self.session.relaunch()
            raise InfraError(f"reset failed{' (the reset watchdog ended it)' * watchdog.fired}: "
                             f"{type(failure).__name__}: {failure}") from failure
        self._episode.env_time_s = time.perf_counter() - started
        self.last_timings = {"reset_s": self._episode.env_time_s}
        return obs, info

    def step(self, action: Union[Action, str]):
        episode = self._episode
        if episode is None or episode.done:
            raise RuntimeError("WebEnv.step called without an active episode: call reset() first")
        started = time.perf_counter()
        episode.steps += 1
        parsed = _parse(action)
        deadline = Deadline(self.config.safety.step_timeout_s)
        steps = max(skill_step_count(parsed, self.skills), tool_step_count(parsed, self.tools))
        budget_s = deadline.seconds * steps  # a skill or macro tool: one step time per step it runs
        watchdog = BrowserWatchdog(episode.context, budget_s + step_watchdog.WATCHDOG_GRACE_S, session=self.session)
        try:
            with watchdog:
                obs, info, terminated, reward = self._act_and_observe(episode, parsed, deadline)
        except (PageUnresponsive, StepTimeLimit, PlaywrightError, InfraError) as error:
            return self._end_with_infra_error(episode, parsed, error, started, watchdog)
        episode.env_time_s += time.perf_counter() - started
        truncated = False
        if not terminated and episode.steps >= episode.max_steps:
            truncated, info["truncation_reason"] = True, "max_steps"
        elif not terminated and episode.env_time_s > self.config.safety.episode_timeout_s:
            truncated, info["truncation_reason"] = True, "infra_error"
            info["infra_error"] = (f"episode_time_limit: {episode.env_time_s:.1f} s of env time "
                                   f"> {self.config.safety.episode_timeout_s:g} s")
        if terminated or truncated:
            self._close_episode()
        self.last_timings = {"step_s": time.perf_counter() - started}
        return obs, float(reward), terminated, truncated, info

    def render(self) -> Optional[np.ndarray]:
        if self.render_mode == "rgb_array" and self._last_obs is not None:
            return self._last_obs["screenshot"]
        return None

    def close(self) -> None:
        self._close_episode()
        with BrowserWatchdog(None, step_watchdog.WATCHDOG_GRACE_S, session=self.session):
            self._contexts.close()
        if self._owns_session:
            self.session.close()
        super().close()

    @property
    def page(self) -> Any:
        """The active Playwright page of the running episode (tests, task code)."""
        return None if self._episode is None else self._episode.tabs.page

    @property
    def task(self) -> Optional[Task]:
        return None if self._episode is None else self._episode.task

    # -- episodes ---------------------------------------------------------------------------------
    def _pick_task(self, options: dict[str, Any]) -> Task:
        """The episode's task, completed by `as_task` (older task objects lack some hooks)."""
        task = options.get("task")
        if isinstance(task, TaskSpec):
            return LiveWebTask(task)
        if task is not None:
            return as_task(task)
        if self.tasks is None:
            raise ValueError("WebEnv.reset needs options={'task': task} or a `tasks` source")
        return as_task(self.tasks.sample(self.np_random))

    def _start_episode(self, task: Task, deadline: Deadline, watchdog: BrowserWatchdog):
        self._close_episode()
        task.prepare()
        allowlist = DomainAllowlist(task.spec.allowed_domains)
        reason = self._network_refusal(allowlist, task.spec.start_url)
        if reason:
            raise ValueError(f"task {task.spec.id}: start_url {task.spec.start_url} is not allowed: {reason}")
        tools = task_tools(task) if self.config.tools == "task" else self._file_tools
        self.tools = {t.name: t for t in tools}
        self.session.ensure_alive()
        recording = self.recorder.start(task.spec.id)
        kept_page, pooled = None, recording is None and self.reuse_context
        http_tools = any(t.kind == "http" for t in tools)
        if pooled:  # the slot's context, scrubbed (webrl.envs.context_pool)
            context, kept_page, events, allowlist = self._contexts.acquire(
                self.viewport, self.config.safety, task.spec.allowed_domains, http_tools)
        else:
            proxy = guard_proxy(task.spec.allowed_domains, self.config.safety, self.session.own_proxy, http_tools)
            context = self.session.new_context(self.viewport, recording.record_har_path if recording else "", proxy)
            events = EpisodeEvents()
            install_guards(context, allowlist, events, self.config.safety, proxy)
        episode = Episode(task=task, context=context, tabs=Tabs(context), events=events,
                          allowlist=allowlist, generation=self.session.generation,
                          max_steps=self.config.max_steps or task.spec.max_steps, recording=recording,
                          pooled=pooled)
        self._episode = episode
        watchdog.watch(context)  # from now on an overrun first closes this context
        return self._open_entry(episode, task, deadline, kept_page)

    def _open_entry(self, episode: Episode, task: Task, deadline: Deadline, kept_page: Any = None):
        """Open the task's entry page in the episode's first tab (`kept_page`: a reused context's
        scrubbed tab) and observe it (reset)."""
        context, allowlist, recording = episode.context, episode.allowlist, episode.recording
        page = kept_page or context.new_page()
        if episode.pooled and kept_page is None:
            self._contexts.adopt_first_page(page)
        episode.tabs.add(page)
        episode.events.new_pages.clear()  # the first tab is not news
        entry = task.entry_url()
        episode.alias = task.url_alias()
        reason = allowlist.check_navigation(entry)
        if reason:
            raise ValueError(f"task {task.spec.id}: entry_url {entry} is not allowed: {reason}")
        self.recorder.attach(recording, context, allowlist, self.config.safety.subresource_policy,
                             episode.events, entry)
        page.goto(entry, wait_until="domcontentloaded", timeout=deadline.timeout_ms(self.config.browser.load_timeout_s))
        task.setup(page)
        notes = settle(episode, self.config.browser, deadline, before=(page, page.url),
                       observation=self.config.observation, early_screenshot=True)
        feedback = "; ".join([f"Opened {task.spec.start_url}"] + count_repeats(notes))
        return self._observe(episode, deadline, feedback=feedback, error="")

    def _act_and_observe(self, episode: Episode, parsed: Union[Action, ParseError], deadline: Deadline):
        episode.events.drain()
        episode.events.dialogs_this_step = 0
        run = None
        if isinstance(parsed, ParseError):
            feedback, _ = self._execute(episode, None, deadline, early_screenshot=True)
            error = f"could not parse the action: {parsed.message}"
        elif parsed.kind == "skill":
            steps = EpisodeSkillSteps(episode, self._execute, self.config.observation, deadline,
                                      self.config.safety.step_timeout_s)
            run = run_skill(parsed, self.skills, steps)
            feedback, error, deadline = run.feedback, run.error, steps.deadline
        elif parsed.kind == "tool":
            runner = EpisodeToolRunner(episode, self._execute, lambda url: self._network_refusal(episode.allowlist, url),
                                       deadline, self.config.observation, self.config.safety.step_timeout_s)
            run = run_tool(parsed, self.tools, runner)
            feedback, error, deadline = run.feedback, run.error, runner.deadline
        else:
            parsed = resolve_alias(episode, parsed)  # info["action"] is what ran
            feedback, error = self._execute(episode, parsed, deadline, early_screenshot=True)
        task = episode.task
        answer = parsed.text if isinstance(parsed, Action) and parsed.kind == "answer" else None
        terminated = bool(isinstance(parsed, Action) and parsed.is_terminal or task.done(episode.tabs.page))
        scored = as_task_reward(task.reward(episode.tabs.page, answer), task.spec.id) if terminated else None
        obs, info = self._observe(episode, deadline, feedback, error)
        info["action"] = parsed if isinstance(parsed, Action) else None
        if run is not None:
            info["tool" if parsed.kind == "tool" else "skill"] = run.to_dict()
        reward = 0.0
        if scored is not None:
            info["needs_judge"] = scored.value is None
            info["answer"] = answer
            reward = 0.0 if scored.value is None else scored.value
            info["reward_details"] = dict(scored.details)
        return obs, info, terminated, reward

    def _execute(self, episode: Episode, action: Optional[Action], deadline: Deadline,
                 early_screenshot: bool = False) -> tuple[str, str]:
        """Run `action` (None: nothing to run) and settle the tabs: (feedback, error).
        early_screenshot: the step's own action, observed next (skills and tools settle between
        their inner actions, whose screenshots nobody reads)."""
        error, description = "", ""
        before = (episode.tabs.page, episode.tabs.page.url)
        if action is not None:
            try:
                description = execute_action(resolve_alias(episode, action), self._action_context(episode, deadline))
            except ActionFailed as failure:
                error = str(failure)
        notes = settle(episode, self.config.browser, deadline, before, description, self.config.observation,
                       early_screenshot)
        return "; ".join([description] * bool(description) + count_repeats(notes)), error

    def _network_refusal(self, allowlist: DomainAllowlist, url: str) -> Optional[str]:
        """None if the episode may reach `url` (a start URL, a tool's URL), else why not."""
        reason = allowlist.check_navigation(url)
        if not reason and self.config.safety.subresource_policy == "public":
            reason = AddressPolicy(self.config.safety.network).refusal(url)
            reason = reason and f"{reason} (safety.network.internal_networks)"
        return reason

    def _action_context(self, episode: Episode, deadline: Deadline) -> ActionContext:
        return ActionContext(
            tabs=episode.tabs, elements=episode.elements, screenshot_size=episode.screenshot_size,
            top_frames=episode.top_frames, viewport=self.viewport, deadline=deadline, browser=self.config.browser,
            safety=self.config.safety, allowlist=episode.allowlist,
            on_new_page=lambda page: episode.events.new_pages.remove(page)
            if page in episode.events.new_pages else None)

    def _observe(self, episode: Episode, deadline: Deadline, feedback: str, error: str):
        page = episode.tabs.page
        try:
            prefetched, episode.prefetched = episode.prefetched, None
            png = None
            if prefetched is not None and prefetched[0] is page and prefetched[1] == page.url:
                collected, png = prefetched[2], prefetched[3]  # from the readiness wait (fewer round trips)
            else:
                collected = collect_elements(page, self.config.observation, deadline.timeout_s())
            early = png is not None
            if png is None:
                png = page.screenshot(type="png", scale="css", timeout=deadline.timeout_ms())
        except PlaywrightTimeout as timeout:
            raise PageUnresponsive("the page did not answer while being observed") from timeout
        episode.elements = collected["elements"]
        episode.top_frames = collected.get("topFrames", 1)
        episode.tabs.titles[id(page)] = collected["title"]
        show = episode.alias.show if episode.alias is not None else str
        titles_urls = [(episode.tabs.titles.get(id(p), ""), show(p.url)) for p in episode.tabs.pages]
        obs = build_observation(
            screenshot_png=png, elements=episode.elements, truncated=collected["truncated"],
            url=show(page.url), title=collected["title"], goal=episode.task.spec.goal,
            tabs=tabs_text(titles_urls, episode.tabs.active), step=episode.steps,
            feedback=show(feedback), error=show(error), config=self.config.observation,
            skills=skills_text(self.skills, show(page.url)), tools=tools_text(list(self.tools.values())))
        episode.screenshot_size = (obs["screenshot"].shape[1], obs["screenshot"].shape[0])
        self._last_obs = obs
        self.screenshot_early = early
        info = {"elements": episode.elements, "raw_screenshot_png": png,
                "task_id": episode.task.spec.id, "reward_details": {}, "action": None}
        if episode.recording is not None:
            info.update(episode.recording.info())
        return obs, info

    def _end_with_infra_error(self, episode: Episode, parsed: Any, error: Exception, started: float,
                              watchdog: BrowserWatchdog):
        reason = infra_error_reason(error, episode, self.session, watchdog, self.config.safety.step_timeout_s)
        self._close_episode(clean=False)  # a context that failed is not reused
        obs, info = infra_error_step(episode, parsed, reason, self.viewport)
        self._last_obs = obs
        self.last_timings = {"step_s": time.perf_counter() - started}
        return obs, 0.0, False, True, info

    def _close_episode(self, clean: bool = True) -> None:
        """End the running episode: its task's teardown, then its context is closed, or kept
        for the next episode when it came from the slot's pool and `clean` (no infra error)."""
        episode, self._episode = self._episode, None
        if episode is None:
            return
        episode.done = True
        # a page stuck in a script can hang teardown's browser calls and the context close: the
        # watchdog bounds them (closing the context, then killing the browser if even that hangs)
        with BrowserWatchdog(episode.context, step_watchdog.WATCHDOG_GRACE_S, session=self.session) as watchdog:
            try:
                episode.task.teardown(episode.tabs.page if episode.tabs.pages else None)
            except Exception:  # teardown must not keep a dead context alive
                clean = False
            if episode.pooled:
                self._contexts.release(clean and not watchdog.fired)
                return
            try:
                episode.context.close()
            except Exception:  # browser already gone
                pass


def _parse(action: Any) -> Union[Action, ParseError]:
    if isinstance(action, Action):
        return action
    if isinstance(action, str):
        if len(action) > MAX_ACTION_CHARS:
            return ParseError(f"the action is longer than {MAX_ACTION_CHARS} characters")
        return parse_compact(action)
    if isinstance(action, Mapping):
        try:
            return Action.from_dict(dict(action))
        except (ActionError, TypeError) as error:
            return ParseError(f"invalid action dict: {error}")
    return ParseError(f"expected an Action or a compact-grammar string, got {type(action).__name__}")

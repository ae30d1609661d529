"""The one episode runner: every agent loop over `env.step` in webrl is `episode_steps`.

    spec = EpisodeSpec(task, group_id="3:0:widgets/...", max_turns=4, stop_after_parse_failures=3)
    episode = run_episode(spec, GymSlot(env), PolicyAgent(policy))            # in process, sync
    episode = await run_episode_async(spec, env_call, decide)                  # the coordinator's way

Env slots are in `webrl.rollout.slots`, in-process agents in `webrl.rollout.agents`.

`episode_steps(spec)` is the episode itself, written once and free of I/O: a generator that
yields what it needs (`Reset(task)`, `Step(action)`, `Decide(request, result)`) and is sent the
answers (an `EnvStepResult`; a `Decided`, or `EndEpisode` when the agent ends the episode). Two
drivers answer them: `run_episode` calls an env slot and an agent in the caller's thread (sync
Playwright envs must stay on theirs), `run_episode_async` awaits Ray actors or coroutines (the
rollout coordinator, Dyna's SimRollout). What the episode fills in is therefore the same for
rollouts, evaluation, Dyna's refined episodes, ReSim's branches, demonstrations, synthesis,
skill validation and the benchmarks:

- every `Turn`: the decision's prompt ids, response ids, log-probs and images, the policy
  version and who decided (`Decision.to_turn`), the observation record with the Set-of-Mark
  elements (`compact_elements`), where the action lands (`action_bbox` / `action_point`), the
  env's feedback, a `skill(...)` turn's expansion (`skill_steps`) and a `tool(...)` turn's record;
- the `TrajectoryInfo`: the task's provenance, wall-clock bounds, how the episode ended
  (terminated / truncated, `stopped_by`), the checker's outcome (`task_reward`, None when only a
  judge can tell), its details and the recording.

Episode rules, in order:
1. reset; a result with `info["infra_error"]` raises `EpisodeInfraError` (the caller retries on
   another slot or drops the episode: the agent is never blamed for the browser).
2. `prefix`: turns whose actions are replayed as they were taken (an unparseable turn replays
   its parse error); they are copied into the trajectory. A replay that ends the episode early,
   or (with `expect`) reaches another page than the recorded one (URL, title, element list),
   ends the episode as `Episode.diverged`, its trajectory dropped with the reason.
3. up to `max_turns` turns in all (prefix included): the request (the observation and the past
   turns, images only on the last `keep_history_images`), the decision (`first` answers the
   first one when given: Dyna's refined response), the step. The episode ends when the env
   terminates or truncates, after `stop_after_parse_failures` unparseable turns in a row
   (`stopped_by="parse_failures"`), or when the agent answers `EndEpisode(reason)`
   (`stopped_by=reason`).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Generator, NamedTuple, Optional, Sequence, Union

from webrl.actions import Action, ParseError
from webrl.policy.seeds import sub_seed
from webrl.policy.types import Decision, MarkedObservation, Observation, PolicyRequest
from webrl.types import Image, Trajectory, TrajectoryInfo, Turn

SCREENSHOT_MODES = ("som", "raw", "none")


class EpisodeInfraError(RuntimeError):
    """An env reported an infrastructure failure for this episode (`info["infra_error"]`: the
    browser or the page failed, not the agent). The rollout restarts the trajectory on another
    slot and drops it after `rollout.max_retries`; in-process callers drop the episode. The env's
    own `webrl.envs.InfraError` stays inside the env, which turns it into that report."""


# -- the messages between the episode and its driver ------------------------------------------------
@dataclass(frozen=True)
class Reset:
    """Start an episode of `task` (answer: an `EnvStepResult`)."""

    task: Any


@dataclass(frozen=True)
class Step:
    """Take `action` (an `Action`, or a `ParseError`, which the env reports as an action error)."""

    action: Union[Action, ParseError]


@dataclass(frozen=True)
class Decide:
    """Decide the next action for `request`, shown `result` (answer: `Decided` or `EndEpisode`)."""

    request: PolicyRequest
    result: Any


class Decided(NamedTuple):
    """An agent's answer: the decision, the policy version that made it (-1: none), and who
    decided when the decision's own `to_turn` should not say (e.g. "oracle")."""

    decision: Decision
    version: int = -1
    decided_by: Optional[str] = None


@dataclass(frozen=True)
class EndEpisode(Exception):
    """An agent's way to end the episode before the env does; `reason` becomes `stopped_by`.
    Agents may return it or raise it."""

    reason: str


# -- the episode ----------------------------------------------------------------------------------
@dataclass
class EpisodeSpec:
    """One episode to run. `task` has `.spec` (a `TaskSpec`: id, goal, site, level, split, params)."""

    task: Any
    group_id: str = ""
    member: int = 0
    """The trajectory's index within its group (group members share the task and the group id)."""
    seed: Optional[int] = None
    """The episode's sampling seed: turn t decides with `derive_seed(seed, t)`; None: unseeded."""
    max_turns: int = 15
    """Turns at most, prefix included."""
    prefix: Sequence[Turn] = ()
    """Turns to replay first (their actions, or parse errors), copied into the trajectory."""
    expect: Optional[tuple[str, str, str]] = None
    """(url, title, elements_text) the replayed prefix must reach; None: not checked."""
    first: Optional[Decided] = None
    """The answer to the first decision after the prefix (a decision made elsewhere)."""
    stop_after_parse_failures: int = 0
    """End after this many consecutive unparseable turns (0: never)."""
    keep_history_images: int = 1
    """Past turns whose images travel with a request."""
    screenshot: str = "som"
    """What the agent sees: "som" (boxes drawn), "raw" (info["raw_screenshot_png"]) or "none"."""
    source: str = ""
    """`TrajectoryInfo.source` ("" for rollouts)."""

    def __post_init__(self) -> None:
        if self.screenshot not in SCREENSHOT_MODES:
            raise ValueError(f"EpisodeSpec.screenshot must be one of {SCREENSHOT_MODES}, got {self.screenshot!r}")
        if self.max_turns < max(1, len(self.prefix)):
            raise ValueError(f"EpisodeSpec.max_turns={self.max_turns} leaves no room after a prefix of "
                             f"{len(self.prefix)} turn(s)")


@dataclass
class Episode:
    """What `episode_steps` returns: the trajectory and how it got there."""

    trajectory: Trajectory
    final: Any = None
    """The last `EnvStepResult` (the state the episode ended in)."""
    results: list = field(default_factory=list)
    """The env result after each turn's action, prefix included (`results[i]` follows turn i)."""
    replayed: Optional[dict] = None
    """With a prefix or `expect`: url / title / elements_text of the page the replay reached."""
    diverged: str = ""
    """Why the prefix replay did not reach the expected state ("" when it did, or was not checked)."""
    env_steps: int = 0
    env_time_s: float = 0.0
    decide_time_s: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0


def observation_of(result: Any, screenshot: str = "som") -> Observation:
    """The agent's view of an env result (`EnvStepResult`, screenshot as PNG bytes): a
    `MarkedObservation` (the Set-of-Mark boxes) when the result lists elements, so a cascade's
    heads can decide and the log keeps the boxes; the screenshot as `screenshot` says."""
    obs, info = result.observation, result.info
    text_only = {k: v for k, v in obs.items() if k != "screenshot"}
    if info.get("elements"):
        observation: Observation = MarkedObservation.from_env(text_only, {"elements": info["elements"]},
                                                              screenshot="none")
    else:
        observation = Observation.from_env(text_only, {}, screenshot="none")
    png = info.get("raw_screenshot_png") if screenshot == "raw" else None
    png = png or (obs.get("screenshot") if screenshot != "none" else None)
    if png:
        observation = dataclasses.replace(observation, screenshot=Image(bytes(png), "png"))
    return observation


def light_history(turns: Sequence[Turn], keep_images: int) -> list[Turn]:
    """Past turns with images only on the last `keep_images` (the rest never reach the prompt)."""
    return [dataclasses.replace(turn, images=[]) if len(turns) - i > keep_images and turn.images else turn
            for i, turn in enumerate(turns)]


def new_trajectory(task: Any, group_id: str = "", source: str = "") -> Trajectory:
    """An empty trajectory of `task` with its provenance (fields a task spec lacks stay empty)."""
    spec = task.spec
    level = getattr(spec, "level", 0)
    info = TrajectoryInfo(site=str(getattr(spec, "site", "") or ""), level=int(level or 0),
                          split=str(getattr(spec, "split", "") or ""),
                          task_params=dict(getattr(spec, "params", None) or {}),
                          start_url=str(getattr(spec, "start_url", "") or ""), started_at=time.time(), source=source)
    return Trajectory(task_id=spec.id, group_id=group_id, goal=spec.goal, info=info)


def replay_action(turn: Turn) -> Union[Action, ParseError]:
    """What a recorded turn stepped the env with: its action, or its parse error."""
    return turn.action if turn.action is not None else ParseError(turn.parse_error or "no action")


def check_infra(result: Any) -> None:
    if result.info.get("infra_error"):
        raise EpisodeInfraError(str(result.info["infra_error"]))


def episode_steps(spec: EpisodeSpec) -> Generator[Union[Reset, Step, Decide], Any, Episode]:
    """The episode (module docstring); drive it with `run_episode` or `run_episode_async`."""
    episode = Episode(new_trajectory(spec.task, spec.group_id, spec.source))
    traj = episode.trajectory
    result = yield from _env(episode, Reset(spec.task))
    history: list[Turn] = []
    for i, turn in enumerate(spec.prefix):
        result = yield from _env(episode, Step(replay_action(turn)))
        history.append(dataclasses.replace(turn))
        if (result.terminated or result.truncated) and i + 1 < len(spec.prefix) + (spec.first is not None):
            episode.diverged = f"the replay ended the episode at its step {i} ({_compact(turn)})"
            break
    if spec.prefix or spec.expect is not None:
        obs = result.observation
        episode.replayed = {key: obs.get(key, "") for key in ("url", "title", "elements_text")}
        if not episode.diverged and spec.expect is not None and tuple(episode.replayed.values()) != tuple(spec.expect):
            episode.diverged = (f"the replay of {len(spec.prefix)} action(s) reached another page than the recorded one"
                                if spec.prefix else "the reset reached another page than the recorded one")
    if episode.diverged:
        traj.turns = history
        traj.drop(f"diverged: {episode.diverged}")
        episode.final = result
        return episode
    pending, failures = spec.first, 0
    while len(history) < spec.max_turns and not (history and (result.terminated or result.truncated)):
        observation = observation_of(result, spec.screenshot)
        request = PolicyRequest(observation, light_history(history, spec.keep_history_images),
                                request_id=f"{spec.group_id}/{spec.member}/{len(history)}",
                                seed=sub_seed(spec.seed, len(history)))
        if pending is not None:
            answer, pending = pending, None
        else:
            t0 = time.monotonic()
            answer = yield Decide(request, result)
            episode.decide_time_s += time.monotonic() - t0
        if isinstance(answer, EndEpisode):
            traj.info.stopped_by = answer.reason
            break
        decision, version, decided_by = answer
        episode.prompt_tokens += decision.stats.prompt_tokens
        episode.cached_tokens += decision.stats.cached_tokens
        turn = (decision.to_turn(observation, policy_version=version) if decided_by is None
                else decision.to_turn(observation, policy_version=version, decided_by=decided_by))
        record_target(turn, decision.action, result.info.get("elements") or [])
        action = decision.action if decision.action is not None else decision.parse_error
        result = yield from _env(episode, Step(action if action is not None else ParseError("no action")))
        _record_outcome(turn, result)
        history.append(turn)
        failures = failures + 1 if decision.action is None else 0
        if failures and failures == spec.stop_after_parse_failures and not (result.terminated or result.truncated):
            traj.info.stopped_by = "parse_failures"
            break
    traj.turns = history
    _finish(traj.info, result)
    episode.final = result
    return episode


def _env(episode: Episode, call: Union[Reset, Step]):
    t0 = time.monotonic()
    result = yield call
    episode.env_time_s += time.monotonic() - t0
    if isinstance(call, Step):
        episode.env_steps += 1
        episode.results.append(result)
    check_infra(result)
    return result


def _compact(turn: Turn) -> str:
    return turn.action.to_compact() if turn.action is not None else f"unparseable: {turn.parse_error}"


def _record_outcome(turn: Turn, result: Any) -> None:
    """What the env said of the turn's action: feedback, a skill's expansion, a tool's record."""
    obs, info = result.observation, result.info
    turn.feedback = "\n".join(p for p in (obs.get("feedback", ""), obs.get("last_action_error", "")) if p)
    turn.skill_steps = list((info.get("skill") or {}).get("steps", []))
    turn.tool_call = dict(info.get("tool") or {})


def _finish(info: TrajectoryInfo, result: Any) -> None:
    """How the episode ended, from the last env result. `task_reward` is the checker's outcome;
    None when only a judge can tell (the trajectory's `reward` stays None either way: a reward
    function turns this, or a judge's verdict, into it)."""
    info.needs_judge = bool(result.info.get("needs_judge"))
    info.task_reward = None if info.needs_judge else (float(result.reward) if result.terminated else 0.0)
    info.terminated, info.truncated = bool(result.terminated), not result.terminated
    info.finished_at = time.time()
    info.checker_details = dict(result.info.get("reward_details") or {})
    info.recording = str(result.info.get("recording") or "")


def record_target(turn: Turn, action: Optional[Action], elements: Sequence[dict]) -> None:
    """Where the action lands on the screenshot it was decided on: the element's box or the point."""
    if action is None:
        return
    if action.element is not None:
        for el in elements:
            if el.get("id") == action.element:
                turn.observation.action_bbox = list(el["bbox"])
                break
    elif action.x is not None and action.y is not None:
        turn.observation.action_point = [action.x, action.y]


# -- drivers --------------------------------------------------------------------------------------
Agent = Callable[[PolicyRequest, Any], Union[Decided, Decision, EndEpisode]]
"""A sync agent: (request, env result) -> `Decided` (or a bare `Decision`), or `EndEpisode`."""


def _as_answer(answer: Any) -> Union[Decided, EndEpisode]:
    if isinstance(answer, (Decided, EndEpisode)):
        return answer
    if isinstance(answer, Decision):
        return Decided(answer)
    if isinstance(answer, tuple) and len(answer) == 2:  # (decision, version), as inference workers answer
        return Decided(answer[0], int(answer[1]))
    raise TypeError(f"an agent must answer a Decision, Decided or EndEpisode, got {type(answer).__name__}")


def run_episode(spec: EpisodeSpec, env: Any, agent: Agent) -> Episode:
    """Run `spec` in this thread: `env.reset(task)` / `env.step(action)` -> `EnvStepResult`
    (`GymSlot`, `WorkerSlot`), `agent(request, result)` decides. Raises `EpisodeInfraError`."""
    steps = episode_steps(spec)
    answer: Any = None
    while True:
        try:
            call = steps.send(answer)
        except StopIteration as done:
            return done.value
        if isinstance(call, Reset):
            answer = env.reset(call.task)
        elif isinstance(call, Step):
            answer = env.step(call.action)
        else:
            try:
                answer = _as_answer(agent(call.request, call.result))
            except EndEpisode as end:
                answer = end


async def run_episode_async(spec: EpisodeSpec, env_call: Callable[[Union[Reset, Step]], Awaitable[Any]],
                            decide: Callable[[Decide], Awaitable[Any]]) -> Episode:
    """Run `spec` on an event loop: `await env_call(Reset | Step)` -> `EnvStepResult`,
    `await decide(Decide)` -> `Decided` / (decision, version) / `EndEpisode`."""
    steps = episode_steps(spec)
    answer: Any = None
    while True:
        try:
            call = steps.send(answer)
        except StopIteration as done:
            return done.value
        if isinstance(call, Decide):
            try:
                answer = _as_answer(await decide(call))
            except EndEpisode as end:
                answer = end
        else:
            answer = await env_call(call)

"""Collection with task refinement: run each task's plan (templates) or an acting policy (LLM
proposals) in a `WebEnv`, one episode of the episode runner (`webrl.rollout.episode`) whose agent
is the plan executor (`PlanAgent`) or the policy behind the stall detector (`StallAgent`). The
runner records each turn as for oracle demonstrations (`webrl.recipes.demos`: Set-of-Mark
screenshot, compact elements); here `decided_by="synth"` and no response_text, so `webrl sft`
renders each action in the training policy's own format.

Refinement rules, applied when the observation contradicts the task (`Collected.refinements`
lists what was rewritten, `Collected.drop_reason` why a task was dropped):
  target_missing  a planned target is not on the page. If the page says it has no results
                  (NO_RESULTS) the task is dropped ("no_results"). Else, for a link target
                  (item or navigation), the first other link of the same kind on the page
                  replaces it: the goal's quoted name and a url_contains checker built from the
                  old link are rewritten to the new one. Otherwise dropped ("target_missing").
  option_missing  a select lacks the planned option: the select's first real option replaces it
                  in the step, the goal and a `selected` checker. No option left: dropped.
  action_failed   the env reported last_action_error for a planned step: dropped.
  form_rejected   (form tasks) after the plan's last step the page shows an ARIA alert or an
                  aria-invalid field, or error text (FORM_ERROR): dropped.
  checker_failed  the plan ran but the checker said 0: dropped.
  stalled         (policy tasks) 3 steps in a row changed nothing, or the same error came twice:
                  dropped, as SynthAgent's refiner would give up on a stalled task.
An agent that drops the task ends the episode (`EndEpisode`), its reason in `Collected.drop_reason`;
an infrastructure failure drops it too ("infra_error").
Departure from SynthAgent: its refiner is an LLM that rewrites the task from the history; these
rules rewrite only what a template can know (the target's name, the option, the checker).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from webrl.actions import Action, ParseError
from webrl.envs.task import origin
from webrl.policy.types import Decision, Observation
from webrl.rollout.episode import Decided, EndEpisode, Episode, EpisodeInfraError, EpisodeSpec, run_episode
from webrl.rollout.slots import GymSlot
from webrl.synth.explore import categorise
from webrl.synth.propose import path_of, real_options
from webrl.synth.tasks import PlanStep, SynthTask, Target, resolve_target
from webrl.types import Trajectory, Turn

NO_RESULTS = re.compile(r"\b(no (results|products|items|flights|matches)|nothing (found|matches)|0 results|"
                        r"no \w+ match)", re.I)
FORM_ERROR = re.compile(r"\b(please (correct|fix|enter)|is required|invalid|not valid|could ?n[o']t find|"
                        r"pick one from)\b", re.I)
ALERT_SELECTOR = '[role="alert"], [aria-invalid="true"]'  # the ARIA ways a page reports a rejected form


@dataclass
class Collected:
    task: SynthTask
    trajectory: Optional[Trajectory] = None
    reward: Optional[float] = None
    refinements: list[str] = field(default_factory=list)
    drop_reason: str = ""


def page_state(url: str, elements_text: str) -> tuple[str, str]:
    """What "the page did not change" compares: the URL and a digest of the element list
    (names, values, selections: `elements_text`)."""
    return url, hashlib.sha1(elements_text.encode()).hexdigest()[:16]


def state_key(turn: Turn) -> tuple[str, str]:
    """`page_state` of the page a turn acted on."""
    return page_state(turn.observation.url, turn.observation.elements_text)


def synth_decision(action: Action | ParseError, observation: Observation, record_images: bool) -> Decided:
    """A synthesis turn's decision: the action, the screenshot with `record_images`, and no text:
    `webrl sft` then renders the action in the training policy's format, as it does for oracle
    demos (a compact "click(3)" target would teach another format)."""
    images = [observation.screenshot] if record_images and observation.screenshot is not None else []
    return Decided(Decision(parsed=action, response_text="", images=images), -1, "synth")


def finish(traj: Trajectory, reward: float, terminated: bool, info: dict, task: SynthTask) -> None:
    traj.goal = task.goal
    traj.info.task_params = {"category": task.category, "checker": task.checker}
    traj.info.task_reward = None if task.checker is None else float(reward)
    traj.info.needs_judge = task.checker is None
    traj.info.terminated, traj.info.truncated = bool(terminated), not terminated
    traj.info.checker_details = dict(info.get("reward_details") or {})


def _page_text(env: Any) -> str:
    try:
        return env.page.inner_text("body") if env.page is not None else ""
    except Exception:  # a page mid-navigation: no text is no evidence
        return ""


def _form_rejected(env: Any) -> bool:
    try:
        alert = env.page is not None and env.page.query_selector(ALERT_SELECTOR) is not None
    except Exception:  # a page mid-navigation
        alert = False
    return alert or bool(FORM_ERROR.search(_page_text(env)))


def _substitute(task: SynthTask, index: int, info: dict) -> Optional[str]:
    """Rewrite `task` in place so step `index` targets what the page shows; the refinement
    reason, or None when nothing fits (module docstring)."""
    step = task.plan[index]
    elements = info["elements"]
    if step.kind == "select":
        select = resolve_target(step.target, elements)
        if select is not None:
            options = real_options(select.get("options") or [])
            if not options:
                return None
            _rewrite(task, step, step.text, options[0], new_text=options[0])
            return "option_missing"
    if step.target is None or step.target.role != "link":
        return None
    site, here = origin(task.start_url), info.get("url", "")
    wanted = "item" if task.category in ("item", "search") else "navigation"
    substitute = next((e for e in elements if e.get("role") == "link" and (e.get("name") or "").strip()
                       and categorise(e, site) == wanted and e.get("href") not in (here, task.start_url)), None)
    if substitute is None:
        return None
    _rewrite(task, step, step.target.name, substitute["name"].strip(),
             new_target=Target("link", substitute["name"].strip(), substitute.get("tag", "a")))
    if task.checker is not None and task.checker["kind"] == "url_contains":
        task.checker = {**task.checker, "value": path_of(substitute["href"])}
    return "target_missing"


def _rewrite(task: SynthTask, step: PlanStep, old: str, new: str, new_text: Optional[str] = None,
             new_target: Optional[Target] = None) -> None:
    task.goal = task.goal.replace(f'"{old}"', f'"{new}"')
    if new_text is not None:
        step.text = new_text
        if task.checker and task.checker["kind"] == "selected" and task.checker["value"] == old:
            task.checker = {**task.checker, "value": new}
    if new_target is not None:
        step.target = new_target


class PlanAgent:
    """`task.plan` as the episode's agent: each step resolved on the page's elements, the task
    rewritten in place where the page contradicts it (module docstring). It reads the page itself
    (`env.page`: the no-results text, a rejected form, the URL), as the refinement rules need."""

    def __init__(self, env: Any, task: SynthTask, web_task: Any, result: Collected, record_images: bool):
        self.env, self.task, self.web_task, self.result, self.record_images = env, task, web_task, result, record_images
        self.index, self.refined = 0, set()
        self.element: Optional[dict] = None  # the current step's resolved target

    def __call__(self, request: Any, result: Any) -> Decided | EndEpisode:
        if request.history:  # the previous planned step was taken
            failed = self.failed(result)
            if failed is not None:
                return failed
            self.index += 1
        if self.index >= len(self.task.plan):
            return EndEpisode("plan_done")
        dropped = self._resolve(result.info)
        return dropped if dropped is not None else self._act(request.observation)

    def failed(self, result: Any) -> Optional[EndEpisode]:
        """The drop when the env reported an error for the planned step that led to `result`."""
        error = result.observation["last_action_error"]
        return self._drop(f"action_failed: {error[:120]}") if error else None

    def _resolve(self, info: dict) -> Optional[EndEpisode]:
        """Rewrite the current step until it resolves on the page; the drop when it cannot."""
        while True:
            step = self.task.plan[self.index]
            element = resolve_target(step.target, info["elements"]) if step.target is not None else None
            missing = step.target is not None and element is None
            if not missing and step.kind == "select" and step.text not in (element.get("options") or []):
                missing = True
            if not missing:
                self.element = element
                return None
            if NO_RESULTS.search(_page_text(self.env)):
                return self._drop("no_results")
            here = self.env.page.url if self.env.page is not None else ""
            reason = None if self.index in self.refined else _substitute(self.task, self.index, {**info, "url": here})
            if reason is None:
                return self._drop(f"option_missing: {step.text!r}" if element is not None
                                  else f"target_missing: {step.target.describe()}")
            self.result.refinements.append(reason)
            self.refined.add(self.index)  # one rewrite per step: a second contradiction drops the task
            self.web_task.spec.goal, self.web_task.spec.params["checker"] = self.task.goal, self.task.checker

    def _act(self, observation: Observation) -> Decided | EndEpisode:
        action = self.task.plan[self.index].to_action(int(self.element["id"]) if self.element is not None else None)
        if action.is_terminal and self.task.category == "form" and _form_rejected(self.env):
            return self._drop("form_rejected")
        return synth_decision(action, observation, self.record_images)

    def _drop(self, reason: str) -> EndEpisode:
        self.result.drop_reason = reason
        return EndEpisode(reason.split(":")[0])


class StallAgent:
    """An acting policy (the `Policy` protocol) as the episode's agent for a plan-less task; it
    ends the episode ("stalled") when 3 steps in a row changed nothing or the same error came twice."""

    def __init__(self, policy: Any, record_images: bool):
        self.policy, self.record_images = policy, record_images
        self.before: Optional[tuple[str, str]] = None
        self.unchanged, self.errors = 0, []

    def __call__(self, request: Any, result: Any) -> Decided | EndEpisode:
        if self.before is not None and self.stalled(result):
            return EndEpisode("stalled")
        self.before = page_state(result.observation["url"], result.observation["elements_text"])
        decision = self.policy.act([request])[0]
        return synth_decision(decision.parsed, request.observation, self.record_images)

    def stalled(self, result: Any) -> bool:
        """Count the step that led to `result`; True when the task has stalled."""
        obs = result.observation
        after = page_state(obs["url"], obs["elements_text"])
        self.unchanged = self.unchanged + 1 if after == self.before and not result.terminated else 0
        if obs["last_action_error"]:
            self.errors.append(obs["last_action_error"])
        return self.unchanged >= 3 or (len(self.errors) >= 2 and self.errors[-1] in self.errors[:-1])


def run_plan(env: Any, task: SynthTask, record_images: bool = True) -> Collected:
    """Execute `task.plan` step by step in the `WebEnv` `env`, refining the task where the page
    contradicts it."""
    result = Collected(task)
    web_task = task.web_task()
    agent = PlanAgent(env, task, web_task, result, record_images)
    episode = _collect(env, web_task, agent, len(task.plan), result)
    if episode is None or (episode.trajectory.turns and agent.failed(episode.final) is not None):
        return result  # the last step's error: the runner ended the episode before the agent saw it
    return _ended(result, episode, "plan_did_not_end_the_episode")


def run_policy(env: Any, task: SynthTask, policy: Any, record_images: bool = True) -> Collected:
    """Collect a plan-less task with `policy` (the `Policy` protocol), dropping it when stalled."""
    result = Collected(task)
    web_task = task.web_task()
    agent = StallAgent(policy, record_images)
    episode = _collect(env, web_task, agent, env.config.max_steps or web_task.spec.max_steps, result)
    if episode is None:
        return result
    if episode.trajectory.info.stopped_by == "stalled" or agent.stalled(episode.final):
        result.drop_reason = "stalled"
        return result
    return _ended(result, episode, "max_steps")


def _collect(env: Any, web_task: Any, agent: Any, max_turns: int, result: Collected) -> Optional[Episode]:
    """The episode, or None when the agent or an infrastructure failure dropped the task."""
    try:
        episode = run_episode(EpisodeSpec(web_task, max_turns=max(1, max_turns)), GymSlot(env), agent)
    except EpisodeInfraError as error:
        result.drop_reason = f"infra_error: {error}"
        return None
    return None if result.drop_reason else episode


def _ended(result: Collected, episode: Episode, unfinished: str) -> Collected:
    """`result` with the episode's trajectory and outcome, and the drop reason if it failed
    (`unfinished`: the reason when the episode ran out without ending)."""
    task, final = result.task, episode.final
    finish(episode.trajectory, final.reward, final.terminated, final.info, task)
    result.trajectory, result.reward = episode.trajectory, episode.trajectory.info.task_reward
    if not final.terminated:
        result.drop_reason = unfinished
    elif task.checker is not None and final.reward < 1.0:
        result.drop_reason = "checker_failed"
    return result

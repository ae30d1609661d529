"""Collection with task refinement: run each task's plan (templates) or an acting policy (LLM
proposals) in a `WebEnv`, recording one `Turn` per step in the oracle-demonstration form
(`webrl.envs.sites.demos`: Set-of-Mark screenshot, compact elements; here `decided_by="synth"`
and no response_text, so `webrl sft` renders each action in the training policy's own format).

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
Departure from SynthAgent: its refiner is an LLM that rewrites the task from the history; these
rules rewrite only what a template can know (the target's name, the option, the checker).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from webrl.actions import Action
from webrl.envs.observation import compact_elements
from webrl.synth.explore import categorise
from webrl.synth.propose import path_of, real_options
from webrl.synth.tasks import PlanStep, SynthTask, Target, resolve_target
from webrl.envs.task import origin
from webrl.types import Image, Trajectory, TrajectoryInfo, Turn, TurnObservation

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


def make_turn(obs: dict, info: dict, action: Optional[Action], record_images: bool, response_text: str = "",
              parse_error: Optional[str] = None) -> Turn:
    images = [Image.from_array(obs["screenshot"])] if record_images else []
    observation = TurnObservation(url=obs["url"], title=obs["title"], elements_text=obs["elements_text"],
                                  feedback=obs["feedback"], last_action_error=obs["last_action_error"],
                                  step=int(obs["step"]), screenshot_size=list(obs["screenshot"].shape[1::-1]),
                                  elements=compact_elements(info.get("elements", ())))
    # no text for a planned action: `webrl sft` then renders the action in the training policy's
    # format, as it does for oracle demos (a compact "click(3)" target would teach another format)
    return Turn(images=images, response_text=response_text, action=action, parse_error=parse_error, decided_by="synth",
                observation=observation)


def new_trajectory(task: SynthTask) -> Trajectory:
    return Trajectory(task_id=task.id, goal=task.goal,
                      info=TrajectoryInfo(site="synth", start_url=task.start_url,
                                          task_params={"category": task.category, "checker": task.checker}))


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


def run_plan(env: Any, task: SynthTask, record_images: bool = True) -> Collected:
    """Execute `task.plan` step by step, refining the task where the page contradicts it."""
    result = Collected(task)
    web_task = task.web_task()
    obs, info = env.reset(options={"task": web_task})
    traj = new_trajectory(task)
    reward, terminated, index, refined = 0.0, False, 0, set()
    while index < len(task.plan):
        step = task.plan[index]
        element = resolve_target(step.target, info["elements"]) if step.target is not None else None
        missing = step.target is not None and element is None
        if not missing and step.kind == "select" and step.text not in (element.get("options") or []):
            missing = True
        if missing:
            if NO_RESULTS.search(_page_text(env)):
                result.drop_reason = "no_results"
                return result
            here = env.page.url if env.page is not None else ""
            reason = None if index in refined else _substitute(task, index, {**info, "url": here})
            if reason is None:
                result.drop_reason = (f"option_missing: {step.text!r}" if element is not None
                                      else f"target_missing: {step.target.describe()}")
                return result
            result.refinements.append(reason)
            refined.add(index)  # one rewrite per step: a second contradiction drops the task
            web_task.spec.goal, web_task.spec.params["checker"] = task.goal, task.checker
            continue  # resolve the rewritten step again
        action = step.to_action(int(element["id"]) if element is not None else None)
        if action.is_terminal and task.category == "form" and _form_rejected(env):
            result.drop_reason = "form_rejected"
            return result
        turn = make_turn(obs, info, action, record_images)
        obs, reward, terminated, truncated, info = env.step(action)
        turn.feedback = obs["feedback"]
        traj.turns.append(turn)
        if obs["last_action_error"]:
            result.drop_reason = f"action_failed: {obs['last_action_error'][:120]}"
            return result
        if terminated or truncated:
            break
        index += 1
    return _ended(result, traj, reward, terminated, info, "plan_did_not_end_the_episode")


def run_policy(env: Any, task: SynthTask, policy: Any, record_images: bool = True) -> Collected:
    """Collect a plan-less task with `policy` (the `Policy` protocol), dropping it when stalled."""
    from webrl.policy.types import Observation, PolicyRequest

    result = Collected(task)
    obs, info = env.reset(options={"task": task.web_task()})
    traj = new_trajectory(task)
    reward, terminated, truncated, unchanged, errors = 0.0, False, False, 0, []
    while not (terminated or truncated):
        observation = Observation.from_env(obs, info, screenshot="som")
        decision = policy.act([PolicyRequest(observation, list(traj.turns))])[0]
        action = decision.action
        error = decision.parse_error.message if decision.parse_error is not None else None
        turn = make_turn(obs, info, action, record_images, parse_error=error)
        before = state_key(turn)
        obs, reward, terminated, truncated, info = env.step(action if action is not None else decision.response_text)
        turn.feedback = obs["feedback"]
        traj.turns.append(turn)
        after = page_state(obs["url"], obs["elements_text"])
        unchanged = unchanged + 1 if after == before and not terminated else 0
        if obs["last_action_error"]:
            errors.append(obs["last_action_error"])
        if unchanged >= 3 or (len(errors) >= 2 and errors[-1] in errors[:-1]):
            result.drop_reason = "stalled"
            return result
    return _ended(result, traj, reward, terminated, info, "max_steps")


def _ended(result: Collected, traj: Trajectory, reward: float, terminated: bool, info: dict,
           unfinished: str) -> Collected:
    """`result` with the episode's trajectory and outcome, and the drop reason if it failed
    (`unfinished`: the reason when the episode ran out without ending)."""
    task = result.task
    finish(traj, reward, terminated, info, task)
    result.trajectory, result.reward = traj, traj.info.task_reward
    if info.get("infra_error"):
        result.drop_reason = f"infra_error: {info['infra_error']}"
    elif not terminated:
        result.drop_reason = unfinished
    elif task.checker is not None and reward < 1.0:
        result.drop_reason = "checker_failed"
    return result

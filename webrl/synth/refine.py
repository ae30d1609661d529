"""Trajectory refinement after collection, with the whole trajectory in view.

`refine_steps(trajectory)` (pure) decides which turns to remove; the state before turn t is
`state_key(turns[t])` (URL + element-list digest), the state after it is the state before turn
t + 1, and the final (terminal) turn is always kept:
  failed_action  turn t + 1's observation carries last_action_error (or turn t did not parse)
  no_op          the state after turn t equals the state before it
  loop           among the remaining turns, a stretch whose actions only navigate (click, goto,
                 back, forward, scroll, hover) and which comes back to the state it left
                 (A -> B -> A): every turn of the stretch; scanned left to right, longest first
Content edits (type, select, press) never count as part of a loop: their effect may live on the
server where the element list does not show it.

`refine_trajectory(env, trajectory, task)` replays the kept actions from a fresh episode (the
element ids still hold: each kept turn starts from the same state as before; one episode of the
episode runner with `ReplayAgent`, so the refined trajectory records what the replay showed) and
re-checks the end: the replay must raise no action error, end in the same state, and score at least the
original checker reward (tasks without a checker: the same final state). If the replay
disagrees, the original trajectory is kept and the report says so.

Departure from SynthAgent: its refiner is an LLM that scores the trajectory and may reorder or
delete steps (keep / refine / drop); here deletion follows the rules above and nothing is
reordered, and a replay, not a judgement, confirms the result.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from webrl.actions import Action
from webrl.rollout.episode import Decided, EndEpisode, EpisodeInfraError, EpisodeSpec, run_episode
from webrl.rollout.slots import GymSlot
from webrl.synth.collect import finish, state_key, synth_decision
from webrl.synth.tasks import SynthTask
from webrl.types import Trajectory

NAVIGATION_KINDS = ("click", "click_at", "goto", "back", "forward", "scroll", "scroll_at", "hover", "hover_at")


@dataclass
class TrajectoryRefinement:
    """What refinement did to one trajectory. removed: turn index -> reason."""

    task_id: str
    turns_before: int
    removed: dict[int, str] = field(default_factory=dict)
    replay: str = "not_needed"
    """"not_needed" (nothing removed), "confirmed" (the shortened replay ends as the original),
    or "failed_kept_original"."""

    def to_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "turns_before": self.turns_before,
                "removed": {str(k): v for k, v in sorted(self.removed.items())}, "replay": self.replay}


def refine_steps(traj: Trajectory) -> dict[int, str]:
    """Turn index -> removal reason (module docstring); the other turns are kept, in order."""
    turns, removed = traj.turns, {}
    states = [state_key(t) for t in turns]
    last = len(turns) - 1
    for t in range(last):
        if turns[t].action is None or turns[t + 1].observation.last_action_error:
            removed[t] = "failed_action"
        elif states[t] == states[t + 1] and not turns[t].action.is_terminal:
            removed[t] = "no_op"
    kept = [t for t in range(len(turns)) if t not in removed]
    a = 0
    while a < len(kept) - 1:
        # kept[b] is the turn that starts in the state the stretch kept[a:b] returns to
        ends = [b for b in range(len(kept) - 1, a, -1) if states[kept[b]] == states[kept[a]]
                and all(turns[k].action.kind in NAVIGATION_KINDS for k in kept[a:b])]
        if ends:
            for k in kept[a:ends[0]]:
                removed[k] = "loop"
            a = ends[0]
        else:
            a += 1
    return removed


class ReplayAgent:
    """Takes `actions` in order, one a turn (as synthesis records them: `synth_decision`), and
    ends the episode ("action_error") as soon as the env reports an error for one."""

    def __init__(self, actions: Sequence[Action], record_images: bool = True):
        self.actions, self.record_images = list(actions), record_images

    def __call__(self, request: Any, result: Any) -> Decided | EndEpisode:
        if request.history and result.observation.get("last_action_error"):
            return EndEpisode("action_error")
        return synth_decision(self.actions[len(request.history)], request.observation, self.record_images)


def _replay(env: Any, task: SynthTask, actions: list, record_images: bool) -> tuple[Optional[Trajectory], float]:
    """The replayed trajectory and its reward; None when an action errs, the episode ends early
    or does not end, or the env fails."""
    try:
        episode = run_episode(EpisodeSpec(task.web_task(), max_turns=len(actions)), GymSlot(env),
                              ReplayAgent(actions, record_images))
    except EpisodeInfraError:
        return None, 0.0
    final = episode.final
    if len(episode.trajectory.turns) < len(actions) or final.observation["last_action_error"] or not final.terminated:
        return None, 0.0
    finish(episode.trajectory, final.reward, final.terminated, final.info, task)
    return episode.trajectory, float(final.reward)


def refine_trajectory(env: Any, traj: Trajectory, task: SynthTask,
                      record_images: bool = True) -> tuple[Trajectory, TrajectoryRefinement]:
    """The refined trajectory (or the original when the replay disagrees) and the report."""
    report = TrajectoryRefinement(traj.task_id, len(traj.turns), refine_steps(traj))
    if not report.removed:
        return traj, report
    kept = [t for i, t in enumerate(traj.turns) if i not in report.removed]
    replayed, reward = _replay(env, task, [t.action for t in kept], record_images)
    original_reward = traj.info.task_reward or 0.0
    same_end = replayed is not None and [state_key(t) for t in replayed.turns] == [state_key(t) for t in kept]
    if replayed is None or not same_end or (task.checker is not None and reward < original_reward):
        report.replay = "failed_kept_original"
        return traj, report
    report.replay = "confirmed"
    return replayed, report

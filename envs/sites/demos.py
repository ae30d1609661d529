"""Oracle rollouts through `WebEnv`: the supervised demonstrations for SFT initialisation.

`run_oracle_episode(env, task)` resets `env` on `task`, asks `task.oracle_action` for every
step (it sees `oracle_view(obs, info)`: what the env shows, never hidden state) and
records one `Turn` per step: the Set-of-Mark screenshot the policy would see, the action in the
compact grammar as the response text, the env's feedback and a few small observation fields.
Turns carry no token ids (`decided_by="oracle"`); the SFT converter tokenises them. The env's
checker outcome goes to `trajectory.info.task_reward` (`trajectory.reward` is left to a reward
function, as for rollouts).

`turn.observation.elements` keeps the Set-of-Mark element list of `info["elements"]` in a
compact form (`compact_elements`: id, bbox, role, tag, name, in_viewport, and options/selected
for selects; no value, href or raw HTML): the decision heads train on these boxes and options
(`webrl.policy.cascade.features.marked_from_turn`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from webrl.actions import Action
from webrl.envs.observation import compact_elements, oracle_view
from webrl.types import Image, Trajectory, TrajectoryInfo, Turn, TurnObservation


@dataclass
class OracleResult:
    trajectory: Trajectory
    reward: float
    steps: int
    infra_error: Optional[str] = None


def _turn(obs: dict, action: Action, record_images: bool, elements: Sequence[dict] = ()) -> Turn:
    images = [Image.from_array(obs["screenshot"])] if record_images else []
    observation = TurnObservation(url=obs["url"], title=obs["title"], elements_text=obs["elements_text"],
                                  last_action_error=obs["last_action_error"], step=int(obs["step"]),
                                  screenshot_size=list(obs["screenshot"].shape[1::-1]),
                                  elements=compact_elements(elements))
    return Turn(images=images, response_text=action.to_compact(), action=action,
                decided_by="oracle", observation=observation)


def run_oracle_episode(env: Any, task: Any, record_images: bool = True) -> OracleResult:
    """One episode of `task` driven by its oracle; reward as the env computed it."""
    obs, info = env.reset(options={"task": task})
    traj = Trajectory(task_id=task.spec.id, goal=task.spec.goal,
                      info=TrajectoryInfo(site=task.spec.site, level=task.spec.level, split=task.spec.split,
                                          start_url=task.spec.start_url))
    reward, steps, terminated, truncated = 0.0, 0, False, False
    while not (terminated or truncated):
        action = task.oracle_action(oracle_view(obs, info)) or Action.stop()
        turn = _turn(obs, action, record_images, info.get("elements", ()))
        obs, reward, terminated, truncated, info = env.step(action)
        turn.feedback = obs["feedback"]
        traj.turns.append(turn)
        steps += 1
    infra = info.get("infra_error")
    traj.info.task_reward = float(reward)
    traj.info.terminated, traj.info.truncated = bool(terminated), not terminated
    traj.info.checker_details = dict(info.get("reward_details") or {})
    if infra:
        traj.drop(f"infra_error: {infra}")
    return OracleResult(traj, float(reward), steps, infra)

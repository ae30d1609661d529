"""The pieces of one RL iteration that `Trainer.step` calls: this iteration's task draw (balanced
rollout's plan), Dyna-GRPO's SimRollout phase, the success threshold both share, and the
collection metrics of the iteration's log line.

Every draw depends only on (run.seed, iteration) and, with balanced rollout, on the success
estimates, which checkpoints keep: a resumed run draws what an uninterrupted one would.
"""
from __future__ import annotations

import random
import time
from typing import Any, Optional

from webrl.envs.task import draw_tasks, task_rng
from webrl.reward import score_trajectories
from webrl.rollout.balanced import SuccessEstimates, family_key, informative_groups, plan_metrics, plan_rollouts
from webrl.rollout.dyna import SimRollout, choose_states, refined_samples, with_plain_logprobs
from webrl.run.config import WebRLConfig
from webrl.run.parts import RunParts


def draw_iteration(config: WebRLConfig, source: Any, estimates: SuccessEstimates,
                   iteration: int) -> tuple[list, Optional[list[int]], dict[str, float]]:
    """This iteration's tasks, their group sizes (None: rollout.group_size each) and the plan's
    metrics; with balanced rollout the tasks are planned from `candidate_factor` x more draws."""
    rng, n = task_rng(config.run.seed, "rl", iteration), config.tasks.tasks_per_iteration
    balanced = config.rollout.balanced
    if not balanced.enabled:
        return draw_tasks(source, rng, n), None, {}
    candidates = draw_tasks(source, rng, n * balanced.candidate_factor)
    keys = [family_key(task.spec.id) for task in candidates]
    plan = plan_rollouts(keys, estimates, n * config.rollout.group_size, balanced)
    return [candidates[i] for i, _ in plan], [size for _, size in plan], plan_metrics(keys, estimates, plan)


def sim_rollout(config: WebRLConfig, parts: RunParts, learner: Any, tasks: list, trajectories: list,
                iteration: int) -> tuple[list, dict[str, float]]:
    """Dyna-GRPO's SimRollout phase (`webrl.rollout.dyna`): refine states of the collected
    trajectories with the real future states their responses led to, run and score the refined
    episodes, and return the refined responses as samples on the plain prompts (advantage A',
    old log-probs recomputed by `learner` on those prompts) with the phase's metrics."""
    t0 = time.monotonic()
    rng = random.Random(f"dyna:{config.run.seed}:{iteration}")  # depends only on (seed, iteration), as draws do
    states = choose_states(trajectories, config.dyna.states_per_iteration, rng)
    simulated = SimRollout(parts.coordinator, config.dyna).run(
        {task.spec.id: task for task in tasks}, trajectories, states, config.rollout.horizon(iteration))
    score_trajectories(parts.reward_fn, [episode for state in simulated for episode in state.refined])
    samples, metrics = refined_samples(simulated, trajectories, config.dyna, success_threshold(config))
    samples = with_plain_logprobs(samples, learner)
    return samples, {"dyna/sim_iteration": 1.0, **metrics, "dyna/time_s": time.monotonic() - t0}


def success_threshold(config: WebRLConfig) -> float:
    """The reward counted as a success: the GRPO advantage config's, else credit's PPO one."""
    from webrl.learner.credit import SUCCESS_THRESHOLD

    advantage = getattr(config.learner.objective_config, "advantage", None)
    return advantage.success_threshold if advantage is not None else SUCCESS_THRESHOLD


def collect_metrics(trajectories: list, stats: Any, version: int, collect_s: float) -> dict[str, float]:
    """The collection's part of the iteration's metrics (`stats`: the coordinator's `RolloutStats`;
    `version`: the learner's policy version when the collection was asked for; informative groups:
    groups of scored trajectories whose rewards differ). `dropped` counts the rollout's drops
    (infrastructure, env errors); a judge's drops at scoring are `reward/n_dropped`; `retries` the
    trajectories restarted after an infrastructure error."""
    informative = informative_groups(trajectories)
    return {"informative_groups": float(informative),
            "informative_groups_per_min": informative / max(collect_s / 60.0, 1e-9),
            "trajectories": stats.trajectories, "dropped": stats.dropped, "retries": stats.retries,
            "env_steps": stats.env_steps,
            "env_steps_per_s": stats.steps_per_s, "log_bytes": stats.log_bytes,
            "prompt_tokens": stats.prompt_tokens, "cached_prompt_tokens": stats.cached_tokens,
            "time_collect_s": collect_s, "staleness": staleness(trajectories, version), "stale": stats.stale}


def staleness(trajectories, version: int) -> float:
    """Most policy versions any collected turn lags behind `version` (0 in sync mode)."""
    versions = [t.policy_version for traj in trajectories for t in traj.turns if t.policy_version >= 0]
    return float(max((version - v for v in versions), default=0))

"""`start_parts`: the rollout side of a run, wired over the actors `RunActors` started.

    parts = start_parts(config, actors, model_path, run_dir, log, rollout=True)
    parts.coordinator.collect(tasks, iteration)     # G trajectories per task (rollout=True only)
    parts.evaluator.evaluate("before", iteration)   # held-out success
    score_trajectories(parts.reward_fn, trajectories)

Actors, in start order (the order fixes their bundles and is kept for reproducibility): env
workers (`resources.num_env_workers`, `env.num_slots` episode slots each), the greedy evaluation
inference worker when tasks.eval_tasks > 0 (bundle `layout.inference + num_inference_workers`;
eval.endpoint's engine when only evaluating), then the rollout's inference workers (bundles `layout.inference + 0..N-1`),
or, when only evaluating with eval.samples_per_task, one sampler of its own. Every inference
worker serves `config.policy`'s wrapper stack; greedy evaluation differs only in decoding.
`start_parts` returns once every actor is constructed (`RunActors.wait_started`, with a deadline).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from webrl.evaluation.evaluator import Evaluator
from webrl.reward import build_reward, score_trajectories
from webrl.policy.seeds import derive_seed
from webrl.rollout import ProgressBar, RolloutCoordinator, TrajectoryLog
from webrl.envs.task import draw_tasks, task_rng
from webrl.run.config import WebRLConfig
from webrl.run.tasks import task_sources


@dataclass
class RunParts:
    """reward_fn: scores trajectories in place. train_source: where training tasks are drawn.
    evaluator: held-out evaluation. coordinator: the rollout (None when only evaluating).
    collector: an AsyncCollector over the coordinator when rollout.mode=async, else None.
    trajectory_log: the viewer's log, written once a trajectory is scored (so it carries the
    final reward and the judge's verdict): by the trainer for rollouts, by the evaluator when
    only evaluating."""

    reward_fn: Any
    train_source: Any
    evaluator: Evaluator
    coordinator: Optional[RolloutCoordinator] = None
    collector: Any = None
    trajectory_log: Optional[TrajectoryLog] = None


def evaluation_rollout(rollout: Any, group_size: int) -> Any:
    """The rollout settings of an evaluation: `group_size` episodes per task, and no balanced
    adaptive rollout (an evaluation runs the tasks it is given; it draws and plans nothing)."""
    from webrl.rollout.balanced import BalancedRolloutConfig

    return dataclasses.replace(rollout, group_size=group_size, balanced=BalancedRolloutConfig())


def start_parts(config: WebRLConfig, actors: Any, model_path: str, run_dir: Path, log: Callable,
                rollout: bool, iteration: int = 0) -> RunParts:
    """Rewards, task sources, env workers, inference workers, coordinators and the evaluator.
    `rollout=False`: only what an evaluation needs (eval.endpoint served when one is set)."""
    cfg, res = config, config.resources
    reward_fn = build_reward(cfg.reward)
    train_source, eval_source = task_sources(cfg.tasks, max_steps=cfg.rollout.max_turns, reward=cfg.reward)
    slots = actors.start_env_workers()
    trajectory_log = TrajectoryLog(run_dir, sample=cfg.rollout.log_trajectories, seed=cfg.run.seed,
                                   images=cfg.rollout.log_images)
    greedy_coordinator = None
    if cfg.tasks.eval_tasks:  # no evaluation worker for a run without evaluation tasks
        greedy = dataclasses.replace(cfg.generator, sampling=dataclasses.replace(cfg.generator.sampling, greedy=True))
        greedy_worker = actors.start_inference(model_path, greedy, res.num_inference_workers,
                                               endpoint=bool(cfg.eval.endpoint) and not rollout)
        greedy_coordinator = RolloutCoordinator(slots, greedy_worker, evaluation_rollout(cfg.rollout, 1),
                                                on_trajectory=None, progress=ProgressBar())
    sampler: list = []
    coordinator = None
    if rollout:
        sampler = actors.start_inference(model_path, cfg.generator, 0, res.num_inference_workers)
        coordinator = RolloutCoordinator(slots, sampler, cfg.rollout, on_trajectory=None,
                                         progress=ProgressBar(), seed=cfg.run.seed)
    sampled = None
    if cfg.eval.samples_per_task and cfg.tasks.eval_tasks:  # the rollout's sampler; its own when only evaluating
        sampler = sampler or actors.start_inference(model_path, cfg.generator, 0)
        sampled = RolloutCoordinator(slots, sampler, evaluation_rollout(cfg.rollout, cfg.eval.samples_per_task),
                                     on_trajectory=None, progress=ProgressBar(), seed=derive_seed(cfg.run.seed, "eval"))
    evaluator = Evaluator(eval_source, greedy_coordinator, lambda t: score_trajectories(reward_fn, t), log,
                          run_dir / "eval_outcomes.jsonl", tasks=cfg.tasks.eval_tasks, seed=cfg.run.seed,
                          sampled=sampled, samples_per_task=cfg.eval.samples_per_task if sampled else 0,
                          record=None if rollout else trajectory_log)
    actors.wait_started()
    collector = None
    if coordinator is not None and cfg.rollout.mode == "async":  # draws on the collector's own thread and RNG
        from webrl.rollout import AsyncCollector

        rng = task_rng(cfg.run.seed, "rl", 10**6 + iteration)
        collector = AsyncCollector(coordinator, lambda: draw_tasks(train_source, rng, 1)[0], progress=ProgressBar())
    return RunParts(reward_fn, train_source, evaluator, coordinator, collector, trajectory_log)

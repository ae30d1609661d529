"""`Evaluator`: held-out success of the policy being trained, as the run logs and compares it.

    evaluator = Evaluator(source, greedy_coordinator, score, log, run_dir / "eval_outcomes.jsonl",
                          tasks=48, seed=0, sampled=sampled_coordinator, samples_per_task=4)
    result = evaluator.evaluate("before", iteration=0)    # -> Evaluation(metrics, tasks, trajectories)

Each evaluation draws the same tasks (the eval stream of `task_rng(seed, "eval")`, in order for
a fixed tasks file), runs one greedy episode per task and, with `samples_per_task = K > 0`, K
episodes per task at the rollout temperature. It logs one `stage=eval` record (success, drops,
times) and appends the per-task outcomes, in draw order, to `eval_outcomes.jsonl`, so two
evaluations compare task by task (`benchmarks/learning_curve.py` counts the flips).

Success is `reward > 0` on scored trajectories; dropped ones are counted apart (webrl.evaluation.summary).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from webrl.evaluation.summary import summarize
from webrl.envs.task import draw_tasks, task_rng
from webrl.types import Trajectory


@dataclass
class Evaluation:
    """metrics: success, dropped, tasks, per_site_level (+ success_sampled); empty when the run
    evaluates no tasks. tasks / trajectories: the greedy episodes, in draw order. record: the
    line appended to eval_outcomes.jsonl ("outcomes", and "sampled" when sampling: lists of
    [task id, success or None])."""

    metrics: dict[str, Any] = field(default_factory=dict)
    tasks: list = field(default_factory=list)
    trajectories: list[Trajectory] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)


class Evaluator:
    """Greedy (and sampled) held-out evaluation over coordinators the caller started."""

    def __init__(self, source: Any, greedy: Any, score: Callable[[Sequence[Trajectory]], Any], log: Callable,
                 outcomes_path: Path, *, tasks: int, seed: int, sampled: Any = None, samples_per_task: int = 0):
        if tasks and greedy is None:
            raise ValueError(f"evaluating {tasks} tasks needs a greedy coordinator")
        if samples_per_task and sampled is None:
            raise ValueError("samples_per_task > 0 needs a sampled coordinator (group size = samples_per_task)")
        self.source, self.greedy, self.sampled = source, greedy, sampled
        self.score, self.log, self.outcomes_path = score, log, Path(outcomes_path)
        self.num_tasks, self.seed, self.samples_per_task = tasks, seed, samples_per_task

    def evaluate(self, label: str, iteration: int) -> Evaluation:
        """One evaluation, logged under `label` at `iteration`."""
        if not self.num_tasks:
            return Evaluation()
        tasks = draw_tasks(self.source, task_rng(self.seed, "eval"), self.num_tasks, in_order=True)
        t0 = time.monotonic()
        trajectories, _ = self.greedy.collect(tasks, iteration)
        self.score(trajectories)
        t_greedy = time.monotonic() - t0
        reasons = sorted({t.drop_reason for t in trajectories if t.status == "dropped"})
        if reasons:
            print(f"webrl eval: {len(reasons)} distinct drop reasons, e.g. {reasons[0]}")
        metrics = summarize(tasks, trajectories).as_metrics()
        record: dict[str, Any] = {"label": label, "iteration": iteration, "outcomes": [
            [task.spec.id, None if traj.status != "ok" else float((traj.reward or 0) > 0)]
            for task, traj in zip(tasks, trajectories)]}
        event: dict[str, Any] = {"stage": "eval", "label": label, "success": metrics["success"],
                                 "dropped": metrics["dropped"], "time_eval_s": t_greedy}
        if self.samples_per_task:
            t0 = time.monotonic()
            record["sampled"] = self._sampled_outcomes(tasks, iteration)
            event["time_eval_sampled_s"] = time.monotonic() - t0
            scored = [m for _, m in record["sampled"] if m is not None]
            metrics["success_sampled"] = event["success_sampled"] = sum(scored) / len(scored) if scored else 0.0
        self.log(event)
        with open(self.outcomes_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        return Evaluation(metrics, list(tasks), list(trajectories), record)

    def _sampled_outcomes(self, tasks: Sequence[Any], iteration: int) -> list[list]:
        """[task id, mean success of its K sampled episodes (None: all dropped)] per task, in draw
        order (the coordinator returns each task's group together, in task order)."""
        k = self.samples_per_task
        trajectories, _ = self.sampled.collect(tasks, iteration)
        self.score(trajectories)
        out: list[list] = []
        for i, task in enumerate(tasks):
            ok = [float((t.reward or 0) > 0) for t in trajectories[i * k:(i + 1) * k] if t.status == "ok"]
            out.append([task.spec.id, sum(ok) / len(ok) if ok else None])
        return out


def sampled_line(metrics: dict[str, Any], temperature: float, samples_per_task: int) -> Optional[str]:
    """The line `webrl eval` prints under its table when it also sampled."""
    if "success_sampled" not in metrics:
        return None
    return (f"overall, sampled at temperature {temperature:g} ({samples_per_task} per task): "
            f"{100 * metrics['success_sampled']:.1f}%")

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
Each evaluation prints its drop reasons with counts; `drop_failure` says when an evaluation
scored too little to mean anything (every trajectory dropped, or more than `eval.max_dropped_share`),
which makes `webrl eval` and `webrl train` exit non-zero. `record` (the trajectory log) receives
each greedy trajectory once it is scored, so the viewer shows the final reward and verdict.
"""
from __future__ import annotations

import json
import time
from collections import Counter
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
    drops: dict[str, int] = field(default_factory=dict)
    """Drop reason -> how many greedy trajectories it dropped, most frequent first."""


SAMPLED_GROUP_PREFIX = "eval"
"""The sampled evaluation's group-id prefix in place of the iteration (`_sampled_outcomes`)."""


class Evaluator:
    """Greedy (and sampled) held-out evaluation over coordinators the caller started."""

    def __init__(self, source: Any, greedy: Any, score: Callable[[Sequence[Trajectory]], Any], log: Callable,
                 outcomes_path: Path, *, tasks: int, seed: int, sampled: Any = None, samples_per_task: int = 0,
                 record: Optional[Callable[[Trajectory], Any]] = None):
        if tasks and greedy is None:
            raise ValueError(f"evaluating {tasks} tasks needs a greedy coordinator")
        if samples_per_task and sampled is None:
            raise ValueError("samples_per_task > 0 needs a sampled coordinator (group size = samples_per_task)")
        self.source, self.greedy, self.sampled = source, greedy, sampled
        self.score, self.log, self.outcomes_path = score, log, Path(outcomes_path)
        self.num_tasks, self.seed, self.samples_per_task = tasks, seed, samples_per_task
        self.record = record

    def evaluate(self, label: str, iteration: int) -> Evaluation:
        """One evaluation, logged under `label` at `iteration`."""
        if not self.num_tasks:
            return Evaluation()
        tasks = draw_tasks(self.source, task_rng(self.seed, "eval"), self.num_tasks, in_order=True)
        t0 = time.monotonic()
        trajectories, _ = self.greedy.collect(tasks, iteration)
        self.score(trajectories)
        t_greedy = time.monotonic() - t0
        for trajectory in trajectories if self.record is not None else ():
            self.record(trajectory)
        drops = dict(Counter(t.drop_reason for t in trajectories if t.status == "dropped").most_common())
        if drops:
            print(drop_lines(drops, len(trajectories), label))
        metrics = summarize(tasks, trajectories).as_metrics()
        record: dict[str, Any] = {"label": label, "iteration": iteration, "outcomes": [
            [task.spec.id, None if traj.status != "ok" else float((traj.reward or 0) > 0)]
            for task, traj in zip(tasks, trajectories)]}
        event: dict[str, Any] = {"stage": "eval", "label": label, "success": metrics["success"],
                                 "dropped": metrics["dropped"], "tasks": metrics["tasks"],
                                 "per_site_level": metrics["per_site_level"], "time_eval_s": t_greedy}
        if self.samples_per_task:
            t0 = time.monotonic()
            record["sampled"] = self._sampled_outcomes(tasks, iteration)
            event["time_eval_sampled_s"] = time.monotonic() - t0
            scored = [m for _, m in record["sampled"] if m is not None]
            metrics["success_sampled"] = event["success_sampled"] = sum(scored) / len(scored) if scored else 0.0
        self.log(event)
        with open(self.outcomes_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        return Evaluation(metrics, list(tasks), list(trajectories), record, drops)

    def _sampled_outcomes(self, tasks: Sequence[Any], iteration: int) -> list[list]:
        """[task id, mean success of its K sampled episodes (None: all dropped)] per task, in draw
        order (the coordinator returns each task's group together, in task order).

        Common random numbers: episode k of task i samples with the same seeds in every
        evaluation of the run (group ids "eval:i:task", not "{iteration}:i:task"), so the paired
        change before -> after measures the policy's change, not two independent draws: where the
        policy did not change, the same seeds give the same episode. Each evaluation alone is the
        same unbiased estimate as with fresh seeds; under "no change in success" each episode is
        as likely to flip up as down, so a task's change stays symmetric about 0 and the table's
        sign-flip test stays exact."""
        k = self.samples_per_task
        trajectories, _ = self.sampled.collect(tasks, iteration, group_prefix=SAMPLED_GROUP_PREFIX)
        self.score(trajectories)
        out: list[list] = []
        for i, task in enumerate(tasks):
            ok = [float((t.reward or 0) > 0) for t in trajectories[i * k:(i + 1) * k] if t.status == "ok"]
            out.append([task.spec.id, sum(ok) / len(ok) if ok else None])
        return out


def drop_lines(drops: dict[str, int], total: int, label: str) -> str:
    """`webrl eval (before): 3 of 5 trajectories dropped:` and one `  2 x REASON` line per reason."""
    lines = [f"webrl eval ({label}): {sum(drops.values())} of {total} trajectories dropped:"]
    return "\n".join([*lines, *(f"  {n} x {reason}" for reason, n in drops.items())])


def drop_failure(evaluation: Evaluation, max_dropped_share: float) -> Optional[str]:
    """Why `evaluation` scored too little to mean anything, or None: every greedy trajectory was
    dropped, or more than `max_dropped_share` of them (eval.max_dropped_share)."""
    total, dropped = len(evaluation.trajectories), sum(evaluation.drops.values())
    if not total or not dropped:
        return None
    if dropped == total:
        return f"every trajectory of the evaluation was dropped ({dropped} of {total}): nothing was scored"
    if dropped / total > max_dropped_share:
        return (f"{dropped} of {total} trajectories of the evaluation were dropped, more than "
                f"eval.max_dropped_share={max_dropped_share:g}")
    return None


def sampled_line(metrics: dict[str, Any], temperature: float, samples_per_task: int) -> Optional[str]:
    """The line `webrl eval` prints under its table when it also sampled."""
    if "success_sampled" not in metrics:
        return None
    return (f"overall, sampled at temperature {temperature:g} ({samples_per_task} per task): "
            f"{100 * metrics['success_sampled']:.1f}%")

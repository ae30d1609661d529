"""Dynamic sampling (DAPO): draw more tasks until the batch holds enough informative groups.

A GRPO group whose rewards are all equal has zero advantage and is filtered
(`learner.advantage.filter_zero_variance`), so an iteration that drew T groups may train on far
fewer. Dynamic sampling keeps drawing: after the iteration's groups are collected and scored,
while fewer than `target_groups` carry a reward difference, another round of tasks is drawn,
collected and scored, within `max_rounds` rounds and `max_extra_tasks` tasks; then the batch
trains on the first `target_groups` informative groups (in drawing order), so its size stays
constant. This module is the pure part (config, selection, how many and which tasks to draw);
`webrl.run.dynamic_sampling` runs the rounds. No Ray, no I/O.

Notation:
    T   target informative groups (target_groups; 0 = tasks.tasks_per_iteration)
    D   groups drawn so far this iteration (every round), I of them informative
    N   informative groups still needed, = max(0, T - I)
    G   rollout.group_size; p_i the estimated success rate of candidate i's family

Rounds (extra_task_count, rank_candidates):
    tasks of the next round = min(ceil(N * D / max(I, 1)), max_extra_tasks - extra drawn so far):
    the iteration's own informative rate so far, I / D, says how many draws yield N more
    (with I = 0, as if one in D had been informative).
    candidates: tasks x candidate_factor drawn from a stream of (run.seed, iteration, round);
    the tasks kept are those with the largest I(p_i, G) = 1 - p^G - (1-p)^G (balanced rollout's
    informative_probability under its success estimates), ties to the lower index.

What is from the paper (DAPO, arXiv 2503.14476) and what departs:
    - From the paper: over-sample and filter out prompts whose accuracy is 0 or 1, until the
      batch is full of prompts with effective gradients; the batch size stays constant.
    - Departure: DAPO samples until full; here the rounds and extra tasks are bounded, so a
      policy that solves everything (or nothing) costs at most max_extra_tasks x G rollouts and
      then trains on fewer groups. The next round's size comes from this iteration's own
      informative rate, not a fixed batch; candidates are ranked by the success estimates that
      balanced rollout keeps (the paper draws uniformly).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from webrl.rollout.balanced import SuccessEstimates, family_key, informative_probability

ROUND_STREAM = 1000
"""Round r >= 1 of iteration i draws from numpy's default_rng([seed, 1, i, ROUND_STREAM + r]):
not [seed, 1, i, r], because SeedSequence ignores trailing zeros ([s, 1, i, 0] == [s, 1, i])."""


@dataclass
class DynamicSamplingConfig:
    """DAPO's dynamic sampling (sync GRPO with zero-variance filtering): more rounds of tasks
    until the batch holds target_groups informative groups."""

    enabled: bool = True
    """Draw extra rounds of tasks while fewer than target_groups groups carry a reward difference
    (off by derivation under PPO, rollout.mode=async or learner.advantage.filter_zero_variance=false)."""
    target_groups: int = 0
    """Informative groups the iteration trains on (the first ones drawn; the rest are filtered);
    0 = tasks.tasks_per_iteration."""
    max_rounds: int = 2
    """Most extra rounds of collection after the iteration's first (0: none)."""
    max_extra_tasks: int = 0
    """Most extra tasks (groups) over all extra rounds; 0 = 2 x the target."""
    candidate_factor: int = 2
    """Candidates drawn per extra task, ranked by informative probability under the success
    estimates; 1 = keep the drawn tasks."""

    def __post_init__(self) -> None:
        name = "rollout.dynamic_sampling"
        if not isinstance(self.enabled, bool):
            raise ValueError(f"{name}.enabled must be true | false, got {self.enabled!r}")
        for field_name, low, meaning in (("target_groups", 0, " (0 = tasks.tasks_per_iteration)"),
                                         ("max_rounds", 0, ""), ("max_extra_tasks", 0, " (0 = 2 x the target)"),
                                         ("candidate_factor", 1, "")):
            value = getattr(self, field_name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name}.{field_name} must be an integer >= {low}{meaning}, got {value!r}")

    def target(self, tasks_per_iteration: int) -> int:
        return self.target_groups or tasks_per_iteration

    def extra_budget(self, tasks_per_iteration: int) -> int:
        return self.max_extra_tasks or 2 * self.target(tasks_per_iteration)


@dataclass(frozen=True)
class Selection:
    """Every drawn group in exactly one list (drawn = trained + filtered + dropped), by group id."""

    trained: list[str]
    """The first `target` informative groups in drawing order."""
    filtered: list[str]
    """Scored groups left out: rewards all equal (or one scored trajectory), or informative past the target."""
    dropped: list[str]
    """Groups without a scored trajectory (every rollout dropped)."""
    needed: int
    """Informative groups still missing for the target (0: the batch is full)."""


def select_groups(groups: dict[str, Sequence[float]], target: int) -> Selection:
    """Split `groups` ({group id: scored rewards}, in drawing order) for a batch of `target`."""
    trained, filtered, dropped = [], [], []
    for group_id, rewards in groups.items():
        if not rewards:
            dropped.append(group_id)
        elif len(set(rewards)) > 1 and len(trained) < target:
            trained.append(group_id)
        else:
            filtered.append(group_id)
    return Selection(trained, filtered, dropped, max(0, target - len(trained)))


def extra_task_count(needed: int, informative: int, drawn: int, budget_left: int) -> int:
    """Tasks of the next round: ceil(needed * drawn / max(informative, 1)), at most budget_left."""
    if needed <= 0 or budget_left <= 0:
        return 0
    return min(budget_left, math.ceil(needed * max(drawn, 1) / max(informative, 1)))


def rank_candidates(task_ids: Sequence[str], estimates: SuccessEstimates, count: int, group_size: int) -> list[int]:
    """Indices (ascending) of the `count` candidates with the largest I(p, group_size) under the
    family estimates: families seen to both succeed and fail, or not seen yet, before those seen
    always to fail or always to succeed. Ties go to the lower index."""
    score = [informative_probability(estimates.estimate(family_key(t)), group_size) for t in task_ids]
    return sorted(sorted(range(len(task_ids)), key=lambda i: (-score[i], i))[:count])


def round_rng(seed: int, iteration: int, round_index: int):
    """The draw stream of extra round `round_index` (>= 1) of `iteration`: depends only on
    (seed, iteration, round), so a seeded run repeats, and a resumed one redraws, the same tasks."""
    import numpy as np

    from webrl.envs.task import STREAMS

    return np.random.default_rng([seed, STREAMS["rl"], iteration, ROUND_STREAM + round_index])

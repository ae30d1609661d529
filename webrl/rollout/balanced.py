"""Balanced Adaptive Rollout: spend an iteration's rollouts where groups carry reward variance.

A GRPO group whose rewards are all equal has zero advantage everywhere and is dropped. This
module plans, before collection, which tasks to run and how many rollouts each gets so that
the expected number of groups with at least one success and one failure is high, while the
chosen tasks stay balanced between easy and hard ones. Pure Python; no Ray, no I/O.

Notation:
    T   tasks per iteration (groups), = len(candidate_keys) // candidate_factor
    K   candidates drawn, = T * candidate_factor
    B   rollouts per iteration, = T * G (G = rollout.group_size)
    p_i estimated success probability of candidate i's family
    n_i rollouts given to candidate i: 0 (not run) or in [min_group, max_group]; sum_i n_i = B

Formulas:
    I(p, n) = 1 - p^n - (1 - p)^n           P(a group of n has a success and a failure)
    D(p, n) = I(p, n+1) - I(p, n) = p^n (1 - p) + (1 - p)^n p    (decreasing in n: I is concave)
    family estimate: p = (a0 + s) / (a0 + b0 + s + f), a0 = prior_success_rate * prior_strength,
                     b0 = (1 - prior_success_rate) * prior_strength; each finished group first
                     multiplies the family's (s, f) by `forgetting`, then adds its own counts.

Plan (plan_rollouts):
    1. Split candidates into hard (p < 1/2: failure more likely than success) and easy.
    2. Choose T of them: floor(hard_fraction * T + 1/2) from the hard pool, the rest from the easy
       pool, each pool ranked by I(p, n0), n0 = B // T clipped to the group bounds (ties: lower
       index); a pool that runs short is filled from the other.
    3. Give every chosen task min_group rollouts, then hand out the rest one at a time to the
       chosen task with the largest D(p_i, n_i) below max_group (ties: lower index). Because I
       is concave in n, this maximises sum_i I(p_i, n_i) over the chosen set exactly.

What is from the paper (Orchard, arXiv 2605.15040) and what is interpretation:
    - From the paper (as its summaries state it; the method section itself was not available):
      Balanced Adaptive Rollout targets the two zero-variance failure modes of GRPO on sparse,
      binary agent rewards (every rollout succeeds on a task the model has mastered, every one
      fails on a task beyond it) by generating rollouts adaptively until a group with balanced
      positive and negative rewards can be formed.
    - Departure: the paper's scheme is sequential (sample, look, sample more). Here the
      coordinator runs a task's rollouts concurrently, so the sequential stopping rule is replaced
      by a plan made before collection from per-family success estimates: a task whose estimate
      is near 0 or 1 gets a bigger group (up to max_group), one near 1/2 a smaller one. Rollouts
      are not re-sampled within an iteration, and groups are not trimmed to an exact balance.
    - Interpretation: drawing K = T * candidate_factor candidates and keeping T; estimating per
      *family* (sandbox instances are fresh seeds, so a task id rarely repeats; see family_key);
      the Beta prior and forgetting; the easy / hard quota (hard_fraction) as the "balance between
      easy and hard tasks"; the objective "expected informative groups" (sum_i I(p_i, n_i)).
    - Choice: the plan uses the posterior mean p, not the expectation of I under the posterior,
      so a family seen once at 1/2 and one seen 100 times at 1/2 score alike.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence
from webrl.config import fixed

HARD_BELOW = 0.5
"""A family whose estimate is below this is "hard" (failure more likely than success)."""


@dataclass
class BalancedRolloutConfig:
    """Balanced Adaptive Rollout: task choice and group sizes from per-family success estimates."""

    enabled: bool = False
    """Plan each iteration's tasks and group sizes with plan_rollouts; off = T tasks x G rollouts."""
    candidate_factor: int = 2
    """Candidates drawn per task slot (K = T * candidate_factor); 1 = keep the drawn tasks and only
    size their groups."""
    min_group: int = 2
    """Fewest rollouts given to a chosen task (>= 2: a group of one is never informative)."""
    max_group: int = 16
    """Most rollouts given to a chosen task."""
    prior_success_rate: float = fixed(0.5, "an unseen family starts at even odds")
    """Prior mean success rate of a family not yet seen, in (0, 1)."""
    prior_strength: float = fixed(2.0, "the prior's weight in pseudo-observations")
    """Prior weight in pseudo-rollouts (a0 + b0); > 0."""
    forgetting: float = fixed(1.0, "the success estimates keep every observation")
    """Factor in (0, 1] applied to a family's past counts before each new group is added, so the
    estimate follows an improving policy; 1 = keep every past rollout at full weight."""
    hard_fraction: float = fixed(0.5, "half the chosen tasks come from the hard pool (estimate < 1/2)")
    """Target fraction, in [0, 1], of the chosen tasks drawn from the hard pool (estimate < 1/2)."""

    def __post_init__(self) -> None:
        name = "BalancedRolloutConfig"
        if not isinstance(self.enabled, bool):
            raise ValueError(f"{name}.enabled must be true | false, got {self.enabled!r}")
        for field_name, low in (("candidate_factor", 1), ("min_group", 2)):
            value = getattr(self, field_name)
            if not _is_int(value) or value < low:
                raise ValueError(f"{name}.{field_name} must be an integer >= {low}, got {value!r}")
        if not _is_int(self.max_group) or self.max_group < self.min_group:
            raise ValueError(f"{name}.max_group must be an integer >= min_group ({self.min_group}), "
                             f"got {self.max_group!r}")
        checks = (("prior_success_rate", 0.0, 1.0, False, False, "in (0, 1)"),
                  ("prior_strength", 0.0, math.inf, False, False, "> 0"),
                  ("forgetting", 0.0, 1.0, False, True, "in (0, 1]"),
                  ("hard_fraction", 0.0, 1.0, True, True, "in [0, 1]"))
        for field_name, low, high, low_ok, high_ok, allowed in checks:
            value = getattr(self, field_name)
            ok = _is_number(value) and (low <= value if low_ok else low < value) and (
                value <= high if high_ok else value < high)
            if not ok:
                raise ValueError(f"{name}.{field_name} must be {allowed}, got {value!r}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


_SEED_TAIL = re.compile(r"^(.+/.+)/\d+$")


def family_key(task_id: str) -> str:
    """A task id without its trailing seed: "shop/l1/train/add_to_cart/17" -> "shop/l1/train/add_to_cart".

    Only a numeric last segment after at least two others is a seed (sandbox and MiniWoB ids);
    a two-segment id such as "online_mind2web/123" names one fixed task and is kept whole.
    """
    match = _SEED_TAIL.match(task_id)
    return match.group(1) if match else task_id


class SuccessEstimates:
    """Per-family success counts with a Beta prior; estimate() is the posterior mean."""

    def __init__(self, prior_success_rate: float = 0.5, prior_strength: float = 2.0,
                 forgetting: float = 1.0):
        BalancedRolloutConfig(prior_success_rate=prior_success_rate, prior_strength=prior_strength,
                              forgetting=forgetting)  # same checks, same messages
        self.prior_success_rate = float(prior_success_rate)
        self.prior_strength = float(prior_strength)
        self.forgetting = float(forgetting)
        self.counts: dict[str, list[float]] = {}
        """family key -> [successes, failures] (fractional once forgetting < 1)."""

    @classmethod
    def from_config(cls, config: BalancedRolloutConfig) -> "SuccessEstimates":
        return cls(config.prior_success_rate, config.prior_strength, config.forgetting)

    def update(self, key: str, rewards: Sequence[float], threshold: float = 0.5) -> None:
        """Add one finished group: a reward >= `threshold` is a success. An empty group (every
        rollout dropped) teaches nothing and leaves the counts, forgetting included, unchanged."""
        values = [float(r) for r in rewards]
        if any(not math.isfinite(r) for r in values):
            raise ValueError(f"SuccessEstimates.update: rewards of {key!r} must be finite, got {values}")
        if not values:
            return
        successes = sum(r >= threshold for r in values)
        old = self.counts.get(key, [0.0, 0.0])
        self.counts[key] = [self.forgetting * old[0] + successes,
                            self.forgetting * old[1] + len(values) - successes]

    def estimate(self, key: str) -> float:
        """Posterior mean success rate of family `key` (the prior mean if never seen)."""
        successes, failures = self.counts.get(key, (0.0, 0.0))
        a0 = self.prior_success_rate * self.prior_strength
        return (a0 + successes) / (self.prior_strength + successes + failures)

    def state_dict(self) -> dict:
        """JSON-able state; from_state(state_dict()) estimates and plans exactly as self does."""
        return {"prior_success_rate": self.prior_success_rate, "prior_strength": self.prior_strength,
                "forgetting": self.forgetting,
                "counts": {key: list(value) for key, value in sorted(self.counts.items())}}

    @classmethod
    def from_state(cls, state: dict) -> "SuccessEstimates":
        missing = {"prior_success_rate", "prior_strength", "forgetting", "counts"} - set(state)
        if missing:
            raise ValueError(f"SuccessEstimates.from_state: missing keys {sorted(missing)}")
        estimates = cls(state["prior_success_rate"], state["prior_strength"], state["forgetting"])
        for key, value in state["counts"].items():
            if len(value) != 2 or any(not _is_number(v) or v < 0 for v in value):
                raise ValueError(f"SuccessEstimates.from_state: counts[{key!r}] must be "
                                 f"[successes >= 0, failures >= 0], got {value!r}")
            estimates.counts[str(key)] = [float(value[0]), float(value[1])]
        return estimates


def informative_probability(p: float, n: int) -> float:
    """I(p, n) = 1 - p^n - (1-p)^n: P(n Bernoulli(p) rollouts hold a success and a failure).
    0 for n < 2 (n = 0 would give -1 from the formula; a group of one cannot vary)."""
    if not (0.0 <= p <= 1.0) or not _is_int(n) or n < 0:
        raise ValueError(f"informative_probability needs p in [0, 1] and an integer n >= 0, got p={p!r}, n={n!r}")
    if n < 2:
        return 0.0
    return max(0.0, 1.0 - p ** n - (1.0 - p) ** n)


def marginal_gain(p: float, n: int) -> float:
    """D(p, n) = I(p, n+1) - I(p, n) for n >= 1: what one more rollout adds to a group of n."""
    return p ** n * (1.0 - p) + (1.0 - p) ** n * p


def _num_tasks(num_candidates: int, total_rollouts: int, config: BalancedRolloutConfig) -> int:
    factor = config.candidate_factor
    if num_candidates < factor or num_candidates % factor:
        raise ValueError(f"plan_rollouts: {num_candidates} candidates is not a positive multiple of "
                         f"BalancedRolloutConfig.candidate_factor={factor}")
    tasks = num_candidates // factor
    low, high = tasks * config.min_group, tasks * config.max_group
    if not _is_int(total_rollouts) or not low <= total_rollouts <= high:
        raise ValueError(f"plan_rollouts: total_rollouts={total_rollouts!r} cannot be split over {tasks} tasks "
                         f"with min_group={config.min_group}, max_group={config.max_group} "
                         f"(allowed: integers in [{low}, {high}])")
    return tasks


def choose_tasks(estimates: Sequence[float], num_tasks: int, nominal_group: int,
                 hard_fraction: float) -> list[int]:
    """Indices (ascending) of `num_tasks` candidates: the hard quota from the hard pool, the rest
    from the easy pool, each ranked by I(p, nominal_group) with ties to the lower index."""
    def ranked(pool: list[int]) -> list[int]:
        return sorted(pool, key=lambda i: (-informative_probability(estimates[i], nominal_group), i))

    hard = ranked([i for i, p in enumerate(estimates) if p < HARD_BELOW])
    easy = ranked([i for i, p in enumerate(estimates) if p >= HARD_BELOW])
    quota = min(math.floor(hard_fraction * num_tasks + 0.5), len(hard))
    quota = max(quota, num_tasks - len(easy))  # easy pool short: take more hard ones
    return sorted(hard[:quota] + easy[:num_tasks - quota])


def size_groups(estimates: Sequence[float], total_rollouts: int, min_group: int, max_group: int) -> list[int]:
    """Group sizes in [min_group, max_group] summing to total_rollouts that maximise
    sum_i I(p_i, n_i): start at min_group, then one rollout at a time to the largest D(p_i, n_i)."""
    sizes = [min_group] * len(estimates)
    for _ in range(total_rollouts - min_group * len(estimates)):
        open_tasks = [i for i, n in enumerate(sizes) if n < max_group]
        best = max(open_tasks, key=lambda i: (marginal_gain(estimates[i], sizes[i]), -i))
        sizes[best] += 1
    return sizes


def plan_rollouts(candidate_keys: Sequence[str], estimates: SuccessEstimates, total_rollouts: int,
                  config: BalancedRolloutConfig) -> list[tuple[int, int]]:
    """[(candidate index, rollouts), ...] in ascending index order: T = len(candidate_keys) //
    candidate_factor tasks whose rollouts sum to exactly `total_rollouts`, each in
    [min_group, max_group]. Deterministic: depends on the keys only through their estimates."""
    num_tasks = _num_tasks(len(candidate_keys), total_rollouts, config)
    p = [estimates.estimate(key) for key in candidate_keys]
    nominal = min(max(total_rollouts // num_tasks, config.min_group), config.max_group)
    chosen = choose_tasks(p, num_tasks, nominal, config.hard_fraction)
    sizes = size_groups([p[i] for i in chosen], total_rollouts, config.min_group, config.max_group)
    return list(zip(chosen, sizes))


def uniform_plan(num_tasks: int, total_rollouts: int) -> list[tuple[int, int]]:
    """What runs without balancing: the first `num_tasks` candidates, rollouts spread evenly
    (the remainder to the lowest indices)."""
    if num_tasks < 1 or total_rollouts < num_tasks:
        raise ValueError(f"uniform_plan needs 1 <= num_tasks <= total_rollouts, got {num_tasks}, {total_rollouts}")
    base, extra = divmod(total_rollouts, num_tasks)
    return [(i, base + (i < extra)) for i in range(num_tasks)]


def expected_informative_groups(plan: Sequence[tuple[int, int]], success_rates: Sequence[float]) -> float:
    """sum over the plan of I(p_i, n_i), p indexed by candidate."""
    return sum(informative_probability(success_rates[i], n) for i, n in plan)


def plan_metrics(candidate_keys: Sequence[str], estimates: SuccessEstimates,
                 plan: Sequence[tuple[int, int]]) -> dict[str, float]:
    """Scalars for the trainer's log, all under the estimates (not the rewards that follow):
    expected informative groups of the plan and of uniform_plan with the same budget, chosen
    hard / easy counts, smallest and largest group, and unseen families among the chosen."""
    p = [estimates.estimate(key) for key in candidate_keys]
    total = sum(n for _, n in plan)
    chosen_p = [p[i] for i, _ in plan]
    return {
        "balanced/expected_informative_groups": expected_informative_groups(plan, p),
        "balanced/uniform_expected_informative_groups": expected_informative_groups(
            uniform_plan(len(plan), total), p),
        "balanced/chosen_hard": float(sum(q < HARD_BELOW for q in chosen_p)),
        "balanced/chosen_easy": float(sum(q >= HARD_BELOW for q in chosen_p)),
        "balanced/min_group": float(min(n for _, n in plan)),
        "balanced/max_group": float(max(n for _, n in plan)),
        "balanced/chosen_unseen": float(sum(candidate_keys[i] not in estimates.counts for i, _ in plan)),
    }


# -- what the trainer reads back from a collection ----------------------------------------------
def scored_groups(trajectories: Sequence) -> dict[str, tuple[str, list[float]]]:
    """{group_id: (family key, rewards of its scored "ok" trajectories)} in order of appearance.
    Trajectories are duck-typed (`webrl.types.Trajectory`: group_id, task_id, status, reward)."""
    groups: dict[str, tuple[str, list[float]]] = {}
    for traj in trajectories:
        key, rewards = groups.setdefault(traj.group_id, (family_key(traj.task_id), []))
        if traj.status == "ok" and traj.reward is not None:
            rewards.append(float(traj.reward))
    return groups


def update_estimates(estimates: SuccessEstimates, trajectories: Sequence, threshold: float = 0.5) -> None:
    """Add every group of a scored collection to its family's counts."""
    for key, rewards in scored_groups(trajectories).values():
        estimates.update(key, rewards, threshold)


def informative_groups(trajectories: Sequence) -> int:
    """Groups whose scored rewards are not all equal (they carry a GRPO signal)."""
    return sum(len(set(rewards)) > 1 for _, rewards in scored_groups(trajectories).values())

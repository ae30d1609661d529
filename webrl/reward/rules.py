"""Programmatic rewards and the OpenWebRL recipe's format rules around any scorer.

    ProgrammaticReward   the task's checker outcome, recorded by the rollout in `trajectory.info.task_reward`
    FallbackReward       the checker where there is one, else a judge
    RecipeReward         format rules first, the scorer only for episodes the agent ended

Recipe rules (OpenWebRL; first match wins), worked per trajectory:

    1. >= parse_failure_limit (3) consecutive unparseable turns  -> parse_failure_reward (-1)
    2. a format failure                                          -> format_failure_reward (0)
    3. the agent never called done (answer / stop)              -> not_done_reward (0)
    4. otherwise                                                 -> the scorer (judge / checker)

The scorer, and therefore the judge, runs only for trajectories that reach rule 4.

Where the recipe is silent, the choices made here (config options):
  * "format failure" = the episode's last turn did not parse (`format_failure_scope=
    "final_turn"`, the default: the agent ended on malformed output, e.g. a response cut at
    the token limit), or any turn did not parse (`"any_turn"`, stricter).
  * rule 1 counts turns with `parse_error` set or no action; the env is expected to end the
    episode after the limit, but the rule holds even if it did not.
  * a programmatic checker that has no value for a task ("needs a judge") is a drop with
    category "no_checker", which `FallbackReward` turns into a judge call.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from webrl.reward.base import (RewardFn, RewardResult, called_done,
                               max_consecutive_parse_failures)
from webrl.types import Trajectory, check_info_field

FORMAT_FAILURE_SCOPES = ("final_turn", "any_turn")


@dataclass
class ProgrammaticRewardConfig:
    info_key: str = "task_reward"
    """`Trajectory.info` field holding the task checker's reward (a float in [0, 1], or None
    when the task has no checker); the rollout coordinator writes it to "task_reward"."""
    success_threshold: Optional[float] = None
    """If set, rewards >= threshold become 1.0 and others 0.0 (binary success); None keeps
    the checker's value (partial credit)."""

    def __post_init__(self) -> None:
        check_info_field("ProgrammaticRewardConfig.info_key", self.info_key)
        if self.success_threshold is not None and not 0.0 <= self.success_threshold <= 1.0:
            raise ValueError("ProgrammaticRewardConfig.success_threshold must be None or in [0, 1], "
                             f"got {self.success_threshold!r}")


class ProgrammaticReward:
    """The checker outcome the rollout stored in `trajectory.info.<info_key>` (task_reward)."""

    name = "programmatic"

    def __init__(self, config: Optional[ProgrammaticRewardConfig] = None):
        self.config = config or ProgrammaticRewardConfig()

    def __call__(self, trajectory: Trajectory) -> RewardResult:
        value = getattr(trajectory.info, self.config.info_key)
        if value is None:
            return RewardResult.drop("no_checker", f"trajectory.info.{self.config.info_key} is None")
        try:
            value = float(value)
        except (TypeError, ValueError):
            return RewardResult.drop("no_checker", f"checker value {value!r} is not a number")
        if self.config.success_threshold is not None:
            value = 1.0 if value >= self.config.success_threshold else 0.0
        return RewardResult(value, details={"rule": "checker", "checker_reward": value})


class FallbackReward:
    """`primary`, unless it drops with category "no_checker"; then `fallback`."""

    def __init__(self, primary: RewardFn, fallback: RewardFn):
        self.primary, self.fallback = primary, fallback
        self.name = f"{primary.name}|{fallback.name}"

    def __call__(self, trajectory: Trajectory) -> RewardResult:
        result = self.primary(trajectory)
        if result.dropped and result.drop_category == "no_checker":
            return self.fallback(trajectory)
        return result


@dataclass
class RecipeRewardConfig:
    parse_failure_limit: int = 3
    """Consecutive unparseable turns that earn `parse_failure_reward` (OpenWebRL: 3)."""
    parse_failure_reward: float = -1.0
    """Reward for hitting the parse-failure limit (OpenWebRL: -1)."""
    format_failure_reward: float = 0.0
    """Reward for a format failure (OpenWebRL: 0)."""
    not_done_reward: float = 0.0
    """Reward when the episode ended without the agent calling done (no judge is run)."""
    format_failure_scope: str = "final_turn"
    """What counts as a format failure: "final_turn" (the last turn did not parse) or
    "any_turn" (some turn did not parse)."""

    def __post_init__(self) -> None:
        if self.parse_failure_limit < 1:
            raise ValueError(f"RecipeRewardConfig.parse_failure_limit must be >= 1, got {self.parse_failure_limit}")
        if self.format_failure_scope not in FORMAT_FAILURE_SCOPES:
            raise ValueError(f"RecipeRewardConfig.format_failure_scope must be one of {FORMAT_FAILURE_SCOPES}, "
                             f"got {self.format_failure_scope!r}")


def _unparsed(turn) -> bool:
    return turn.parse_error is not None or turn.action is None


def recipe_rule(trajectory: Trajectory, config: RecipeRewardConfig) -> Optional[RewardResult]:
    """Rules 1-3 of the module docstring: a result, or None when the scorer must decide."""
    run = max_consecutive_parse_failures(trajectory)
    if run >= config.parse_failure_limit:
        return RewardResult(config.parse_failure_reward,
                            details={"rule": "parse_failures", "consecutive_parse_failures": run})
    turns = trajectory.turns
    if config.format_failure_scope == "final_turn":
        format_failure = bool(turns) and _unparsed(turns[-1])
    else:
        format_failure = any(_unparsed(t) for t in turns)
    if format_failure:
        return RewardResult(config.format_failure_reward, details={"rule": "format_failure"})
    if not called_done(trajectory):
        return RewardResult(config.not_done_reward, details={"rule": "not_done"})
    return None


class RecipeReward:
    """OpenWebRL's reward: format rules, then `scorer` (a judge or checker) on done episodes."""

    def __init__(self, scorer: RewardFn, config: Optional[RecipeRewardConfig] = None):
        self.scorer = scorer
        self.config = config or RecipeRewardConfig()
        self.name = f"recipe({scorer.name})"

    def __call__(self, trajectory: Trajectory) -> RewardResult:
        ruled = recipe_rule(trajectory, self.config)
        if ruled is not None:
            return ruled
        result = self.scorer(trajectory)
        result.details.setdefault("rule", "judged" if not result.dropped else "scorer_dropped")
        return result

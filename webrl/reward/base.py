"""The reward interface: a reward function maps a `Trajectory` to a score or a drop.

    RewardResult(reward=1.0, details={...})            a score
    RewardResult.drop("judge_timeout", "after 3 tries")  no score: the sample is not trained on

A drop is not a failure. Infrastructure errors, judge timeouts and unreadable judge replies
say nothing about the agent, so they remove the sample (the trajectory's status becomes
"dropped", i.e. a zero loss mask) instead of scoring it 0, which would teach the policy that
whatever it did was wrong. Drop reasons are `<category>: <message>`; metrics count categories.

Also here: read-only views of a trajectory that every reward needs (the screenshot of a turn,
the final answer, whether the agent declared it was done, parse-failure runs).
"""
from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Protocol, Sequence, runtime_checkable

from webrl.types import Image, Trajectory, Turn


@dataclass
class RewardResult:
    """A trajectory-level reward, or a drop with a reason.

    reward: the score (None exactly when dropped).
    drop_reason: "<category>: <message>" when dropped, else None.
    details: JSON-able explanation (rule that fired, judge replies, cache hit, ...).
    """

    reward: Optional[float]
    drop_reason: Optional[str] = None
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.reward is None) == (self.drop_reason is None):
            raise ValueError("RewardResult needs exactly one of reward and drop_reason, "
                             f"got reward={self.reward!r}, drop_reason={self.drop_reason!r}")

    @classmethod
    def drop(cls, category: str, message: str = "", **details: Any) -> "RewardResult":
        reason = f"{category}: {message}" if message else category
        return cls(None, reason, dict(details))

    @property
    def dropped(self) -> bool:
        return self.reward is None

    @property
    def drop_category(self) -> Optional[str]:
        return None if self.drop_reason is None else self.drop_reason.split(":", 1)[0]


@runtime_checkable
class RewardFn(Protocol):
    """Anything with a `name` that scores one trajectory. Must not raise on agent behaviour;
    infrastructure failures come back as `RewardResult.drop(...)`. It may also carry an int
    `max_concurrency` (`build_reward` sets reward.max_concurrency): how many trajectories
    `score_trajectories` scores at once; without it, one at a time. A reward fn with a bound
    above 1 is called from several threads at once."""

    name: str

    def __call__(self, trajectory: Trajectory) -> RewardResult: ...


def apply_reward(trajectory: Trajectory, result: RewardResult) -> Trajectory:
    """Write `result` into the trajectory (in place, returned for chaining).

    A trajectory that is already dropped (e.g. the browser crashed) stays dropped with its
    first reason; the reward details are still recorded.
    """
    trajectory.reward_details = dict(result.details)
    if trajectory.status == "dropped":
        trajectory.reward = None
        return trajectory
    if result.dropped:
        trajectory.reward = None
        trajectory.drop(result.drop_reason or "dropped")
    else:
        trajectory.reward = float(result.reward)
    return trajectory


def score_trajectories(reward_fn: RewardFn, trajectories: Sequence[Trajectory],
                       max_workers: Optional[int] = None) -> list[RewardResult]:
    """Score and `apply_reward` every trajectory, `max_workers` at a time (default: the reward
    fn's `max_concurrency`, else 1); results are in the trajectories' order.

    Already-dropped trajectories are not sent to the reward function (no judge call is
    spent on them); their result repeats the existing drop reason.
    """
    def one(traj: Trajectory) -> RewardResult:
        if traj.status == "dropped":
            return RewardResult(None, traj.drop_reason or "dropped", {"rule": "already_dropped"})
        try:
            result = reward_fn(traj)
        except Exception as e:  # a bug in a reward must not end a rollout; it is reported
            result = RewardResult.drop("reward_error", f"{type(e).__name__}: {e}")
        apply_reward(traj, result)
        return result

    if max_workers is None:
        max_workers = int(getattr(reward_fn, "max_concurrency", 1) or 1)
    if max_workers <= 1 or len(trajectories) <= 1:
        return [one(t) for t in trajectories]
    with ThreadPoolExecutor(min(max_workers, len(trajectories)), thread_name_prefix="webrl-reward") as pool:
        return list(pool.map(one, trajectories))  # map keeps the input order


def reward_metrics(results: Iterable[RewardResult], prefix: str = "reward/") -> dict[str, float]:
    """Counts and means for logging.

    Keys: n, n_scored, n_dropped, mean (over scored), success_rate (share of scored with
    reward > 0), dropped/<category> counts, rule/<rule> counts (from details["rule"]).
    """
    results = list(results)
    scored = [r.reward for r in results if not r.dropped]
    out: dict[str, float] = {
        f"{prefix}n": float(len(results)),
        f"{prefix}n_scored": float(len(scored)),
        f"{prefix}n_dropped": float(len(results) - len(scored)),
        f"{prefix}mean": sum(scored) / len(scored) if scored else 0.0,
        f"{prefix}success_rate": sum(1 for s in scored if s > 0) / len(scored) if scored else 0.0,
    }
    for cat, n in Counter(r.drop_category for r in results if r.dropped).items():
        out[f"{prefix}dropped/{cat}"] = float(n)
    for rule, n in Counter(r.details.get("rule") for r in results if r.details.get("rule")).items():
        out[f"{prefix}rule/{rule}"] = float(n)
    return out


# ---------------------------------------------------------------------------------------------
# read-only views of a trajectory
# ---------------------------------------------------------------------------------------------
def turn_screenshot(turn: Turn) -> Optional[Image]:
    """The screenshot the agent acted on in this turn: the last image of its prompt (prompts
    list older screenshots first), or None for a text-only turn."""
    return turn.images[-1] if turn.images else None


def trajectory_screenshots(trajectory: Trajectory) -> list[tuple[int, Image]]:
    """(turn index, screenshot) for every turn that has one, in order."""
    return [(i, img) for i, t in enumerate(trajectory.turns) if (img := turn_screenshot(t)) is not None]


def called_done(trajectory: Trajectory) -> bool:
    """The agent declared it was done: the last turn parsed to `answer` or `stop`."""
    if not trajectory.turns:
        return False
    action = trajectory.turns[-1].action
    return action is not None and action.is_terminal


def final_answer(trajectory: Trajectory) -> str:
    """The text of a final `answer` action, "" for `stop` or no done action."""
    if called_done(trajectory) and trajectory.turns[-1].action.kind == "answer":
        return trajectory.turns[-1].action.text or ""
    return ""


def max_consecutive_parse_failures(trajectory: Trajectory) -> int:
    """Length of the longest run of turns whose response did not parse into an action."""
    best = run = 0
    for turn in trajectory.turns:
        run = run + 1 if (turn.parse_error is not None or turn.action is None) else 0
        best = max(best, run)
    return best


def describe_step(turn: Turn) -> str:
    """One factual line for a step: the action in the compact grammar and the env feedback,
    e.g. `click(12) -> Succeed: click on <button> 'Search'`."""
    if turn.action is None:
        what = f"(unparseable output: {turn.parse_error or 'no action'})"
    else:
        what = turn.action.to_compact()
    feedback = " ".join(turn.feedback.split())
    return f"{what} -> {feedback}" if feedback else what


def action_history(trajectory: Trajectory, include_final: bool = True) -> list[str]:
    """`describe_step` of each turn; `include_final=False` leaves out a final done action
    (WebJudge judges factual actions only, not the agent's own claim of success)."""
    turns = trajectory.turns
    if not include_final and called_done(trajectory):
        turns = turns[:-1]
    return [describe_step(t) for t in turns]

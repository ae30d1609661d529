"""Credit-assignment SFT data: successes plus the productive segments of failed trajectories.

    stats = write_segment_demos("runs/grpo-1", "data/segments", SegmentConfig())
    # then: webrl sft sft.demos_dir=data/segments

A failed (unresolved) trajectory is usually not wrong from its first turn: it often opens the
right pages before it loops, errors or stops on the wrong answer. Instead of discarding it, keep
the turns that made progress, cut into shorter demonstrations, and train on them next to the
successes. Pure Python over `Trajectory` records; no Ray, no model, no browser.

Notation (one failed trajectory of T turns; F its task family, see `match_scope`):
    s_t      page state turn t acted on: `state_key(observation.url, observation.elements_text)`
             (webrl.algos.step_advantages); s_{t+1} is what turn t led to (t < T - 1)
    S_F      the states of every turn of every successful trajectory of F
    [a, b)   a segment: turns a..b-1 (a Python slice), b - a >= min_segment_turns
    outcome  `Trajectory.reward` when a reward function scored it, else the env checker's
             `info.task_reward` (trajectories are logged before scoring); success = outcome >=
             success_threshold; neither set = unscored, skipped and counted

Definition. Turn t is productive unless one of these applies (the first that does is its
reason; last_turn always applies, the four failed-action kinds when listed in `cut_on`,
off_success_path when `require_success_state`):
    last_turn         t = T - 1: what it led to is not recorded (in a failure it is usually the
                      wrong answer or the step limit)
    parse_error       the response did not parse into an action (`parse_error` or no action)
    action_error      the env reported an error for it (`turns[t+1].observation.last_action_error`)
    no_change         s_{t+1} = s_t: the page did not change
    loop              t lies inside a cycle, s_i = s_j with i <= t < j: the agent came back to a
                      state it had left, so no turn of the cycle, the one that left s_i included,
                      is evidence of progress
    off_success_path  (require_success_state) s_{t+1} is not in S_F: no success of the family
                      ever stood on the page this turn reached
A segment is a maximal run of productive turns [a, b) that starts at the episode start (a = 0)
or, unless `prefix_only`, mid-episode at a state on a success's path (s_a in S_F, when
require_success_state). So with require_success_state every state a segment visits, but
possibly its first page s_0, is one a successful trajectory of the family also visited; a
failure sharing no state with any success yields nothing.

Why this definition: a state a success passed through is one from which the task was solved, a
direct (Monte-Carlo) sign that reaching it was progress; loops, errors and no-op turns are the
observable ways a web episode wastes steps. Exact state keys make the check cheap and
deterministic, and the same key GiGPO step advantages use (step_advantages.py).

What is from the paper (Orchard, arXiv 2605.15040) and what is interpretation:
    - From the paper (as its abstract and summaries state it; the method section was not
      available): Orchard-SWE's credit-assignment SFT learns from the productive segments of
      unresolved (failed) distilled teacher trajectories instead of discarding them; a summary
      describes it as estimating per-step value along a failed trajectory with an LLM and
      training only on the segments preceding the critical mistake.
    - Departure: no LLM judge. The per-step value is replaced by the state signals above,
      computed from the run's own trajectories (its successes stand in for the judge's notion of
      a step that moves toward a solution). This keeps the data option pure and reproducible;
      a judge-based variant would need an endpoint and a prompt the paper does not give.
    - Departure: the paper's setting is SWE distillation from a teacher; here the failures are
      the policy's own RL rollouts (or any trajectory log) on web tasks.
    - Interpretation: "preceding the critical mistake" is `prefix_only=True` (only the segment
      from turn 0); the default also keeps later segments that resume on a success's path.
    - Interpretation: a segment that starts mid-episode is a demonstration without the turns
      before it, so its prompts show no history before turn a (the step number stays). The
      demonstration format trains every turn it holds, and there is no context-only turn.

Output demonstrations: the successes as they are (`include_successes`) and one `Trajectory` per
segment, sharing the source's `Turn` objects, with `reward` None and its provenance in
`reward_details` ("kind": "productive_segment", the source's digest, task and group ids, turn
range, length and outcome). Output order is sorted, not the input's, so it does not depend on
the order trajectories were logged in.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from webrl.algos.step_advantages import state_key
from webrl.rollout.balanced import family_key
from webrl.rollout.viewer import TRAJECTORY_LOG
from webrl.types import Trajectory, load_trajectories, save_trajectories

CUT_REASONS = ("parse_error", "action_error", "no_change", "loop")
"""Failed-action kinds that may end a segment (`SegmentConfig.cut_on`)."""
MATCH_SCOPES = ("family", "task")
DEMOS_FILE = "demos.jsonl"


@dataclass
class SegmentConfig:
    """Which turns of failed trajectories become SFT demonstrations (see the module docstring)."""

    min_segment_turns: int = 2
    """Shortest segment kept, in turns; >= 1."""
    require_success_state: bool = True
    """A productive turn must reach a state some successful trajectory of the same scope visited,
    and a mid-episode segment must start on one; false = the failed-action signals alone."""
    match_scope: str = "family"
    """Which successes a failure is compared with: "family" (same task id up to its trailing seed,
    `family_key`) or "task" (the same task id)."""
    cut_on: tuple[str, ...] = CUT_REASONS
    """Failed-action kinds that make a turn unproductive, any of "parse_error", "action_error",
    "no_change", "loop" (a no-op turn is also a loop of one, so "no_change" matters without "loop")."""
    prefix_only: bool = False
    """Keep only a segment starting at turn 0 (the part before the first mistake)."""
    include_successes: bool = True
    """Also output the successful trajectories, unchanged."""
    success_threshold: float = 0.5
    """A trajectory whose outcome (reward, else info.task_reward) is >= this succeeded; a finite number."""

    def __post_init__(self) -> None:
        name = "SegmentConfig"
        if not _is_int(self.min_segment_turns) or self.min_segment_turns < 1:
            raise ValueError(f"{name}.min_segment_turns must be an integer >= 1, got {self.min_segment_turns!r}")
        for flag in ("require_success_state", "prefix_only", "include_successes"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{name}.{flag} must be true | false, got {getattr(self, flag)!r}")
        if self.match_scope not in MATCH_SCOPES:
            raise ValueError(f"{name}.match_scope must be one of {list(MATCH_SCOPES)}, got {self.match_scope!r}")
        cut_on = tuple(self.cut_on) if isinstance(self.cut_on, (list, tuple)) else None  # OmegaConf gives a list
        if cut_on is None or not all(c in CUT_REASONS for c in cut_on) or len(set(cut_on)) != len(cut_on):
            raise ValueError(f"{name}.cut_on must be a list of distinct values from {list(CUT_REASONS)}, "
                             f"got {self.cut_on!r}")
        self.cut_on = cut_on
        value = self.success_threshold
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)):
            raise ValueError(f"{name}.success_threshold must be a finite number, got {value!r}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class SegmentStats:
    """What `segment_demos` read and kept."""

    trajectories: int = 0
    """Trajectories read."""
    dropped: int = 0
    """Status "dropped" (infrastructure failure): never trained on."""
    unscored: int = 0
    """Neither reward nor info.task_reward set (e.g. a live-web task not yet judged)."""
    successes: int = 0
    failures: int = 0
    failures_with_segments: int = 0
    segments: int = 0
    failure_turns: int = 0
    """Turns of all failures."""
    kept_turns: int = 0
    """Turns of failures kept in segments."""
    success_turns: int = 0
    """Turns of the successes output (0 when include_successes is false)."""
    unproductive: dict[str, int] = field(default_factory=dict)
    """Failure turns by the reason they were not productive (module docstring)."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def trajectory_outcome(trajectory: Trajectory) -> Optional[float]:
    """`reward` when a reward function scored it, else the checker's `info.task_reward`, else None."""
    if trajectory.reward is not None:
        return float(trajectory.reward)
    return None if trajectory.info.task_reward is None else float(trajectory.info.task_reward)


def trajectory_digest(trajectory: Trajectory) -> str:
    """A 16-hex id of a trajectory from its content (a logged trajectory has no id of its own)."""
    turns = [[t.response_text, t.observation.url, t.observation.elements_text, t.observation.step,
              [im.digest for im in t.images]] for t in trajectory.turns]
    content = [trajectory.task_id, trajectory.group_id, trajectory.goal, trajectory.info.started_at, turns]
    return hashlib.sha256(json.dumps(content, ensure_ascii=False).encode()).hexdigest()[:16]


def turn_states(trajectory: Trajectory) -> list[str]:
    """s_t for every turn: the exact page-state key the turn acted on."""
    return [state_key(t.observation.url, t.observation.elements_text) for t in trajectory.turns]


def success_states(successful: Sequence[Trajectory]) -> set[str]:
    """S_F: the states of every turn of the given successful trajectories."""
    return {s for traj in successful for s in turn_states(traj)}


def unproductive_reasons(trajectory: Trajectory, on_success_path: set[str], config: SegmentConfig) -> list[str]:
    """Per turn, "" when productive, else the first reason it is not (module docstring)."""
    turns, states = trajectory.turns, turn_states(trajectory)
    in_loop = [False] * len(turns)
    first_seen: dict[str, int] = {}
    last_seen: dict[str, int] = {}
    for t, s in enumerate(states):
        first_seen.setdefault(s, t)
        last_seen[s] = t
    for s, first in first_seen.items():
        for t in range(first, last_seen[s]):  # the cycle s_first = s_last covers turns first..last-1
            in_loop[t] = True
    cut = set(config.cut_on)
    reasons = []
    for t, turn in enumerate(turns):
        if t == len(turns) - 1:
            reasons.append("last_turn")
        elif "parse_error" in cut and (turn.parse_error is not None or turn.action is None):
            reasons.append("parse_error")
        elif "action_error" in cut and turns[t + 1].observation.last_action_error:
            reasons.append("action_error")
        elif "no_change" in cut and states[t + 1] == states[t]:
            reasons.append("no_change")
        elif "loop" in cut and in_loop[t]:
            reasons.append("loop")
        elif config.require_success_state and states[t + 1] not in on_success_path:
            reasons.append("off_success_path")
        else:
            reasons.append("")
    return reasons


def productive_segments(trajectory: Trajectory, successful: Sequence[Trajectory],
                        config: SegmentConfig) -> list[tuple[int, int]]:
    """The segments [a, b) of a failed `trajectory`, compared with the `successful` trajectories of
    its scope (its family or task: the caller chooses them), in turn order."""
    on_path = success_states(successful)
    return _segments(trajectory, on_path, unproductive_reasons(trajectory, on_path, config), config)


def _segments(trajectory: Trajectory, on_path: set[str], reasons: list[str],
              config: SegmentConfig) -> list[tuple[int, int]]:
    states = turn_states(trajectory)
    runs, start = [], None
    for t, reason in enumerate([*reasons, "end"]):
        if not reason and start is None:
            start = t
        elif reason and start is not None:
            runs.append((start, t))
            start = None
    out = []
    for a, b in runs:
        if b - a < config.min_segment_turns or (a > 0 and config.prefix_only):
            continue
        if a > 0 and config.require_success_state and states[a] not in on_path:
            continue
        out.append((a, b))
    return out


def segment_demos(trajectories: Sequence[Trajectory], config: SegmentConfig) -> tuple[list[Trajectory], SegmentStats]:
    """Demonstrations from a set of trajectories: the successes (`include_successes`) and the
    productive segments of the failures, each failure compared with the successes of its scope.
    Sorted by (scope, task id, source digest, first turn), so the input order does not matter."""
    scope = family_key if config.match_scope == "family" else (lambda task_id: task_id)
    stats = SegmentStats(trajectories=len(trajectories))
    successes: dict[str, list[Trajectory]] = defaultdict(list)
    failures: list[Trajectory] = []
    for traj in trajectories:
        outcome = trajectory_outcome(traj)
        if traj.status == "dropped":
            stats.dropped += 1
        elif outcome is None:
            stats.unscored += 1
        elif outcome >= config.success_threshold:
            successes[scope(traj.task_id)].append(traj)
        else:
            failures.append(traj)
    stats.successes, stats.failures = sum(map(len, successes.values())), len(failures)
    keyed: list[tuple[tuple, Trajectory]] = []
    if config.include_successes:
        for key, group in successes.items():
            keyed += [((key, t.task_id, trajectory_digest(t), 0), t) for t in group]
            stats.success_turns += sum(len(t.turns) for t in group)
    states_by_scope = {key: success_states(group) for key, group in successes.items()}
    reasons_count: Counter = Counter()
    for traj in failures:
        key = scope(traj.task_id)
        on_path = states_by_scope.get(key, set())
        reasons = unproductive_reasons(traj, on_path, config)
        reasons_count.update(r for r in reasons if r)
        segments = _segments(traj, on_path, reasons, config)
        stats.failure_turns += len(traj.turns)
        stats.failures_with_segments += bool(segments)
        digest = trajectory_digest(traj)
        for a, b in segments:
            keyed.append(((key, traj.task_id, digest, a), _segment_trajectory(traj, digest, a, b)))
            stats.segments += 1
            stats.kept_turns += b - a
    stats.unproductive = dict(sorted(reasons_count.items()))
    keyed.sort(key=lambda item: item[0])
    return [traj for _, traj in keyed], stats


def _segment_trajectory(source: Trajectory, digest: str, a: int, b: int) -> Trajectory:
    provenance = {"kind": "productive_segment", "source_trajectory": digest, "source_task_id": source.task_id,
                  "source_group_id": source.group_id, "turn_range": [a, b], "source_turns": len(source.turns),
                  "source_outcome": trajectory_outcome(source)}
    return Trajectory(task_id=source.task_id, group_id=source.group_id, goal=source.goal,
                      turns=list(source.turns[a:b]), reward=None, reward_details=provenance,
                      info=dataclasses.replace(source.info))


def write_segment_demos(run_dir_or_jsonl: str | Path, out_dir: str | Path, config: SegmentConfig) -> SegmentStats:
    """Read a run's trajectory log (a run folder, or a .jsonl file written by `save_trajectories`),
    write `out_dir/demos.jsonl` (+ images/) for `sft.demos_dir=out_dir`; returns the stats."""
    source = Path(run_dir_or_jsonl)
    log = source / TRAJECTORY_LOG if source.is_dir() else source
    if not log.is_file():
        raise FileNotFoundError(f"no trajectory log at {log}: give a webrl run folder or a trajectories .jsonl file")
    out = Path(out_dir) / DEMOS_FILE
    if out.exists() and out.resolve() == log.resolve():
        raise ValueError(f"out_dir {out_dir} would overwrite the trajectory log {log} being read")
    demos, stats = segment_demos(load_trajectories(log), config)
    save_trajectories(out, demos, append=False)
    return stats


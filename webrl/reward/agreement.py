"""Judge agreement: run a judge on trajectories whose true outcome a checker knows.

    report = judge_agreement(judge, trajectories)      # truth from info.task_reward
    print(report.format())

This is how to choose a judge (model, prompt version, WebJudge threshold) before spending a
training run on it: the sandbox sites' checkers give exact outcomes, the judge sees only what
it would see on the live web. Dropped judgments (timeouts, unreadable replies) are counted,
not guessed; agreement is over the judged trajectories.

Notation (binary, positive = success): tp judge 1 & truth 1, fp judge 1 & truth 0,
fn judge 0 & truth 1, tn judge 0 & truth 0; agreement = (tp + tn) / judged;
Cohen's kappa = (p_o - p_e) / (1 - p_e) with p_e from the two marginals.
"""
from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from webrl.reward.base import RewardFn, RewardResult, called_done
from webrl.types import Trajectory, check_info_field


def checker_truth(key: str = "task_reward", threshold: float = 0.5) -> Callable[[Trajectory], Optional[bool]]:
    """Truth = `info.<key> >= threshold`; None where the checker recorded nothing.

    key "reward" reads `Trajectory.reward` instead: right for a file whose rewards a reward
    function computed from the checkers (e.g. the programmatic reward) before any judge ran.
    Any other key must name a `TrajectoryInfo` field (ValueError otherwise).
    """
    if key != "reward":
        check_info_field("truth key", key)

    def truth(traj: Trajectory) -> Optional[bool]:
        value = traj.reward if key == "reward" else getattr(traj.info, key)
        return None if value is None else float(value) >= threshold
    return truth


@dataclass
class AgreementReport:
    """Confusion counts of judge vs truth and what was left out."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0
    dropped: int = 0
    no_truth: int = 0
    not_done: int = 0
    drop_reasons: dict[str, int] = field(default_factory=dict)

    @property
    def judged(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    @property
    def agreement(self) -> float:
        return (self.tp + self.tn) / self.judged if self.judged else float("nan")

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else float("nan")

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else float("nan")

    @property
    def kappa(self) -> float:
        n = self.judged
        if not n:
            return float("nan")
        p_o = (self.tp + self.tn) / n
        p_e = ((self.tp + self.fp) * (self.tp + self.fn) + (self.fn + self.tn) * (self.fp + self.tn)) / n ** 2
        return (p_o - p_e) / (1 - p_e) if p_e < 1 else float("nan")

    def to_dict(self) -> dict:
        return {**asdict(self), "judged": self.judged, "agreement": self.agreement,
                "precision": self.precision, "recall": self.recall, "kappa": self.kappa}

    def format(self) -> str:
        rows = [
            f"judged {self.judged}  agreement {self.agreement:.3f}  kappa {self.kappa:.3f}  "
            f"precision {self.precision:.3f}  recall {self.recall:.3f}",
            "                 truth success   truth failure",
            f"judge success    {self.tp:13d}   {self.fp:13d}",
            f"judge failure    {self.fn:13d}   {self.tn:13d}",
            f"left out: dropped by the judge {self.dropped}, no checker outcome {self.no_truth}, "
            f"not done {self.not_done}",
        ]
        rows += [f"  dropped {reason}: {n}" for reason, n in sorted(self.drop_reasons.items())]
        return "\n".join(rows)


def judge_agreement(judge: RewardFn, trajectories: Sequence[Trajectory],
                    truth: Optional[Callable[[Trajectory], Optional[bool]]] = None,
                    only_done: bool = True, max_workers: int = 4) -> AgreementReport:
    """Judge every trajectory with a known outcome (and, with `only_done`, a done action: the
    recipe never judges the others) and count agreement. Trajectories are not modified."""
    truth = truth or checker_truth()
    report = AgreementReport()
    todo: list[tuple[Trajectory, bool]] = []
    for traj in trajectories:
        t = truth(traj)
        if t is None:
            report.no_truth += 1
        elif only_done and not called_done(traj):
            report.not_done += 1
        else:
            todo.append((traj, t))

    def run(traj: Trajectory) -> RewardResult:
        try:
            return judge(traj)
        except Exception as e:  # one broken trajectory must not hide the others' agreement
            return RewardResult.drop("reward_error", f"{type(e).__name__}: {e}")

    with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
        results = list(pool.map(run, [traj for traj, _ in todo]))
    reasons: Counter = Counter()
    for (_, t), r in zip(todo, results):
        if r.dropped:
            report.dropped += 1
            reasons[r.drop_category] += 1
            continue
        j = r.reward > 0
        report.tp += j and t
        report.fp += j and not t
        report.fn += (not j) and t
        report.tn += (not j) and not t
    report.drop_reasons = dict(reasons)
    return report


def load_judged_trajectories(path: str) -> list[Trajectory]:
    """A `save_trajectories` JSONL file, or a folder of Online-Mind2Web v2 exports."""
    from webrl.reward.om2w import import_run
    from webrl.types import load_trajectories

    p = Path(path)
    if p.is_dir():
        return import_run(p)
    return load_trajectories(p)


def write_report(report: AgreementReport, path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(report.to_dict(), indent=2))

"""Entry point of `webrl judge-agreement` (the lead's CLI calls `judge_agreement_main`)."""
from __future__ import annotations

from dataclasses import dataclass, field

from webrl.reward.agreement import checker_truth, judge_agreement, load_judged_trajectories, write_report
from webrl.reward.factory import RewardConfig, build_judge
from webrl.types import check_info_field


@dataclass
class JudgeAgreementConfig:
    trajectories: str = ""
    """Trajectories with checker outcomes: a `save_trajectories` JSONL file (sandbox rollouts)
    or a folder of Online-Mind2Web v2 exports."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """Which judge to evaluate and where it runs (`reward.judge`, `reward.base_url`, `reward.model`, ...);
    reward.max_concurrency bounds the endpoint's requests in flight."""
    truth_key: str = "task_reward"
    """`Trajectory.info` field holding the checker's reward (task_reward), or "reward" to read
    `Trajectory.reward` (a file scored by the programmatic reward, before any judge)."""
    truth_threshold: float = 0.5
    """Checker rewards >= this count as success."""
    only_done: bool = True
    """Judge only trajectories that end with a done action (the recipe judges no others)."""
    max_workers: int = 4
    """Trajectories judged at once (their requests share reward.max_concurrency)."""
    output: str = ""
    """Optional path of a JSON report."""

    def __post_init__(self) -> None:
        if self.max_workers < 1:
            raise ValueError(f"JudgeAgreementConfig.max_workers must be >= 1, got {self.max_workers}")
        if self.truth_key != "reward":
            check_info_field("JudgeAgreementConfig.truth_key", self.truth_key)


def judge_agreement_main(config: JudgeAgreementConfig, backend=None) -> int:
    """Judge the trajectories, print agreement and the confusion matrix; 0 on success, 2 when
    there was nothing to judge. `backend` overrides the configured judge backend (tests)."""
    if not config.trajectories:
        raise ValueError("JudgeAgreementConfig.trajectories is required: a JSONL file or an export folder")
    trajectories = load_judged_trajectories(config.trajectories)
    judge = build_judge(config.reward, backend)
    report = judge_agreement(judge, trajectories, checker_truth(config.truth_key, config.truth_threshold),
                             only_done=config.only_done, max_workers=config.max_workers)
    print(f"judge {judge.name} via {judge.backend.identity} on {len(trajectories)} trajectories "
          f"from {config.trajectories}")
    print(report.format())
    if not report.judged and report.no_truth:
        print(f"no trajectory has a checker outcome in info.{config.truth_key}; for a file whose "
              f"rewards the programmatic reward computed, pass truth_key=reward")
    if config.output:
        write_report(report, config.output)
    return 0 if report.judged else 2

"""Rewards for web-agent trajectories: checkers, VLM judges, the OpenWebRL format rules.

    RewardResult / RewardFn                    the interface (base.py): a score or a drop
    ProgrammaticReward, RecipeReward, ...      checker and format rules (rules.py)
    JudgeReward + WebJudge / ActionHistoryJudge / DeepShopJudge     judges (judge.py, ...)
    OpenAIChatBackend, TransformersBackend, ScriptedBackend         judge backends
    parse_verdict, parse_score                 strict reply parsing (verdict.py)
    export_run / import_run                    Online-Mind2Web v2 format (om2w.py)
    judge_agreement, judge_agreement_main      agreement with checker outcomes
    RewardConfig, build_reward                 config -> RewardFn (factory.py)
"""
from webrl.reward.agreement import AgreementReport, checker_truth, judge_agreement
from webrl.reward.backends import (JudgeBackendError, OpenAIBackendConfig, OpenAIChatBackend, ScriptedBackend,
                                   TransformersBackend)
from webrl.reward.base import (RewardFn, RewardResult, action_history, apply_reward, called_done, final_answer,
                               reward_metrics, score_trajectories)
from webrl.reward.cache import VerdictCache
from webrl.reward.factory import RewardConfig, build_judge, build_reward
from webrl.reward.history_judges import (ActionHistoryJudge, ActionHistoryJudgeConfig, DeepShopJudge,
                                         DeepShopJudgeConfig)
from webrl.reward.judge import JudgeConfig, JudgeReward, Verdict
from webrl.reward.main import JudgeAgreementConfig, judge_agreement_main
from webrl.reward.om2w import export_run, export_trajectory, import_run, import_trajectory
from webrl.reward.rules import (FallbackReward, ProgrammaticReward, ProgrammaticRewardConfig, RecipeReward,
                                RecipeRewardConfig)
from webrl.reward.verdict import parse_key_points, parse_score, parse_verdict
from webrl.reward.webjudge import WebJudge, WebJudgeConfig

__all__ = [
    "AgreementReport", "checker_truth", "judge_agreement", "JudgeBackendError", "OpenAIBackendConfig",
    "OpenAIChatBackend", "ScriptedBackend", "TransformersBackend", "RewardFn", "RewardResult", "action_history",
    "apply_reward", "called_done", "final_answer", "reward_metrics", "score_trajectories", "VerdictCache",
    "RewardConfig", "build_judge", "build_reward", "ActionHistoryJudge", "ActionHistoryJudgeConfig",
    "DeepShopJudge", "DeepShopJudgeConfig", "JudgeConfig", "JudgeReward", "Verdict", "JudgeAgreementConfig",
    "judge_agreement_main", "export_run", "export_trajectory", "import_run", "import_trajectory",
    "FallbackReward", "ProgrammaticReward", "ProgrammaticRewardConfig", "RecipeReward", "RecipeRewardConfig",
    "parse_key_points", "parse_score", "parse_verdict", "WebJudge", "WebJudgeConfig",
]

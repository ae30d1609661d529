"""`RewardConfig` -> a ready `RewardFn`: the one place that wires judges, backends and rules.

    reward_fn = build_reward(RewardConfig(judge="webjudge", backend="openai",
                                          openai=OpenAIBackendConfig(model="o4-mini")))

kind:
  "programmatic"  the task checker only (sandbox sites, MiniWoB)
  "judge"         the judge only, on every trajectory
  "recipe"        OpenWebRL: format rules, then the checker where the task has one
                  (`use_checker`) and the judge otherwise, only for episodes the agent ended
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from webrl.reward.backends import OpenAIBackendConfig, OpenAIChatBackend, TransformersBackend
from webrl.reward.base import RewardFn
from webrl.reward.history_judges import (ActionHistoryJudge, ActionHistoryJudgeConfig, DeepShopJudge,
                                         DeepShopJudgeConfig)
from webrl.reward.judge import JudgeConfig, JudgeReward
from webrl.reward.rules import (FallbackReward, ProgrammaticReward, ProgrammaticRewardConfig, RecipeReward,
                                RecipeRewardConfig)
from webrl.reward.webjudge import WebJudge, WebJudgeConfig

REWARD_KINDS = ("programmatic", "judge", "recipe")
JUDGES = ("webjudge", "action_history", "deepshop")
BACKENDS = ("openai", "local")


@dataclass
class RewardConfig:
    kind: str = "recipe"
    """programmatic | judge | recipe (see the module docstring)."""
    judge: str = "action_history"
    """Which judge: webjudge | action_history | deepshop."""
    backend: str = "openai"
    """Where the judge runs: openai (any chat-completions server, e.g. `webrl serve`) | local
    (an in-process transformers model at `local_model_path`)."""
    local_model_path: str = ""
    """Checkpoint folder of the judge model for backend=local."""
    local_dtype: str = "float32"
    """dtype of the local judge model: float32 | bfloat16 | float16."""
    use_checker: bool = True
    """kind=recipe: use the task's checker where it has one, the judge only where it has none."""
    openai: OpenAIBackendConfig = field(default_factory=OpenAIBackendConfig)
    """Client settings for backend=openai."""
    judging: JudgeConfig = field(default_factory=JudgeConfig)
    """Settings shared by all judges (tokens, temperature, unreadable replies, cache folder)."""
    webjudge: WebJudgeConfig = field(default_factory=WebJudgeConfig)
    """WebJudge settings."""
    action_history: ActionHistoryJudgeConfig = field(default_factory=ActionHistoryJudgeConfig)
    """Action-history judge settings."""
    deepshop: DeepShopJudgeConfig = field(default_factory=DeepShopJudgeConfig)
    """DeepShop judge settings."""
    recipe: RecipeRewardConfig = field(default_factory=RecipeRewardConfig)
    """Format rules of kind=recipe."""
    programmatic: ProgrammaticRewardConfig = field(default_factory=ProgrammaticRewardConfig)
    """Where the env records the checker's reward."""
    max_concurrency: int = 0
    """Trajectories scored at once by `score_trajectories` (judge calls overlap; results keep the
    trajectories' order). 0 = auto: openai.max_concurrency for backend=openai, 1 for backend=local
    (one in-process model) and for kind=programmatic (the checker is instant)."""

    def __post_init__(self) -> None:
        if self.kind not in REWARD_KINDS:
            raise ValueError(f"RewardConfig.kind must be one of {REWARD_KINDS}, got {self.kind!r}")
        if self.judge not in JUDGES:
            raise ValueError(f"RewardConfig.judge must be one of {JUDGES}, got {self.judge!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"RewardConfig.backend must be one of {BACKENDS}, got {self.backend!r}")
        if not isinstance(self.max_concurrency, int) or self.max_concurrency < 0:
            raise ValueError(f"RewardConfig.max_concurrency (reward.max_concurrency) must be an integer >= 1, "
                             f"or 0 (auto), got {self.max_concurrency!r}")
        if self.backend == "local" and self.kind != "programmatic" and self.max_concurrency > 1:
            raise ValueError(f"RewardConfig.max_concurrency={self.max_concurrency} with backend=local: the in-process "
                             f"judge model serves one call at a time; set reward.max_concurrency to 1 or 0 (auto), "
                             f"or use backend=openai (e.g. `webrl serve`) for concurrent judging")
        if self.backend == "openai" and self.kind != "programmatic" and \
                self.max_concurrency > self.openai.max_concurrency:
            raise ValueError(f"RewardConfig.max_concurrency={self.max_concurrency} exceeds reward.openai.max_concurrency="
                             f"{self.openai.max_concurrency}, which bounds the backend's requests in flight (the extra "
                             f"calls would only wait): raise reward.openai.max_concurrency or lower this")

    def concurrency(self) -> int:
        """The bound `max_concurrency` stands for (auto resolved)."""
        if self.max_concurrency:
            return self.max_concurrency
        if self.kind == "programmatic" or self.backend == "local":
            return 1
        return self.openai.max_concurrency


def build_evaluator(config: RewardConfig) -> Any:
    if config.judge == "webjudge":
        return WebJudge(config.webjudge)
    if config.judge == "deepshop":
        return DeepShopJudge(config.deepshop)
    return ActionHistoryJudge(config.action_history)


def build_backend(config: RewardConfig) -> Any:
    if config.backend == "local":
        if not config.local_model_path:
            raise ValueError("RewardConfig.local_model_path is required with backend=local")
        return TransformersBackend.from_pretrained(config.local_model_path, dtype=config.local_dtype)
    if not config.openai.model:
        raise ValueError("RewardConfig.openai.model is required with backend=openai (the judge model's name)")
    return OpenAIChatBackend(config.openai)


def build_judge(config: RewardConfig, backend: Optional[Any] = None) -> JudgeReward:
    """The configured judge as a RewardFn; `backend` overrides the configured one (tests)."""
    return JudgeReward(build_evaluator(config), backend or build_backend(config), config.judging)


def build_reward(config: RewardConfig, backend: Optional[Any] = None) -> RewardFn:
    """The configured reward function, carrying `max_concurrency` (`config.concurrency()`), the
    bound `score_trajectories` uses. The judge backend is only built when one is needed."""
    checker = ProgrammaticReward(config.programmatic)
    if config.kind == "programmatic":
        reward_fn: Any = checker
    elif config.kind == "judge":
        reward_fn = build_judge(config, backend)
    else:
        judge = build_judge(config, backend)
        reward_fn = RecipeReward(FallbackReward(checker, judge) if config.use_checker else judge, config.recipe)
    reward_fn.max_concurrency = config.concurrency()
    return reward_fn

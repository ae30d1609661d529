"""`RewardConfig` -> reward functions, and config validation through the project's loader."""
import pytest

from webrl.actions import Action
from webrl.config import ConfigError, load_config
from webrl.reward import (FallbackReward, JudgeAgreementConfig, JudgeReward, ProgrammaticReward, RecipeReward,
                          RewardConfig, ScriptedBackend, build_reward)
from webrl.reward.backends import OpenAIBackendConfig

from .helpers import done_trajectory, trajectory


def test_kinds():
    backend = ScriptedBackend(lambda m: "Verdict: SUCCESS")
    assert isinstance(build_reward(RewardConfig(kind="programmatic")), ProgrammaticReward)
    judge = build_reward(RewardConfig(kind="judge", judge="webjudge"), backend)
    assert isinstance(judge, JudgeReward) and judge.name == "webjudge"
    recipe = build_reward(RewardConfig(), backend)
    assert isinstance(recipe, RecipeReward) and isinstance(recipe.scorer, FallbackReward)
    # the checker wins where there is one; the judge answers where there is none; no done -> 0
    assert recipe(done_trajectory(info={"task_reward": 0.0})).reward == 0.0 and backend.calls == []
    assert recipe(done_trajectory()).reward == 1.0 and len(backend.calls) == 1
    assert recipe(trajectory([Action.click(1)])).reward == 0.0 and len(backend.calls) == 1


def test_backend_configuration_errors_name_the_field():
    with pytest.raises(ValueError, match="openai.model"):
        build_reward(RewardConfig(kind="judge"))
    with pytest.raises(ValueError, match="local_model_path"):
        build_reward(RewardConfig(kind="judge", backend="local"))
    with pytest.raises(ValueError, match="base_url"):
        OpenAIBackendConfig(base_url="127.0.0.1:8000")
    with pytest.raises(ValueError, match="max_concurrency"):
        OpenAIBackendConfig(max_concurrency=0)


def test_configs_load_through_the_project_loader():
    config = load_config(JudgeAgreementConfig, None, ["trajectories=x.jsonl", "reward.judge=deepshop",
                                                     "reward.deepshop.last_screenshots=5"])
    assert config.reward.judge == "deepshop" and config.reward.deepshop.last_screenshots == 5
    with pytest.raises((ConfigError, ValueError), match="judge"):
        load_config(RewardConfig, None, ["judge=gpt"])

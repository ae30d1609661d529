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


def test_backend_configuration_errors_name_the_field(tmp_path):
    with pytest.raises(ValueError, match=r"reward.model is required with reward.base_url"):
        build_reward(RewardConfig(kind="judge", base_url="http://127.0.0.1:1/v1"))
    # no base_url: a local judge, whose model must be a checkpoint folder (not a served model's name)
    with pytest.raises(ValueError, match=r"checkpoint folder reward.model, got 'gpt-4.1'"):
        build_reward(RewardConfig(kind="judge", model="gpt-4.1"))
    with pytest.raises(ValueError, match="reward.base_url must start with http"):
        RewardConfig(base_url="127.0.0.1:8000")
    with pytest.raises(ValueError, match="base_url"):
        OpenAIBackendConfig(base_url="127.0.0.1:8000")
    with pytest.raises(ValueError, match="max_concurrency"):
        OpenAIBackendConfig(max_concurrency=0)


def test_configs_load_through_the_project_loader():
    config = load_config(JudgeAgreementConfig, None, ["trajectories=x.jsonl", "reward.judge=deepshop"])
    assert config.reward.judge == "deepshop" and config.reward.prompt_version == 1
    with pytest.raises((ConfigError, ValueError), match="judge"):
        load_config(RewardConfig, None, ["judge=gpt"])
    with pytest.raises(ConfigError, match=r"'reward.prompt_version' .* is not a run setting: fixed at 1 .*v1 is the"):
        load_config(JudgeAgreementConfig, None, ["trajectories=x.jsonl", "reward.prompt_version=2"])


@pytest.mark.parametrize("old, new", [
    ("reward.openai.base_url=http://127.0.0.1:1/v1", "renamed to reward.base_url"),
    ("reward.openai.max_concurrency=4", "merged into reward.max_concurrency"),
    ("reward.openai.jpeg_quality=80", "webrl.reward.backends.JPEG_QUALITY"),
    ("reward.backend=local", "derived from reward.base_url"),
    ("reward.local_model_path=ckpt", "merged into reward.model"),
    ("reward.judging.cache_dir=x", "renamed to reward.cache_dir"),
    ("reward.webjudge.prompt_version=2", "removed: every judge uses its v1 prompts"),
    ("reward.deepshop.last_screenshots=5", "DeepShopJudgeConfig: last_screenshots 15"),
    ("reward.recipe.not_done_reward=-0.5", "RecipeRewardConfig"),
    ("reward.programmatic.success_threshold=0.5", "renamed to reward.success_threshold"),
])
def test_old_reward_keys_fail_naming_their_replacement(old, new):
    from webrl.run.config import WebRLConfig

    key = old.split("=")[0]
    with pytest.raises(ConfigError, match=rf"{key}' \(from the command line\) is gone: .*{new}"):
        load_config(WebRLConfig, None, [old])

"""`RewardConfig` -> a ready `RewardFn`: the one place that wires judges, backends and rules.

    reward_fn = build_reward(RewardConfig(kind="judge", judge="webjudge",
                                          base_url="https://api.openai.com/v1", model="o4-mini"))

kind:
  "programmatic"  the task checker only (sandbox sites, MiniWoB)
  "judge"         the judge only, on every trajectory
  "recipe"        OpenWebRL: format rules, then the checker where the task has one
                  (`use_checker`) and the judge otherwise, only for episodes the agent ended

Where the judge runs follows from `base_url`: a chat-completions server when it is set (a hosted
API, `webrl serve`, vLLM, SGLang), else an in-process transformers model loaded from the
checkpoint folder `model`. The judges' and the recipe's own settings are their papers' values,
fixed here (the component dataclasses take others: `WebJudgeConfig`, `RecipeRewardConfig`, ...).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from webrl.config import moved_keys
from webrl.reward.backends import OpenAIBackendConfig, OpenAIChatBackend, TransformersBackend
from webrl.reward.base import RewardFn
from webrl.reward.history_judges import (ActionHistoryJudge, ActionHistoryJudgeConfig, DeepShopJudge,
                                         DeepShopJudgeConfig)
from webrl.reward.judge import JudgeConfig, JudgeReward
from webrl.reward.rules import FallbackReward, ProgrammaticReward, ProgrammaticRewardConfig, RecipeReward
from webrl.reward.webjudge import WebJudge, WebJudgeConfig
from webrl.config import fixed

REWARD_KINDS = ("programmatic", "judge", "recipe")
JUDGES = ("webjudge", "action_history", "deepshop")
_FIXED = "removed: fixed at the paper's value"


def _register_moved_keys() -> None:
    """reward.* keys before the surface was halved -> what replaced them (`webrl.config.MOVED_KEYS`).
    A removed section is also registered by its own name: the loader reports the first unknown
    part of a dotted key."""
    renamed = {f"reward.openai.{k}": f"renamed to reward.{k}"
               for k in ("base_url", "model", "api_key_env", "timeout_s", "max_retries")}
    renamed.update({f"reward.judging.{k}": f"renamed to reward.{k}" for k in ("max_tokens", "temperature", "cache_dir")})
    renamed.update({f"reward.{j}.prompt_version": "removed: every judge uses its v1 prompts"
                    for j in ("webjudge", "action_history", "deepshop")})
    table = {
        **renamed,
        "reward.openai.max_concurrency": "merged into reward.max_concurrency (requests in flight and trajectories "
                                         "scored at once)",
        "reward.openai.backoff_s": "removed: fixed at 1 s (webrl.reward.backends.BACKOFF_S); set reward.max_retries",
        "reward.openai.backoff_max_s": "removed: fixed at 30 s (webrl.reward.backends.BACKOFF_MAX_S)",
        "reward.openai.jpeg_quality": "removed: fixed at 90 (webrl.reward.backends.JPEG_QUALITY)",
        "reward.openai": "section removed: reward.openai.X is now reward.X (base_url, model, api_key_env, timeout_s, "
                         "max_retries; max_concurrency merged into reward.max_concurrency)",
        "reward.backend": "removed: derived from reward.base_url (set: a served judge, the old backend=openai; "
                          "empty: a local judge loaded from the checkpoint folder reward.model, the old backend=local)",
        "reward.local_model_path": "merged into reward.model (with reward.base_url empty: a local judge)",
        "reward.local_dtype": "removed: a local judge loads in bfloat16 on a GPU, float32 on the CPU "
                              "(webrl.reward.backends.local_judge_dtype)",
        "reward.judging.on_unparseable": "removed: an unreadable verdict always drops the sample (JudgeConfig "
                                         "takes on_unparseable=fail for tests)",
        "reward.judging": "section removed: reward.judging.X is now reward.X (max_tokens, temperature, cache_dir)",
        "reward.webjudge": f"{_FIXED} (WebJudgeConfig: score_threshold 3, max_images 50, image_workers 4, "
                           f"note_chars 400)",
        "reward.action_history": f"{_FIXED} (ActionHistoryJudgeConfig: last_screenshots 3)",
        "reward.deepshop": f"{_FIXED} (DeepShopJudgeConfig: last_screenshots 15, params_key task_params)",
        "reward.recipe": f"{_FIXED} (RecipeRewardConfig: -1 after 3 unparseable turns in a row, 0 for a final "
                         f"unparseable turn or no done action); the rules apply with reward.kind=recipe",
        "reward.programmatic.success_threshold": "renamed to reward.success_threshold",
        "reward.programmatic.info_key": "removed: the checker's reward is always trajectory.info.task_reward",
        "reward.programmatic": "section removed: reward.programmatic.success_threshold is now "
                               "reward.success_threshold; info_key is fixed at task_reward",
    }
    for section in ("webjudge", "action_history", "deepshop", "recipe"):
        table.setdefault(f"reward.{section}.*", table[f"reward.{section}"])
    moved_keys(table)


_register_moved_keys()


@dataclass
class RewardConfig:
    kind: str = "recipe"
    """programmatic | judge | recipe (see the module docstring)."""
    judge: str = "action_history"
    """Which judge: webjudge | action_history | deepshop."""
    use_checker: bool = fixed(True, "a task's own checker, when it has one, scores it")
    """kind=recipe: use the task's checker where it has one, the judge only where it has none."""
    base_url: str = ""
    """The judge's chat-completions server root including `/v1` (requests go to
    `<base_url>/chat/completions`); empty = the judge runs in this process from the checkpoint
    folder `model` (bfloat16 on a GPU, float32 on the CPU)."""
    model: str = ""
    """The judge model: the name sent to `base_url` (e.g. "gpt-4.1", or the name `webrl serve`
    prints), or with base_url empty the local checkpoint folder."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the endpoint's API key; unset or empty = no Authorization header."""
    timeout_s: float = 120.0
    """Per-attempt timeout of a judge request in seconds (connecting and each read)."""
    max_retries: int = 3
    """Retries after a timeout, connection error, 408, 409, 429 or 5xx (other 4xx are not retried;
    waits double from 1 s up to 30 s: `webrl.reward.backends.BACKOFF_S`)."""
    max_concurrency: int = 16
    """Judge requests in flight at once, and trajectories scored at once (judge calls overlap;
    results keep the trajectories' order). A local judge and kind=programmatic score one at a time."""
    max_tokens: int = 1024
    """Most tokens per judge reply (reasoning judges need more)."""
    temperature: float = 0.0
    """Judge sampling temperature (0 = greedy: reproducible and cacheable; some reasoning models
    accept only 1)."""
    prompt_version: int = fixed(1, "v1 is the prompt version shipped for every judge")
    """Version N of the judge's prompt files, prompts/<judge>_*_v<N>.txt."""
    cache_dir: str = ""
    """Folder of the verdict cache (keyed by judge, model, prompts and the judged content); empty =
    no cache."""
    success_threshold: Optional[float] = None
    """The checker's reward >= threshold becomes 1.0, below it 0.0 (binary success); None keeps the
    checker's value (partial credit)."""

    def __post_init__(self) -> None:
        if self.kind not in REWARD_KINDS:
            raise ValueError(f"RewardConfig.kind must be one of {REWARD_KINDS}, got {self.kind!r}")
        if self.judge not in JUDGES:
            raise ValueError(f"RewardConfig.judge must be one of {JUDGES}, got {self.judge!r}")
        if self.base_url and not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"reward.base_url must start with http:// or https:// (or be empty: a local judge "
                             f"model), got {self.base_url!r}")
        if not isinstance(self.max_concurrency, int) or self.max_concurrency < 1:
            raise ValueError(f"RewardConfig.max_concurrency (reward.max_concurrency) must be an integer >= 1, "
                             f"got {self.max_concurrency!r}")
        if self.base_url:  # the component configs validate the rest
            self.openai_config()
        self.judge_config()
        ProgrammaticRewardConfig(success_threshold=self.success_threshold)

    @property
    def local(self) -> bool:
        """Whether the judge runs in process (base_url empty)."""
        return not self.base_url

    def openai_config(self) -> OpenAIBackendConfig:
        return OpenAIBackendConfig(base_url=self.base_url, model=self.model, api_key_env=self.api_key_env,
                                   timeout_s=self.timeout_s, max_retries=self.max_retries,
                                   max_concurrency=self.max_concurrency)

    def judge_config(self) -> JudgeConfig:
        return JudgeConfig(max_tokens=self.max_tokens, temperature=self.temperature, cache_dir=self.cache_dir)


def build_evaluator(config: RewardConfig) -> Any:
    version = config.prompt_version
    if config.judge == "webjudge":
        return WebJudge(WebJudgeConfig(prompt_version=version))
    if config.judge == "deepshop":
        return DeepShopJudge(DeepShopJudgeConfig(prompt_version=version))
    return ActionHistoryJudge(ActionHistoryJudgeConfig(prompt_version=version))


def build_backend(config: RewardConfig) -> Any:
    if config.local:
        if not config.model or not Path(config.model).is_dir():
            raise ValueError(f"reward.base_url is empty, so the judge runs in this process from the checkpoint "
                             f"folder reward.model, got {config.model!r}: set reward.model to a checkpoint folder, "
                             f"or reward.base_url (and reward.model) for a served judge")
        return TransformersBackend.from_pretrained(config.model)
    if not config.model:
        raise ValueError(f"reward.model is required with reward.base_url={config.base_url!r} (the judge model's name)")
    return OpenAIChatBackend(config.openai_config())


def build_judge(config: RewardConfig, backend: Optional[Any] = None) -> JudgeReward:
    """The configured judge as a RewardFn; `backend` overrides the configured one (tests)."""
    return JudgeReward(build_evaluator(config), backend or build_backend(config), config.judge_config())


def build_reward(config: RewardConfig, backend: Optional[Any] = None) -> RewardFn:
    """The configured reward function, carrying `max_concurrency`, the bound `score_trajectories`
    uses: 1 for the checker (instant) and for a backend that serves one call at a time (a local
    judge model), else reward.max_concurrency. The judge backend is only built when one is needed."""
    checker = ProgrammaticReward(ProgrammaticRewardConfig(success_threshold=config.success_threshold))
    if config.kind == "programmatic":
        checker.max_concurrency = 1
        return checker
    judge = build_judge(config, backend)
    reward_fn: Any = judge
    if config.kind == "recipe":
        reward_fn = RecipeReward(FallbackReward(checker, judge) if config.use_checker else judge)
    reward_fn.max_concurrency = getattr(judge.backend, "max_concurrency", config.max_concurrency)
    return reward_fn

"""Judge-based rewards: an evaluator (what to ask) + a backend (who answers) + a cache.

    reward = JudgeReward(WebJudge(), backend, JudgeConfig(cache_dir="runs/x/judge_cache"))
    result = reward(trajectory)          # RewardResult: 1.0 / 0.0, or a drop with a reason

An evaluator implements `Evaluator`: `content(trajectory)` (the judged content, hashed for
the cache) and `evaluate(trajectory, ask)` -> `Verdict`, where `ask(prompt, images, **fields)`
renders a versioned prompt, sends it with the images and returns the reply text.

Outcomes:
  verdict True / False          -> reward 1.0 / 0.0 (cached)
  no readable verdict           -> drop "judge_unparseable" (default) or 0.0 (`on_unparseable`)
  backend timeout / error       -> drop "<judge_timeout|judge_http_error|...>", never 0; not cached
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol, Sequence

from webrl.chat.messages import ChatMessage
from webrl.reward.backends import ChatBackend, JudgeBackendError
from webrl.reward.base import RewardResult
from webrl.reward.cache import VerdictCache, content_key
from webrl.reward.prompts import load_prompt
from webrl.types import Image, Trajectory

UNPARSEABLE_POLICIES = ("drop", "fail")
CACHE_FORMAT = 1


@dataclass
class JudgeConfig:
    max_tokens: int = 1024
    """Most tokens per judge reply."""
    temperature: float = 0.0
    """Judge sampling temperature (0 = greedy: reproducible and cacheable)."""
    on_unparseable: str = "drop"
    """A reply without an unambiguous verdict: "drop" the sample (default: the judge, not the
    agent, failed) or score it 0 ("fail")."""
    cache_dir: str = ""
    """Folder of the verdict cache; empty = no cache."""

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"JudgeConfig.max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"JudgeConfig.temperature must be >= 0, got {self.temperature}")
        if self.on_unparseable not in UNPARSEABLE_POLICIES:
            raise ValueError(f"JudgeConfig.on_unparseable must be one of {UNPARSEABLE_POLICIES}, "
                             f"got {self.on_unparseable!r}")


@dataclass
class Verdict:
    """An evaluator's outcome: success True/False, or None when no reply had a readable verdict."""

    success: Optional[bool]
    details: dict[str, Any] = field(default_factory=dict)


Ask = Callable[..., str]


class Evaluator(Protocol):
    name: str
    prompt_names: tuple[str, ...]

    def settings(self) -> dict[str, Any]:
        """Settings that change verdicts (part of the cache key)."""

    def content(self, trajectory: Trajectory) -> dict[str, Any]:
        """What the judge sees of the trajectory, JSON-able (images by digest)."""

    def evaluate(self, trajectory: Trajectory, ask: Ask) -> Verdict:
        """Ask the backend and decide. May raise JudgeBackendError."""


class JudgeReward:
    """A `RewardFn` from an evaluator and a backend, with a verdict cache."""

    def __init__(self, evaluator: Evaluator, backend: ChatBackend, config: Optional[JudgeConfig] = None):
        self.evaluator, self.backend = evaluator, backend
        self.config = config or JudgeConfig()
        self.name = evaluator.name
        self.cache = VerdictCache(self.config.cache_dir) if self.config.cache_dir else None
        self._prompts = {n: load_prompt(n) for n in evaluator.prompt_names}

    def ask(self, prompt_name: str, images: Sequence[Image] = (), **fields: Any) -> str:
        """Render `prompt_name` with `fields`, append `images` to the user turn, return the reply."""
        system, user = self._prompts[prompt_name].render(**fields)
        messages = [ChatMessage("system", (system,)), ChatMessage("user", (user, *images))]
        return self.backend.chat(messages, max_tokens=self.config.max_tokens,
                                 temperature=self.config.temperature).text

    def cache_key(self, trajectory: Trajectory) -> str:
        return content_key({
            "format": CACHE_FORMAT, "judge": self.evaluator.name, "settings": self.evaluator.settings(),
            "backend": self.backend.identity,
            "sampling": {"max_tokens": self.config.max_tokens, "temperature": self.config.temperature},
            "prompts": {n: p.digest for n, p in sorted(self._prompts.items())},
            "content": self.evaluator.content(trajectory),
        })

    def _result(self, verdict: Verdict) -> RewardResult:
        details = {"judge": self.name, **verdict.details}
        if verdict.success is None:
            if self.config.on_unparseable == "drop":
                return RewardResult.drop("judge_unparseable", "no unambiguous verdict in the judge reply",
                                         **details)
            return RewardResult(0.0, details={**details, "unparseable": True})
        return RewardResult(1.0 if verdict.success else 0.0, details=details)

    def __call__(self, trajectory: Trajectory) -> RewardResult:
        key = self.cache_key(trajectory) if self.cache is not None else None
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                result = self._result(Verdict(hit["success"], hit["details"]))
                result.details["cache"] = "hit"
                return result
        try:
            verdict = self.evaluator.evaluate(trajectory, self.ask)
        except JudgeBackendError as e:
            return RewardResult.drop(e.category, e.message, judge=self.name)
        result = self._result(verdict)
        if self.cache is not None and not (verdict.success is None and self.config.on_unparseable == "drop"):
            self.cache.put(key, {"success": verdict.success, "details": verdict.details})
        result.details["cache"] = "miss" if self.cache is not None else "off"
        return result


def settings_of(config: Any) -> dict[str, Any]:
    """A config dataclass as a dict (for `Evaluator.settings`)."""
    return dataclasses.asdict(config)

"""The action-history judge (OpenWebRL / WebVoyager) and the DeepShop judge.

Action-history judge (OpenWebRL's reward judge, WebVoyager's evaluator with actions added):
task + every step's action with the env's feedback + the final answer + the last k (3)
screenshots -> "Verdict: SUCCESS" / "Verdict: NOT SUCCESS" (one call).

DeepShop judge: one call per dimension the query has (attribute, filter, sort; the data set's
"None" means absent) with the last 15 screenshots and the answer; success = the product of the
per-dimension verdicts (all must pass). A query with no dimension gets one overall call.
Departure: an unreadable reply for any dimension makes the whole verdict unreadable (rather
than a failure), since the judge, not the agent, failed.

DeepShop reads the query's dimensions from `trajectory.info.<params_key>` (default
"task_params": the rollout copies `TaskSpec.params` there; the DeepShop loader puts "attribute",
"filter" and "sort" into the params).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from webrl.reward.base import action_history, final_answer, trajectory_screenshots
from webrl.reward.judge import Ask, Verdict, settings_of
from webrl.reward.verdict import parse_verdict
from webrl.reward.webjudge import numbered
from webrl.types import Trajectory, check_info_field

DEEPSHOP_DIMENSIONS = ("attribute", "filter", "sort")


@dataclass
class ActionHistoryJudgeConfig:
    last_screenshots: int = 3
    """How many final screenshots the judge sees (OpenWebRL: 3)."""
    prompt_version: int = 1
    """Version of prompts/action_history_v<N>.txt."""

    def __post_init__(self) -> None:
        if self.last_screenshots < 0:
            raise ValueError(f"ActionHistoryJudgeConfig.last_screenshots must be >= 0, got {self.last_screenshots}")
        if self.prompt_version < 1:
            raise ValueError(f"ActionHistoryJudgeConfig.prompt_version must be >= 1, got {self.prompt_version}")


def last_images(trajectory: Trajectory, k: int) -> list:
    shots = [img for _, img in trajectory_screenshots(trajectory)]
    return shots[-k:] if k > 0 else []


class ActionHistoryJudge:
    """Task, actions with feedback, final answer, last k screenshots -> SUCCESS / NOT SUCCESS."""

    name = "action_history"

    def __init__(self, config: Optional[ActionHistoryJudgeConfig] = None):
        self.config = config or ActionHistoryJudgeConfig()
        self.prompt_names = (f"action_history_v{self.config.prompt_version}",)

    def settings(self) -> dict[str, Any]:
        return settings_of(self.config)

    def content(self, trajectory: Trajectory) -> dict[str, Any]:
        return {"task": trajectory.goal, "actions": action_history(trajectory), "answer": final_answer(trajectory),
                "screenshots": [img.digest for img in last_images(trajectory, self.config.last_screenshots)]}

    def evaluate(self, trajectory: Trajectory, ask: Ask) -> Verdict:
        images = last_images(trajectory, self.config.last_screenshots)
        reply = ask(self.prompt_names[0], images, task=trajectory.goal,
                    actions=numbered(action_history(trajectory)),
                    answer=final_answer(trajectory) or "(none)", num_screenshots=len(images))
        return Verdict(parse_verdict(reply), {"reply": reply[-2000:]})


@dataclass
class DeepShopJudgeConfig:
    last_screenshots: int = 15
    """How many final screenshots each call sees (DeepShop: 15)."""
    params_key: str = "task_params"
    """`Trajectory.info` field holding the query's attribute / filter / sort fields (a dict)."""
    prompt_version: int = 1
    """Version of prompts/deepshop_*_v<N>.txt."""

    def __post_init__(self) -> None:
        if self.last_screenshots < 0:
            raise ValueError(f"DeepShopJudgeConfig.last_screenshots must be >= 0, got {self.last_screenshots}")
        check_info_field("DeepShopJudgeConfig.params_key", self.params_key)
        if self.prompt_version < 1:
            raise ValueError(f"DeepShopJudgeConfig.prompt_version must be >= 1, got {self.prompt_version}")


def deepshop_dimensions(params: dict[str, Any]) -> dict[str, str]:
    """The dimensions a DeepShop query has: non-empty values other than None / "None"."""
    out = {}
    for dim in DEEPSHOP_DIMENSIONS:
        value = params.get(dim)
        if value is not None and str(value).strip() not in ("", "None"):
            out[dim] = str(value).strip()
    return out


class DeepShopJudge:
    """One call per present dimension; success only when every dimension passes."""

    name = "deepshop"

    def __init__(self, config: Optional[DeepShopJudgeConfig] = None):
        self.config = config or DeepShopJudgeConfig()
        v = self.config.prompt_version
        self.prompt_names = tuple(f"deepshop_{d}_v{v}" for d in (*DEEPSHOP_DIMENSIONS, "overall"))

    def settings(self) -> dict[str, Any]:
        return settings_of(self.config)

    def _dimensions(self, trajectory: Trajectory) -> dict[str, str]:
        return deepshop_dimensions(getattr(trajectory.info, self.config.params_key) or {})

    def content(self, trajectory: Trajectory) -> dict[str, Any]:
        return {"task": trajectory.goal, "actions": action_history(trajectory), "answer": final_answer(trajectory),
                "dimensions": self._dimensions(trajectory),
                "screenshots": [img.digest for img in last_images(trajectory, self.config.last_screenshots)]}

    def evaluate(self, trajectory: Trajectory, ask: Ask) -> Verdict:
        images = last_images(trajectory, self.config.last_screenshots)
        common = {"task": trajectory.goal, "actions": numbered(action_history(trajectory)),
                  "answer": final_answer(trajectory) or "(none)", "num_screenshots": len(images)}
        dims = self._dimensions(trajectory)
        v = self.config.prompt_version
        verdicts: dict[str, Optional[bool]] = {}
        replies: dict[str, str] = {}
        if not dims:
            replies["overall"] = ask(f"deepshop_overall_v{v}", images, **common)
            verdicts["overall"] = parse_verdict(replies["overall"])
        for dim, requirement in dims.items():
            replies[dim] = ask(f"deepshop_{dim}_v{v}", images, requirement=requirement, **common)
            verdicts[dim] = parse_verdict(replies[dim])
        details = {"dimensions": verdicts, "replies": {k: r[-1000:] for k, r in replies.items()}}
        if any(v is None for v in verdicts.values()):
            return Verdict(None, details)
        return Verdict(all(verdicts.values()), details)

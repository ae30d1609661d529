"""WebJudge (Online-Mind2Web): key points -> screenshot scores -> outcome.

    1. key points: the task's checkable requirements (one call, text only).
    2. every distinct screenshot is scored 1-5 against the key points (one call per image,
       `image_workers` at a time); screenshots scoring >= `score_threshold` are kept, at most
       `max_images` (the highest scores; ties go to the later screenshot), in episode order.
    3. outcome: task, key points, the *factual* action history (the final done action and its
       answer are left out, as the benchmark requires: an agent's claim is not evidence) and
       the kept screenshots with their notes -> `Status: "success" | "failure"`.

Departures from the public script, and why:
  * prompts are our own (prompts/webjudge_*_v1.txt), not the script's wording;
  * identical screenshots (same bytes) are scored once, since the score can only repeat;
  * a screenshot whose score reply is unreadable is not kept (counted in details) instead of
    being read as 0 silently; an unreadable key-point or outcome reply makes the verdict
    unreadable (`JudgeConfig.on_unparseable`);
  * verdict parsing is strict (`webrl.reward.verdict`): the public script looked for
    "success" anywhere after "Status:".
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

from webrl.reward.base import action_history, trajectory_screenshots
from webrl.reward.judge import Ask, Verdict, settings_of
from webrl.reward.verdict import parse_key_points, parse_score, parse_verdict, strip_thinking
from webrl.types import Trajectory


@dataclass
class WebJudgeConfig:
    score_threshold: int = 3
    """Keep screenshots scored at least this (1-5; Online-Mind2Web uses 3)."""
    max_images: int = 50
    """Most screenshots shown in the outcome call (Online-Mind2Web caps at 50)."""
    image_workers: int = 4
    """Screenshot-scoring calls in flight at once for one trajectory."""
    note_chars: int = 400
    """Longest screenshot note carried into the outcome prompt."""
    prompt_version: int = 1
    """Version of the prompts/webjudge_*_v<N>.txt files to use."""

    def __post_init__(self) -> None:
        if not 1 <= self.score_threshold <= 5:
            raise ValueError(f"WebJudgeConfig.score_threshold must be in 1..5, got {self.score_threshold}")
        for name in ("max_images", "image_workers", "note_chars", "prompt_version"):
            if getattr(self, name) < 1:
                raise ValueError(f"WebJudgeConfig.{name} must be >= 1, got {getattr(self, name)}")


def _note(reply: str, limit: int) -> str:
    lines = [ln for ln in strip_thinking(reply).splitlines() if ln.strip() and parse_score(ln) is None]
    text = " ".join(" ".join(lines).split())
    return text[:limit]


def numbered(lines: list[str]) -> str:
    return "\n".join(f"{i}. {line}" for i, line in enumerate(lines, 1)) or "(no actions)"


def select_screenshots(scores: list[tuple[int, Optional[int]]], threshold: int, cap: int) -> list[int]:
    """Positions (into `scores`) of the screenshots to keep, in episode order.

    scores: (turn index, score or None) per screenshot, in episode order. Keep score >=
    threshold; above `cap`, keep the highest scores, preferring later screenshots on ties.
    Example: scores [(0,3),(1,5),(2,None),(3,4),(4,3)], threshold 3, cap 3 -> scores 5, 4 and
    the later 3 (turn 4) -> positions [1, 3, 4].
    """
    eligible = [i for i, (_, s) in enumerate(scores) if s is not None and s >= threshold]
    best = sorted(eligible, key=lambda i: (scores[i][1], i), reverse=True)[:cap]
    return sorted(best)


class WebJudge:
    """The WebJudge evaluator (use with `JudgeReward`)."""

    name = "webjudge"

    def __init__(self, config: Optional[WebJudgeConfig] = None):
        self.config = config or WebJudgeConfig()
        v = self.config.prompt_version
        self.prompt_names = (f"webjudge_key_points_v{v}", f"webjudge_image_v{v}", f"webjudge_outcome_v{v}")

    def settings(self) -> dict[str, Any]:
        return {k: v for k, v in settings_of(self.config).items() if k != "image_workers"}

    def content(self, trajectory: Trajectory) -> dict[str, Any]:
        return {"task": trajectory.goal, "actions": action_history(trajectory, include_final=False),
                "screenshots": [(i, img.digest) for i, img in trajectory_screenshots(trajectory)]}

    def evaluate(self, trajectory: Trajectory, ask: Ask) -> Verdict:
        key_names, image_name, outcome_name = self.prompt_names
        kp_reply = ask(key_names, task=trajectory.goal)
        key_points = parse_key_points(kp_reply)
        details: dict[str, Any] = {"key_points": key_points or kp_reply[:500]}
        if key_points is None:
            return Verdict(None, {**details, "failed_step": "key_points"})

        shots = trajectory_screenshots(trajectory)
        distinct = {img.digest: img for _, img in shots}

        def score(img) -> tuple[Optional[int], str]:
            reply = ask(image_name, [img], task=trajectory.goal, key_points=key_points)
            return parse_score(reply), _note(reply, self.config.note_chars)

        with ThreadPoolExecutor(max_workers=self.config.image_workers) as pool:
            by_digest = dict(zip(distinct, pool.map(score, distinct.values())))
        scores = [(turn, by_digest[img.digest][0]) for turn, img in shots]
        kept = select_screenshots(scores, self.config.score_threshold, self.config.max_images)
        details["image_scores"] = [{"turn": t, "score": s} for t, s in scores]
        details["unreadable_scores"] = sum(1 for _, s in scores if s is None)
        details["kept_turns"] = [shots[i][0] for i in kept]

        evidence = "\n".join(f"Screenshot {n} (step {shots[i][0] + 1}): {by_digest[shots[i][1].digest][1]}"
                             for n, i in enumerate(kept, 1)) or "(no screenshot was judged informative)"
        reply = ask(outcome_name, [shots[i][1] for i in kept], task=trajectory.goal, key_points=key_points,
                    actions=numbered(action_history(trajectory, include_final=False)), evidence=evidence)
        details["reply"] = reply[-2000:]
        return Verdict(parse_verdict(reply), details)

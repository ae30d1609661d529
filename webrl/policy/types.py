"""Typed containers of the policy layer: `Observation`, `PolicyRequest`, `Decision`, the `Policy` protocol.

A request is the current observation plus the episode's past `Turn`s (webrl.types); the policy
renders the whole prompt fresh from them every step (one training sample per turn, OpenWebRL).
A decision records exactly what the learner trains on: the prompt ids the model saw, the
sampled response ids and their log-probs under the sampling temperature.

Screenshot choice: `Observation.from_env(obs, info, screenshot=...)` takes
"raw" = info["raw_screenshot_png"] (no boxes; right for coordinate formats) or
"som" = obs["screenshot"] with the Set-of-Mark boxes drawn (right for element ids). The policy's
config picks "som" for the Set-of-Mark format and "raw" otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Optional, Protocol, Sequence

from webrl.actions import Action, ParseError
from webrl.types import Image, Turn, TurnObservation


@dataclass(frozen=True)
class Observation:
    """What the policy sees at one step (the env's observation, screenshot as PNG bytes)."""

    goal: str
    url: str = ""
    title: str = ""
    elements_text: str = ""
    feedback: str = ""
    last_action_error: str = ""
    tabs: str = ""
    step: int = 0
    screenshot: Optional[Image] = None
    skills: str = ""
    """Skills the agent may call as one action (the env's `skills` text, grounded mode); "" = none."""
    skill_guidance: str = ""
    """Steps of retrieved skills shown as instructions (guided mode, `webrl.policy.skills.guided`); "" = none.
    Both blocks are left out of the prompt when empty, so a prompt without skills is unchanged."""
    tools: str = ""
    """Tools the site exposes, callable as one action (the env's `tools` text, `webrl.envs.tools`);
    "" = none, and the prompt then has no "Tools" block (it is as without tools)."""

    @classmethod
    def from_env(cls, obs: dict[str, Any], info: Optional[dict[str, Any]] = None,
                 screenshot: str = "raw") -> "Observation":
        """From a WebEnv observation dict and info (`WebEnv`'s spec card)."""
        if screenshot not in ("raw", "som", "none"):
            raise ValueError(f"screenshot must be 'raw', 'som' or 'none', got {screenshot!r}")
        info = info or {}
        image = None
        if screenshot == "raw" and info.get("raw_screenshot_png"):
            image = Image(bytes(info["raw_screenshot_png"]), "png")
        elif screenshot in ("som", "raw") and obs.get("screenshot") is not None:
            image = Image.from_array(obs["screenshot"])  # "raw" falls back to the SoM array
        return cls(goal=str(obs.get("goal", "")), url=str(obs.get("url", "")), title=str(obs.get("title", "")),
                   elements_text=str(obs.get("elements_text", "")), feedback=str(obs.get("feedback", "")),
                   last_action_error=str(obs.get("last_action_error", "")), tabs=str(obs.get("tabs", "")),
                   step=int(obs.get("step", 0)), screenshot=image, skills=str(obs.get("skills", "") or ""),
                   tools=str(obs.get("tools", "") or ""))

    def to_record(self) -> TurnObservation:
        """`Turn.observation` for this observation: its text fields and the screenshot's size
        (the screenshot itself goes to `Turn.images`)."""
        size = list(self.screenshot.size) if self.screenshot is not None else None
        return TurnObservation(**{k: getattr(self, k) for k in RECORDED_FIELDS}, screenshot_size=size)

    @classmethod
    def from_turn(cls, turn: Turn, goal: str) -> "Observation":
        """Rebuild the observation a turn was decided on (its screenshot = the turn's last image)."""
        rec = turn.observation
        has_screenshot = bool(turn.images) and rec.screenshot_size is not None
        return cls(goal=goal, screenshot=turn.images[-1] if has_screenshot else None,
                   **{k: getattr(rec, k) for k in RECORDED_FIELDS})

    @property
    def feedback_text(self) -> str:
        """Feedback of the previous action as one text (error appended)."""
        parts = [p for p in (self.feedback, self.last_action_error and f"Error: {self.last_action_error}") if p]
        return "\n".join(parts)


# The fields `Observation.to_record` copies into `Turn.observation` and `from_turn` reads back.
RECORDED_FIELDS = tuple(f.name for f in fields(Observation) if f.name in TurnObservation.__dataclass_fields__)


@dataclass(frozen=True)
class SoMElement:
    """One numbered box: Set-of-Mark id, [x, y, w, h] in screenshot pixels, select options."""

    id: int
    bbox: tuple[float, float, float, float]
    options: tuple[str, ...] = ()
    role: str = ""
    name: str = ""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SoMElement":
        """From an env element dict (`info["elements"]`, see `WebEnv`'s spec card) or a stored record."""
        return cls(int(d["id"]), tuple(float(v) for v in d["bbox"]), tuple(d.get("options") or ()),
                   str(d.get("role", "")), str(d.get("name", "")))


@dataclass(frozen=True)
class MarkedObservation(Observation):
    """An `Observation` plus its Set-of-Mark elements (the decision heads need the boxes and
    options). `records` are the same elements as the trajectory log keeps them
    (`webrl.envs.observation.compact_elements`: id, bbox, role, tag, name, in_viewport, options
    and selected of selects), which `to_record` writes."""

    elements: tuple[SoMElement, ...] = ()
    records: tuple[dict, ...] = ()

    @classmethod
    def from_env(cls, obs: dict[str, Any], info: Optional[dict[str, Any]] = None,
                 screenshot: str = "som") -> "MarkedObservation":
        from webrl.envs.observation import compact_elements

        base = Observation.from_env(obs, info, screenshot)
        raw = list((info or {}).get("elements", ()))
        return cls(**{k: getattr(base, k) for k in base.__dataclass_fields__},
                   elements=tuple(SoMElement.from_dict(e) for e in raw), records=tuple(compact_elements(raw)))

    def to_record(self) -> TurnObservation:
        return replace(super().to_record(), elements=[dict(e) for e in self.records])


def marked_from_turn(turn: Turn, goal: str) -> Observation:
    """Rebuild the observation a logged turn was decided on: a `MarkedObservation` when the turn
    recorded its elements (`turn.observation.elements`), else a plain `Observation`."""
    base = Observation.from_turn(turn, goal)
    if not turn.observation.elements:
        return base
    records = tuple(dict(e) for e in turn.observation.elements)
    return MarkedObservation(**{k: getattr(base, k) for k in base.__dataclass_fields__},
                             elements=tuple(SoMElement.from_dict(e) for e in records), records=records)


@dataclass
class PolicyRequest:
    """One decision to make: the current observation and the episode's past turns, oldest first."""

    observation: Observation
    history: Sequence[Turn] = ()
    request_id: str = ""
    seed: Optional[int] = None
    """The sampling seed of this decision (`webrl.policy.seeds`); None: the engine's RNG."""


@dataclass
class DecisionStats:
    """Per-decision numbers for logging."""

    prompt_tokens: int = 0
    """Tokens of the prompt, visual tokens included."""
    response_tokens: int = 0
    latency_s: float = 0.0
    """Wall time of the batch that produced this decision (render + generate + parse)."""
    history_turns: int = 0
    """Past turns in the request."""
    history_dropped: int = 0
    """Oldest past turns left out to fit the token budget."""
    images: int = 0
    """Screenshots in the prompt."""
    over_budget: bool = False
    """True when the prompt exceeds the budget even with all history dropped."""
    finish_reason: str = "stop"
    """"stop" (stop token), "length" (max_new_tokens reached) or the server's reason."""
    cached_tokens: int = 0
    """Prompt tokens the engine did not recompute because its prefix cache held them (an
    SGLang server's `meta_info.cached_tokens`); 0 for engines without one (transformers
    `generate` in process, `webrl serve`), which recompute all `prompt_tokens` every turn."""


@dataclass
class Decision:
    """A policy's answer to one request.

    parsed: the `Action`, or a `ParseError` value for malformed text.
    prompt_ids: (P,) ids the model saw (visual placeholders expanded); empty for endpoints.
    response_ids: (R,) sampled ids, stop token included; empty when the server gives none.
    logprobs: (R,) log-probs of response_ids under softmax(logits / temperature) (top-p /
      top-k truncation not applied: the learner recomputes exactly this); [] when unknown.
    images: the screenshots in the prompt, in prompt order (the current one last).
    shown: the observation the prompt was rendered from when a wrapper edited the request's
      (guided skills); `to_turn` records it instead of the caller's. None: the caller's.
    """

    parsed: Action | ParseError
    response_text: str
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    images: list[Image] = field(default_factory=list)
    stats: DecisionStats = field(default_factory=DecisionStats)
    shown: Optional[Observation] = None

    @property
    def action(self) -> Optional[Action]:
        return self.parsed if isinstance(self.parsed, Action) else None

    @property
    def parse_error(self) -> Optional[ParseError]:
        return self.parsed if isinstance(self.parsed, ParseError) else None

    def to_turn(self, observation: Observation, policy_version: int = -1,
                decided_by: str = "generator") -> Turn:
        """The `Turn` to store; `Observation.from_turn` and the SFT path read it back."""
        observation = self.shown if self.shown is not None else observation
        return Turn(prompt_ids=list(self.prompt_ids), response_ids=list(self.response_ids),
                    logprobs=list(self.logprobs) if len(self.logprobs) == len(self.response_ids) else [],
                    images=list(self.images),
                    response_text=self.response_text, action=self.action,
                    parse_error=self.parse_error.message if self.parse_error is not None else None,
                    policy_version=policy_version, decided_by=decided_by,
                    timings={"policy_s": self.stats.latency_s}, observation=observation.to_record())


class Policy(Protocol):
    """Anything that turns a batch of requests into decisions (generator, endpoint, wrappers)."""

    def act(self, requests: Sequence[PolicyRequest]) -> list[Decision]: ...

"""Guided mode (WebXSkill deployment): a policy wrapper that shows retrieved skills' guidance.

    policy = SkillGuidedPolicy(inner, SkillGraph.load("skills/"), SkillsConfig(max_skills=3, max_chars=1200))
    decisions = policy.act(requests)       # inner.act on requests whose observation.skill_guidance holds it

Per request: `graph.retrieve(observation.url, observation.goal, k=max_skills)` (webrl.policy.skills.graph),
each skill rendered as one line

    <signature>: 1. <step 1 guidance> 2. <step 2 guidance> ...
    e.g. type_search_click_search(search: text): 1. Type <search> into the searchbox "Search products" 2. Click ...

lines added in rank order while the block stays within `max_chars` (a line that does not fit is
left out whole, and so are the ones after it: the block never holds a cut line). The block goes
into `request.observation.skill_guidance` (`dataclasses.replace`: every other field of the request
stays as it was, grounded mode's callable `skills` included); the prompt shows it as its own
"Skill guidance" block. No skill applies, or none fits: the request goes through unchanged.

Recording: the rollout stores a turn with `decision.to_turn(observation)` where `observation`
is the one it built, without the guidance. So each returned decision carries the guided
observation in `Decision.shown` (`dataclasses.replace`, so a CascadeDecision stays one), which
`to_turn` records: `Turn.observation.skill_guidance` holds exactly what the prompt showed and SFT
re-renders the same prompt ids.

Interpretation: WebXSkill's guided mode puts the skill's steps into the agent's context as
instructions; how they are formatted and budgeted is ours.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from webrl.policy.skills.graph import SkillGraph
from webrl.envs.skills import Skill, SkillLibrary
from webrl.config import fixed

if TYPE_CHECKING:  # webrl.policy.stack imports this module for SkillsConfig: no runtime import back
    from webrl.policy.types import Decision, PolicyRequest

__all__ = ["SkillGuidedPolicy", "SkillsConfig", "render_guidance", "skill_line"]


@dataclass
class SkillsConfig:
    """Guided skills in the prompt (policy.skills)."""

    library_dir: str = ""
    """Skill library folder (`webrl skills extract` out=) or a graph JSON file; required when
    "skills" is in policy.wrappers."""
    max_skills: int = fixed(3, "the Skills block holds the three best matches")
    """Skills retrieved per step at most (>= 1)."""
    max_chars: int = fixed(1200, "the Skills block's length cap in the prompt")
    """Characters of guidance at most (>= 80): lines that do not fit are left out."""

    def __post_init__(self) -> None:
        from webrl.config import ConfigError

        if not (isinstance(self.max_skills, int) and not isinstance(self.max_skills, bool) and self.max_skills >= 1):
            raise ConfigError(f"policy.skills.max_skills must be an integer >= 1, got {self.max_skills!r}")
        if not (isinstance(self.max_chars, int) and not isinstance(self.max_chars, bool) and self.max_chars >= 80):
            raise ConfigError(f"policy.skills.max_chars must be an integer >= 80, got {self.max_chars!r}")


def skill_line(skill: Skill) -> str:
    params = ", ".join(f"{p.name}: {p.type}" for p in skill.params)
    steps = " ".join(f"{i}. {s.guidance or s.kind}" for i, s in enumerate(skill.steps, 1))
    return f"{skill.name}({params}): {steps}"


def render_guidance(skills: Sequence[Skill], max_chars: int) -> str:
    """One line per skill, in order, stopping at the first line that would exceed `max_chars`."""
    lines: list[str] = []
    used = 0
    for s in skills:
        line = skill_line(s)
        cost = len(line) + (1 if lines else 0)
        if used + cost > max_chars:
            break
        lines.append(line)
        used += cost
    return "\n".join(lines)


class SkillGuidedPolicy:
    """`Policy` wrapper: retrieved skills' guidance in `observation.skill_guidance`, then the inner policy."""

    def __init__(self, inner: Any, skills: SkillGraph | SkillLibrary, config: SkillsConfig | None = None):
        self.inner = inner
        self.graph = skills if isinstance(skills, SkillGraph) else SkillGraph(skills)
        self.config = config or SkillsConfig()
        if not len(self.graph.library):
            raise ValueError("SkillGuidedPolicy needs at least one skill (an empty library would change nothing)")

    def guide(self, request: "PolicyRequest") -> "PolicyRequest":
        obs = request.observation
        found = self.graph.retrieve(obs.url, obs.goal, k=self.config.max_skills)
        text = render_guidance(found, self.config.max_chars)
        if not text:
            return request
        return dataclasses.replace(request, observation=dataclasses.replace(obs, skill_guidance=text))

    def act(self, requests: Sequence["PolicyRequest"]) -> list["Decision"]:
        guided = [self.guide(r) for r in requests]
        decisions = self.inner.act(guided)
        return [d if g is r else dataclasses.replace(d, shown=g.observation)
                for d, g, r in zip(decisions, guided, requests)]

    def __getattr__(self, name: str) -> Any:  # tokenizer, config, ... of the wrapped policy
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

"""What a real state showed, as text: `StateView` (the observation's text fields) and
`describe_state` (one line of it). ReSim's traces (webrl.recipes.resim) and Dyna-GRPO's refine
prompts (webrl.rollout.dyna) describe states this way."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StateView:
    """What a real state showed: the text fields of the observation."""

    url: str = ""
    title: str = ""
    elements_text: str = ""
    feedback: str = ""
    error: str = ""

    @classmethod
    def of(cls, obs: dict) -> "StateView":
        return cls(obs.get("url", ""), obs.get("title", ""), obs.get("elements_text", ""),
                   obs.get("feedback", ""), obs.get("last_action_error", ""))

    def same_page(self, other: "StateView") -> bool:
        return (self.url, self.title, self.elements_text) == (other.url, other.title, other.elements_text)


def describe_state(view: StateView, n_elements: int) -> str:
    """One line of a real state: URL, title, feedback, error and the first `n_elements` element
    lines (ReSim's traces and Dyna-GRPO's refine prompts describe states this way)."""
    parts = [f"URL {view.url}"] + [f'title "{view.title}"'] * bool(view.title)
    if view.feedback:
        parts.append(f"feedback: {view.feedback}")
    if view.error:
        parts.append(f"error: {view.error}")
    lines = [ln for ln in view.elements_text.splitlines() if ln.strip()]
    if n_elements and lines:
        more = f" (+{len(lines) - n_elements} more)" if len(lines) > n_elements else ""
        parts.append("elements: " + "; ".join(lines[:n_elements]) + more)
    return ", ".join(parts)

"""ReSim's search tree as plain data (`StateTree` of `Branch`es of `SimStep`s, JSON-able via
`dataclasses.asdict`) and `resim_trace`, the reasoning text one tree is written out as (pure:
a fixed template filled from the real observations, so every "simulated" state in the text is
exactly what the env showed). `webrl.recipes.resim` builds the trees against the env."""
from __future__ import annotations

from dataclasses import dataclass, field

from webrl.rollout.states import StateView, describe_state


# -- the tree (plain data, JSON-able via asdict) ---------------------------------------------------
@dataclass
class SimStep:
    """One real step of a branch: the action taken and the state it led to."""

    action: str
    """The action in the compact grammar."""
    state: StateView
    reward: float = 0.0
    done: bool = False


@dataclass
class Branch:
    """One considered action at a state and where it really led."""

    action: str
    proposed_by: str
    """"base" (the base policy's action) or "alternative"."""
    steps: list[SimStep] = field(default_factory=list)
    reward: float = 0.0
    """The env reward where the branch (or its rollout) ended; 0 if it did not end."""
    value: float = 0.0
    """reward - step_cost * env_steps."""
    env_steps: int = 0
    """Env steps the branch took after the replay (simulated plus rollout)."""
    value_source: str = "unfinished"
    """"terminal" (ended within the branch), "rollout" (the base policy finished it within
    value_steps) or "unfinished"."""
    diverged: bool = False
    """The replay of the prefix did not reach the state's page (or ended first): never chosen."""


@dataclass
class StateTree:
    """The tree of one state: its real view, the prefix that reaches it, its branches, the choice."""

    step: int
    state: StateView
    prefix: list[str]
    branches: list[Branch]
    chosen: int = 0


# -- traces (pure) --------------------------------------------------------------------------------
def _outcome(branch: Branch) -> str:
    worth = f"{branch.env_steps} step(s), so this option is worth {branch.value:.2f}"
    if branch.value_source == "terminal":
        return f"the episode ends with reward {branch.steps[-1].reward:.2f} after {worth}"
    if branch.value_source == "rollout":
        return f"not finished yet; continuing from there, it ends with reward {branch.reward:.2f} after {worth}"
    return f"not finished yet and no end in sight after {worth}"


def resim_trace(tree: StateTree, summary_elements: int = 5) -> str:
    """The reasoning text of one tree: every considered action's real future states, its value,
    then the chosen action and why."""
    lines = [f"I consider {len(tree.branches)} action(s) and simulate where each leads."]
    for i, b in enumerate(tree.branches, 1):
        who = "my first idea" if b.proposed_by == "base" else "an alternative"
        lines.append(f"Option {i} ({who}): {b.action}.")
        if b.diverged:
            lines.append("  (the page differed on replay; this option is not considered.)")
            continue
        for k, s in enumerate(b.steps, 1):
            lead = "after it" if k == 1 else f"then {s.action}"
            end = f"; the episode ends (reward {s.reward:.2f})" if s.done else ""
            lines.append(f"  Step {k}, {lead}: {describe_state(s.state, summary_elements)}{end}.")
        lines.append(f"  Outcome: {_outcome(b)}.")
    best = tree.branches[tree.chosen]
    ties = [i + 1 for i, b in enumerate(tree.branches) if not b.diverged and b.value == best.value]
    why = (f"it has the highest value ({best.value:.2f})" if len(ties) == 1 else
           f"options {', '.join(map(str, ties))} tie at {best.value:.2f} and it comes first")
    lines.append(f"Decision: option {tree.chosen + 1}, {best.action}, because {why}.")
    return "\n".join(lines)

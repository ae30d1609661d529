"""Step-level advantages from repeated page states (GiGPO-style), as pure functions.

Notation: B turn samples of one rollout, g(b) the episode group of turn b (one task, G
trajectories; `group_index` (B,)), tau(b) its trajectory (`trajectory_index` (B,)), t its step in
that trajectory, r_t the turn reward, s_b the page state the turn acted on, K the number of step
groups, S(b) the step group of turn b.

GRPO gives every turn of a trajectory the same episode-level advantage A^E (`advantages.py`).
GiGPO (Feng et al., arXiv 2505.10978) adds a step-level one: turns of the same episode group that
acted on the same state (an "anchor state") are compared with each other, so a turn that led
from that state to success sooner is credited over one that looped or failed from it.

1. `state_key(url, elements_text)`: the exact key of a page state, the normalised URL on the first
   line and then one line per element of the Set-of-Mark list, whitespace collapsed.
2. `step_groups(keys, group_index, similarity=c)`: step groups inside each episode group, across
   all steps of all its trajectories. c = 1: turns with equal keys. c in (0, 1): greedy; in input
   order a turn joins the first step group of its episode group whose representative (first
   member) key k has `state_similarity(key, k) >= c`, else it starts a new one.
3. `discounted_step_returns`: R_t = sum_{k >= 0} gamma^k r_{t+k} within each trajectory. With an
   outcome reward r on the last turn only, R_t = gamma^(T - 1 - t) r.
4. `step_relative_advantages`: A^S_b = R_b - mean_{S(b)} R, divided by (std_{S(b)} R + eps) when
   std_normalize (std with Bessel's correction); exactly 0 for step groups of one turn and for
   step groups whose returns are all equal.
5. `combine_advantages`: A_b = A^E_b + w * A^S_b.
6. `step_group_metrics`: K, mean and max step group size, fraction of turns in a step group of
   size >= 2 (how often states repeat: near 0 means the step term adds nothing).

`step_advantages` runs 2-6 in order for the trainer.

Reference: verl-agent `gigpo/core_gigpo.py` (`build_step_group`, `step_norm_reward`,
`compute_step_discounted_returns`) and `algorithm.gigpo` in `verl/trainer/config/ppo_trainer.yaml`.
Departures and choices:
- Keys. verl-agent hashes the environment's anchor observation (its raw text state). Ours is the
  URL plus the element list: the screenshot and the history in the prompt differ between turns
  that face the same page, and the URL alone is too coarse (a form half filled in has the same URL).
- Similarity. verl-agent uses difflib's character ratio over the raw text, threshold 0.95 when
  enabled. Ours is difflib's ratio over *lines* (elements): 2M / (n_a + n_b) with M matched lines,
  so "0.8" reads as "four of five lines (URL + elements) in common". A character ratio costs up to
  quadratic time in the thousands of characters of an element list, and difflib's default junk
  heuristic then ignores every character frequent in the text. The arguments are put in a
  canonical order so the measure is symmetric.
- Defaults. weight 0 (off: pure GRPO) where verl-agent defaults to 1.0; gamma 0.95 as in
  verl-agent's example scripts (its YAML `algorithm.gamma` defaults to 1.0); similarity 1.0
  (exact), as verl-agent's default `enable_similarity: False`.
- Normalisation. `std_normalize=False` is verl-agent's default mode "mean_norm", True is
  "mean_std_norm". There the mode also switches the episode-level normalisation; here the episode
  level stays with `GroupAdvantageConfig`. verl-agent's episode level also takes mean and std over
  turn rows (trajectories weighted by their length); ours keeps one row per trajectory.
- Flat step groups give exactly 0 (verl-agent's mean_norm leaves rounding error of the mean).
- Step group ids are 0..K-1 in order of first appearance, not random UUIDs, so runs reproduce.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import torch
from torch import Tensor

from .advantages import grpo_advantages, zero_variance_filter
from webrl.config import fixed

__all__ = [
    "StepAdvantageConfig", "normalize_url", "state_key", "state_similarity", "step_groups",
    "discounted_step_returns", "step_relative_advantages", "combine_advantages", "step_group_metrics",
    "step_advantages",
]


@dataclass
class StepAdvantageConfig:
    """GiGPO step-level advantages on top of the episode-level (GRPO family) ones."""

    weight: float = 0.0
    """w in A = A_episode + w * A_step; 0 turns the step level off (pure GRPO). >= 0."""
    gamma: float = 0.95
    """Discount of the step return R_t = sum_k gamma^k r_{t+k}; in [0, 1]."""
    similarity: float = 1.0
    """1.0: turns share a step group only on equal state keys (sandbox, MiniWoB++). In (0, 1):
    states whose `state_similarity` to a step group's representative is >= this share it (live
    pages, whose states rarely repeat exactly)."""
    std_normalize: bool = fixed(False, "step groups are mean-centred only, verl-agent's mean_norm default")
    """False: A_step = R - mean over the step group (verl-agent "mean_norm", its default).
    True: also divided by the step group's std + eps (verl-agent "mean_std_norm")."""
    eps: float = fixed(1e-6, "the std floor of std_normalize")
    """Added to the step group std before dividing (std_normalize only). >= 0."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.weight) and self.weight >= 0):
            raise ValueError(f"StepAdvantageConfig.weight must be a finite number >= 0, got {self.weight!r}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"StepAdvantageConfig.gamma must be in [0, 1], got {self.gamma!r}")
        if not 0.0 < self.similarity <= 1.0:
            raise ValueError(f"StepAdvantageConfig.similarity must be in (0, 1] (1.0 = exact key match), "
                             f"got {self.similarity!r}")
        if not isinstance(self.std_normalize, bool):
            raise ValueError(f"StepAdvantageConfig.std_normalize must be True or False, got {self.std_normalize!r}")
        if not (math.isfinite(self.eps) and self.eps >= 0):
            raise ValueError(f"StepAdvantageConfig.eps must be a finite number >= 0, got {self.eps!r}")


def normalize_url(url: str) -> str:
    """The URL with the fragment dropped, scheme and host lower-cased, an empty path written "/",
    and query parameters sorted by name (repeated names keep their order) and re-encoded, so
    "q=a%20b" and "q=a+b" agree. Path and user info keep their case: servers may tell them apart."""
    parts = urlsplit(url.strip())
    user, at, host = parts.netloc.rpartition("@")
    netloc = user + at + host.lower()
    path = parts.path or ("/" if netloc else "")
    params = sorted(parse_qsl(parts.query, keep_blank_values=True), key=lambda pair: pair[0])
    return urlunsplit((parts.scheme.lower(), netloc, path, urlencode(params), ""))


def state_key(url: str, elements_text: str) -> str:
    """Exact key of a page state: `normalize_url(url)`, then one line per element line of the
    Set-of-Mark list with runs of whitespace collapsed to one space and blank lines dropped.

    Two turns face the same state when URL and listed elements (ids, roles, names, values,
    checked / selected state) agree; the screenshot is left out (a caret blink changes it).
    """
    lines = (" ".join(line.split()) for line in elements_text.splitlines())
    return "\n".join([normalize_url(url), *(line for line in lines if line)])


def _line_matcher(a: str, b: str) -> SequenceMatcher:
    first, second = (a, b) if a <= b else (b, a)  # canonical order: the measure is symmetric
    return SequenceMatcher(None, first.split("\n"), second.split("\n"), autojunk=False)


def state_similarity(a: str, b: str) -> float:
    """Similarity of two state keys in [0, 1]: difflib's ratio over their lines, 2M / (n_a + n_b)
    with M the lines of the longest matching blocks. 1 for equal keys, 0 when no line agrees."""
    if a == b:
        return 1.0
    return _line_matcher(a, b).ratio()


def _similar_enough(a: str, b: str, threshold: float) -> bool:
    if a == b:
        return True
    matcher = _line_matcher(a, b)
    # quick_ratio is an upper bound of ratio and much cheaper: most pairs are rejected by it
    return matcher.quick_ratio() >= threshold and matcher.ratio() >= threshold


def step_groups(keys: Sequence[str], group_index: Tensor, *, similarity: float = 1.0) -> Tensor:
    """Step group id of every turn, 0..K-1 in order of first appearance. Returns (B,) long.

    keys: B state keys (`state_key`); group_index: (B,) episode group of each turn (any ids).
    Turns join step groups only within their episode group, across all its steps and trajectories.
    similarity 1.0: equal keys. In (0, 1): greedy in input order against each step group's
    representative (its first key), so the result depends on the order of the turns.
    """
    if len(keys) != group_index.numel():
        raise ValueError(f"step_groups: {len(keys)} keys but group_index has {group_index.numel()} entries")
    if not 0.0 < similarity <= 1.0:
        raise ValueError(f"step_groups: similarity must be in (0, 1], got {similarity!r}")
    ids: list[int] = []
    exact: dict[tuple[int, str], int] = {}
    representatives: dict[int, list[tuple[str, int]]] = {}  # episode group -> [(key, step group)]
    num_groups = 0
    for key, group in zip(keys, group_index.tolist()):
        if similarity >= 1.0:
            step_group = exact.setdefault((group, key), num_groups)
        else:
            candidates = representatives.setdefault(group, [])
            step_group = next((sid for rep, sid in candidates if _similar_enough(key, rep, similarity)), num_groups)
            if step_group == num_groups:
                candidates.append((key, step_group))
        if step_group == num_groups:  # the turn opened a new step group
            num_groups += 1
        ids.append(step_group)
    return torch.tensor(ids, dtype=torch.long, device=group_index.device)


def discounted_step_returns(turn_rewards: Tensor, trajectory_index: Tensor, *, gamma: float) -> Tensor:
    """R_t = r_t + gamma * R_{t+1} within each trajectory, R = 0 after its last turn.

    turn_rewards, trajectory_index: (B,); turns of one trajectory appear in time order,
    trajectories may interleave (as in `turn_gae`). Returns (B,) detached, in turn_rewards' dtype
    (float32 for integer rewards).
    """
    if turn_rewards.shape != trajectory_index.shape or turn_rewards.dim() != 1:
        raise ValueError(f"discounted_step_returns: turn_rewards {tuple(turn_rewards.shape)} and "
                         f"trajectory_index {tuple(trajectory_index.shape)} must be the same 1-D shape")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"discounted_step_returns: gamma must be in [0, 1], got {gamma!r}")
    rewards, trajectories = turn_rewards.detach().double().tolist(), trajectory_index.tolist()
    later: dict[int, float] = {}  # trajectory -> R of its next turn
    returns = [0.0] * len(rewards)
    for i in range(len(rewards) - 1, -1, -1):
        k = trajectories[i]
        returns[i] = later[k] = rewards[i] + gamma * later.get(k, 0.0)
    dtype = turn_rewards.dtype if turn_rewards.is_floating_point() else torch.float32
    return torch.tensor(returns, dtype=dtype, device=turn_rewards.device)


def step_relative_advantages(returns: Tensor, step_group: Tensor, config: StepAdvantageConfig) -> Tensor:
    """A^S = R - mean of R over the step group (/ (std + eps) when config.std_normalize).

    returns, step_group: (B,). Returns (B,) in returns' dtype (float32 for integer returns);
    exactly 0 for step groups of one turn and for step groups whose returns are all equal (never
    NaN, also with eps = 0).
    """
    if returns.shape != step_group.shape or returns.dim() != 1:
        raise ValueError(f"step_relative_advantages: returns {tuple(returns.shape)} and step_group "
                         f"{tuple(step_group.shape)} must be the same 1-D shape")
    if not returns.is_floating_point():
        returns = returns.float()
    if returns.numel() == 0:
        return returns.detach().clone()
    advantages = grpo_advantages(returns, step_group, eps=config.eps, std_normalize=config.std_normalize)
    varied, _ = zero_variance_filter(returns, step_group, atol=0.0)  # False for singletons too
    return torch.where(varied, advantages, torch.zeros_like(advantages))


def combine_advantages(episode: Tensor, step: Tensor, weight: float) -> Tensor:
    """GiGPO's joint advantage A = A^E + w * A^S. episode, step: (B,). Returns (B,)."""
    if episode.shape != step.shape:
        raise ValueError(f"combine_advantages: episode {tuple(episode.shape)} and step {tuple(step.shape)} "
                         f"must have the same shape")
    return episode + weight * step


def step_group_metrics(step_group: Tensor) -> dict[str, float]:
    """Counts of step groups: num_step_groups (K), step_group_size_mean (B / K),
    step_group_size_max, step_grouped_fraction (turns in a step group of size >= 2, over B)."""
    if step_group.numel() == 0:
        return {"num_step_groups": 0.0, "step_group_size_mean": 0.0, "step_group_size_max": 0.0,
                "step_grouped_fraction": 0.0}
    _, inverse, sizes = torch.unique(step_group, return_inverse=True, return_counts=True)
    return {
        "num_step_groups": float(sizes.numel()),
        "step_group_size_mean": step_group.numel() / sizes.numel(),
        "step_group_size_max": float(sizes.max()),
        "step_grouped_fraction": float((sizes[inverse] >= 2).double().mean()),
    }


def step_advantages(episode_advantages: Tensor, turn_rewards: Tensor, keys: Sequence[str], group_index: Tensor,
                    trajectory_index: Tensor, config: StepAdvantageConfig
                    ) -> tuple[Tensor, Tensor, dict[str, float]]:
    """Turn advantages A^E + w * A^S, the step part A^S and the step group metrics, for one rollout.

    episode_advantages: (B,) each turn's episode-level advantage (`broadcast_to_turns`);
    turn_rewards: (B,) (`outcome_turn_rewards` for an outcome reward); keys: B state keys;
    group_index, trajectory_index: (B,) episode group and trajectory of each turn (turns of a
    trajectory in time order). With config.weight == 0 the advantages are A^E unchanged.
    """
    groups = step_groups(keys, group_index, similarity=config.similarity)
    returns = discounted_step_returns(turn_rewards, trajectory_index, gamma=config.gamma)
    relative = step_relative_advantages(returns, groups, config).to(episode_advantages.dtype)
    return combine_advantages(episode_advantages, relative, config.weight), relative, step_group_metrics(groups)

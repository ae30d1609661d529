"""Dyna-GRPO's refinement advantages (Dyna-Mind stage 2, SimRollout), as pure functions.

Notation, for one simulated state s_t (a turn of a collected trajectory of group g):
N the plain group's size (the G trajectories of s_t's task, sampled without future states),
r (N,) their outcome rewards; K refined episodes from s_t (the policy re-prompted with the real
future states of its own first response, then continued to the episode's end), r' (K,) their
outcome rewards; A' (K,) the advantage of each refined response, trained on the PLAIN prompt of
s_t (`webrl.rollout.dyna` builds the samples).

Rules (`REFINE_ADVANTAGES`, one signature: `(refined (K,), plain (N,), *, success_threshold, eps)
-> (K,)`):

- "beat_both": A'_k = 1 if r'_k >= success_threshold and r'_k > mean(r) and r'_k >= mean(r'),
  else 0. A refinement is reinforced only when it succeeds, does better than the plain policy's
  group on that task, and is no worse than its sibling refinements on average (">=": a lone
  refinement, or refinements that all succeed, count). Never negative: a failed refinement is
  left out rather than pushed down, since its prompt (with the future states) is not the one
  trained on.
- "joint_group": A'_k = (r'_k - mean(r ∪ r')) / (std(r ∪ r') + eps), the GRPO normalisation
  over the union of the plain and refined episodes (std with Bessel's correction, as
  `grpo_advantages`); 0 when the union's rewards are all equal or it has one member.

Where this departs from, or interprets, the paper (Yu et al. 2025, arXiv 2510.09577): only the
paper's abstract and third-party summaries could be read here (the Method section and the
public code were not reachable). What they confirm: Dyna-GRPO is online RL that uses the outcome
reward and the real intermediate (future) states of rollouts as feedback ("SimRollout"), and
trains simulation and policy improvement in turn. The exact A_refine is therefore a choice:
"beat_both" is the reading the project was given (1 only for a refined episode that succeeds
and beats both groups' means) and is the default; "joint_group" is the plain-GRPO alternative.
Both are config values (`dyna.refine_advantage`).

No Ray, no model, no I/O.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

RefineAdvantage = Callable[..., Tensor]


def _check(refined: Tensor, plain: Tensor) -> None:
    if refined.dim() != 1 or plain.dim() != 1:
        raise ValueError(f"refine advantages need 1-D rewards, got refined {tuple(refined.shape)} and "
                         f"plain {tuple(plain.shape)}")
    if plain.numel() == 0:
        raise ValueError("refine advantages need the plain group's rewards (at least one)")


def beat_both_advantages(refined: Tensor, plain: Tensor, *, success_threshold: float = 0.5,
                         eps: float = 1e-6) -> Tensor:
    """(K,) A'_k = 1 if r'_k >= threshold and r'_k > mean(plain) and r'_k >= mean(refined), else 0."""
    _check(refined, plain)
    if refined.numel() == 0:
        return refined.new_zeros(0)
    r = refined.double()  # (K,)
    win = (r >= success_threshold) & (r > plain.double().mean()) & (r >= r.mean())
    return win.to(refined.dtype if refined.is_floating_point() else torch.float32)


def joint_group_advantages(refined: Tensor, plain: Tensor, *, success_threshold: float = 0.5,
                           eps: float = 1e-6) -> Tensor:
    """(K,) (r'_k - mean(r ∪ r')) / (std(r ∪ r') + eps); zeros when the union has no spread."""
    _check(refined, plain)
    if refined.numel() == 0:
        return refined.new_zeros(0)
    union = torch.cat([plain.double(), refined.double()])  # (N + K,)
    std = union.std() if union.numel() > 1 else union.new_zeros(())
    if not float(std) > 0:
        return torch.zeros(refined.shape, dtype=torch.float32)
    return ((refined.double() - union.mean()) / (std + eps)).float()


REFINE_ADVANTAGES: dict[str, RefineAdvantage] = {"beat_both": beat_both_advantages,
                                                 "joint_group": joint_group_advantages}


def refine_advantages(refined: Tensor, plain: Tensor, rule: str = "beat_both", *, success_threshold: float = 0.5,
                      eps: float = 1e-6) -> Tensor:
    """(K,) A' of K refined episodes against their state's plain group, by `rule` (`REFINE_ADVANTAGES`)."""
    if rule not in REFINE_ADVANTAGES:
        raise ValueError(f"unknown refine advantage rule {rule!r}; rules: {sorted(REFINE_ADVANTAGES)}")
    return REFINE_ADVANTAGES[rule](refined, plain, success_threshold=success_threshold, eps=eps)


def refine_metrics(advantages: Tensor, refined: Tensor, plain_means: Tensor, *,
                   success_threshold: float = 0.5) -> dict[str, float]:
    """Counts over all refined episodes of an iteration (R of them).

    advantages, refined: (R,) A' and r'; plain_means: (R,) mean(r) of each one's plain group.
    Returns refine_success_rate (fraction of r' >= threshold), refine_improved (fraction of
    r' > the plain group's mean), and the counts of positive / zero / negative A'.
    """
    if not advantages.shape == refined.shape == plain_means.shape or advantages.dim() != 1:
        raise ValueError(f"refine_metrics needs three (R,) tensors, got {tuple(advantages.shape)}, "
                         f"{tuple(refined.shape)}, {tuple(plain_means.shape)}")
    if advantages.numel() == 0:
        return {"refine_success_rate": 0.0, "refine_improved": 0.0, "refine_positive": 0.0,
                "refine_zero": 0.0, "refine_negative": 0.0}
    r = refined.double()
    return {"refine_success_rate": float((r >= success_threshold).double().mean()),
            "refine_improved": float((r > plain_means.double()).double().mean()),
            "refine_positive": float((advantages > 0).sum()), "refine_zero": float((advantages == 0).sum()),
            "refine_negative": float((advantages < 0).sum())}

"""Supervised fine-tuning pieces: action-aware token weights, action spans, a reasoning mix sampler.

Notation: B turn samples, T tokens, m (B, T) the loss mask (the current turn's response only:
the history in the prompt is never trained on), w (B, T) token weights, CE = -log p(token).

Action-aware SFT (GUI-Libra): w = 1 on reasoning tokens, w = action_weight on tokens inside the
action (`<answer>...</answer>` or `<tool_call>...</tool_call>`), w = action_weight *
coordinate_factor on coordinate / element-id tokens inside the action; the loss is
    L = sum(m * w * CE) / sum(m * w).
GUI-Libra states "w (default 2) on action tokens, a further x2w on coordinates"; with both
defaults at 2 the coordinate weight is 4 under either reading. We multiply (w * factor) so the two
knobs stay independent.

Which tokens are actions or coordinates is decided on the response *text* (`action_char_spans`)
and mapped to tokens through the tokenizer's character offsets (`spans_to_token_mask`), so this
module needs no tokenizer. Coordinates / ids are the numeric literals of the action that are not
inside a string literal (`[512, 300]` in a JSON tool call, `12` in `click(12)`, not the `5` in
`type(5, "5 apples")`'s text). Other numeric arguments (a scroll amount) count too: a documented
simplification.

Reasoning mix: each source trajectory step is used with its reasoning and, for a
`direct_fraction` of sources (1.0 = GUI-Libra's 1:1), again as a direct action with the reasoning
block removed (`strip_reasoning`). `ReasoningMixSampler` yields (source index, with_reasoning)
pairs in a seeded shuffle that changes with the epoch.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

import torch
from torch import Tensor

__all__ = [
    "SFTConfig", "action_token_weights", "action_char_spans", "spans_to_token_mask", "strip_reasoning",
    "ReasoningMixSampler",
]

_ACTION_BLOCK = re.compile(r"<(answer|tool_call)>(.*?)</\1>", re.S)
_REASONING_BLOCK = re.compile(r"<(think|thinking)>.*?</\1>\s*", re.S)
_STRING_OR_NUMBER = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|-?\d+(?:\.\d+)?')


def action_token_weights(loss_mask: Tensor, action_mask: Optional[Tensor] = None,
                         coordinate_mask: Optional[Tensor] = None, *, action_weight: float = 2.0,
                         coordinate_factor: float = 2.0) -> Tensor:
    """Token weights w (B, T): 1, action_weight on action tokens, action_weight *
    coordinate_factor on coordinate tokens; 0 off the loss mask. Masks are (B, T) bool/0-1;
    a coordinate token counts as an action token whether or not action_mask marks it."""
    mask = loss_mask.bool()
    weight = torch.ones(mask.shape, dtype=torch.float32, device=mask.device)
    if action_mask is not None:
        weight = torch.where(action_mask.bool(), torch.full_like(weight, action_weight), weight)
    if coordinate_mask is not None:
        weight = torch.where(coordinate_mask.bool(), torch.full_like(weight, action_weight * coordinate_factor), weight)
    return torch.where(mask, weight, torch.zeros_like(weight))


def action_char_spans(text: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Character spans [start, end) of the action and of its coordinate / id literals.

    The action is every `<answer>...</answer>` / `<tool_call>...</tool_call>` block (tags
    included); without such a block, the text after the last `</think>` (or all of it) is the
    action, as in the compact grammar `click(12)`. Returns (action_spans, coordinate_spans).
    """
    blocks = [(m.start(), m.end(), m.start(2), m.end(2)) for m in _ACTION_BLOCK.finditer(text)]
    if not blocks:
        start = max(text.rfind("</think>"), text.rfind("</thinking>"))
        start = 0 if start < 0 else text.index(">", start) + 1
        while start < len(text) and text[start].isspace():
            start += 1
        blocks = [(start, len(text), start, len(text))] if start < len(text) else []
    action_spans, coordinate_spans = [], []
    for outer_start, outer_end, inner_start, inner_end in blocks:
        action_spans.append((outer_start, outer_end))
        for m in _STRING_OR_NUMBER.finditer(text, inner_start, inner_end):
            if m.group(0)[0] not in "\"'":
                coordinate_spans.append((m.start(), m.end()))
    return action_spans, coordinate_spans


def spans_to_token_mask(token_offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> Tensor:
    """(R,) bool: token r overlaps some span. token_offsets are the tokenizer's (start, end)
    character offsets of each response token (`return_offsets_mapping=True`)."""
    hits = [any(s < span_end and span_start < e for span_start, span_end in spans) for s, e in token_offsets]
    return torch.tensor(hits, dtype=torch.bool)


def strip_reasoning(text: str) -> str:
    """The direct-action variant of a response: `<think>` / `<thinking>` blocks removed."""
    return _REASONING_BLOCK.sub("", text).lstrip()


class ReasoningMixSampler:
    """Yields (source_index, with_reasoning) pairs: every source with its reasoning, and a
    `direct_fraction` of the sources a second time as a direct action. Shuffled with
    (seed, epoch); call `set_epoch` between epochs."""

    def __init__(self, num_sources: int, *, direct_fraction: float = 1.0, seed: int = 0) -> None:
        if num_sources < 0:
            raise ValueError(f"num_sources must be >= 0, got {num_sources}")
        if not 0.0 <= direct_fraction <= 1.0:
            raise ValueError(f"direct_fraction must be in [0, 1], got {direct_fraction}")
        self.num_sources, self.direct_fraction, self.seed, self.epoch = num_sources, direct_fraction, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_sources + round(self.direct_fraction * self.num_sources)

    def __iter__(self) -> Iterator[tuple[int, bool]]:
        rng = random.Random(self.seed * 1_000_003 + self.epoch)
        direct = rng.sample(range(self.num_sources), round(self.direct_fraction * self.num_sources))
        order = [(i, True) for i in range(self.num_sources)] + [(i, False) for i in direct]
        rng.shuffle(order)
        return iter(order)


@dataclass
class SFTConfig:
    """Action-aware supervised fine-tuning (GUI-Libra defaults)."""

    action_weight: float = 2.0
    """Weight w of tokens inside the action block (1.0 turns action-aware weighting off)."""
    coordinate_factor: float = 2.0
    """Extra factor on coordinate / element-id tokens: their weight is action_weight * this."""
    direct_fraction: float = 1.0
    """Share of sources repeated as a direct action without reasoning (1.0 = 1:1 mix, 0 = none)."""

    def __post_init__(self) -> None:
        for name in ("action_weight", "coordinate_factor"):
            if not getattr(self, name) > 0.0:
                raise ValueError(f"SFTConfig.{name} must be > 0, got {getattr(self, name)}")
        if not 0.0 <= self.direct_fraction <= 1.0:
            raise ValueError(f"SFTConfig.direct_fraction must be in [0, 1], got {self.direct_fraction}")

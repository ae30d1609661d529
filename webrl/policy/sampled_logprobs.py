"""`SampledLogprobs`: the sampled tokens' log-probs taken during `generate`, without keeping logits.

Notation: B rows, V vocabulary, N new tokens.

A transformers logits processor is called once per decoding step with the tokens so far
(B, P + k) and that step's scores (B, V). Passed as `generate(logits_processor=[...])` with no
processor of transformers' own configured before it (no suppress_tokens, repetition_penalty 1),
its scores are the model's raw logits. It keeps log softmax(scores / T) of the step, and at the
next call, when the token sampled from it is the last column of the ids, gathers that token's
entry; `finish(sequences)` gathers the last step's. So at most one (B, V) float32 tensor lives at
a time, instead of transformers' `output_logits` stack of N of them.

It also applies the vision-token suppression that `suppress_tokens` did (those ids get -inf
after the log-probs are taken), before transformers' temperature / top-k / top-p warpers, which
run after custom processors: sampling is unchanged.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from transformers import LogitsProcessor, LogitsProcessorList

__all__ = ["LogitsProcessorList", "RowSampler", "SampledLogprobs", "pick_token"]


class SampledLogprobs(LogitsProcessor):
    """Records log softmax(raw logits / temperature) of each sampled token; suppresses `suppress_ids`."""

    def __init__(self, temperature: float, suppress_ids: Sequence[int] = ()):
        self.temperature = float(temperature)
        self.suppress = list(suppress_ids)
        self.pending: Optional[torch.Tensor] = None  # (B, V) log-probs of the last step
        self.steps: list[torch.Tensor] = []  # (B,) per finished step

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.pending is not None:
            self.steps.append(self.pending.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self.pending = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        if self.suppress:
            scores = scores.clone()
            scores[:, self.suppress] = -float("inf")
        return scores

    def finish(self, sequences: torch.LongTensor) -> torch.Tensor:
        """(B, N) log-probs of the N new tokens of `sequences` (B, P + N)."""
        if self.pending is not None:
            self.steps.append(self.pending.gather(-1, sequences[:, -1:]).squeeze(-1))
            self.pending = None
        if not self.steps:
            return torch.zeros((sequences.shape[0], 0))
        return torch.stack(self.steps, dim=1)


def pick_token(logits: torch.Tensor, temperature: float, top_p: float, top_k: int, greedy: bool,
               generator: Optional[torch.Generator] = None) -> int:
    """Argmax (greedy) or a sample from softmax(logits / T) truncated to top-k / top-p."""
    if greedy:
        return int(logits.argmax())
    scores = logits / temperature
    if top_k:
        kth = torch.topk(scores, min(top_k, scores.numel())).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        sorted_scores, order = scores.sort(descending=True)
        probs = sorted_scores.softmax(-1)
        drop = probs.cumsum(-1) - probs >= top_p  # keep the token that crosses top_p
        scores = scores.scatter(0, order[drop], float("-inf"))
    return int(torch.multinomial(scores.softmax(-1), 1, generator=generator))


class RowSampler(LogitsProcessor):
    """Samples every row from its own generator (`pick_token`, as the one-row path does) and hands
    a greedy `generate` a one-hot choice: 0 for the drawn token, -inf elsewhere.

    transformers' sampling draws all rows from the process's one RNG, so a row's tokens depend on
    which rows shared its batch and in what order; here row b's k-th token is generators[b]'s k-th
    draw over that row's logits, whatever else is in the batch. Placed after `SampledLogprobs`
    (its scores are the raw logits with vision tokens suppressed; the log-probs are taken there).
    Rows that already stopped keep drawing; their tokens are cut by `generate`'s padding.
    """

    def __init__(self, generators: Sequence[torch.Generator], temperature: float, top_p: float, top_k: int):
        self.generators = list(generators)
        self.temperature, self.top_p, self.top_k = float(temperature), float(top_p), int(top_k)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        choice = torch.full_like(scores, float("-inf"))
        for b, generator in enumerate(self.generators):
            token = pick_token(scores[b].float(), self.temperature, self.top_p, self.top_k, False, generator)
            choice[b, token] = 0.0
        return choice

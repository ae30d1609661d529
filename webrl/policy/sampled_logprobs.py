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

__all__ = ["LogitsProcessorList", "SampledLogprobs"]


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

"""Loss aggregation: how per-token losses of B turn samples become one scalar.

Notation: B turn samples, T padded tokens, m (B, T) the loss mask, n_b = sum_t m_bt the number
of trained tokens of sample b, S the number of samples with n_b > 0, K the number of
trajectories with at least one trained token, |tau_k| the trained tokens of trajectory k summed
over all its turn samples, C a constant.

Every mode is written as per-sample weights w_b and one normaliser N:

    loss = sum_b w_b * sum_t m_bt * L_bt / N

| mode                      | w_b          | N        | reads as                                    |
|---------------------------|--------------|----------|---------------------------------------------|
| "token-mean"              | 1            | sum n_b  | every trained token counts the same         |
| "seq-mean-token-mean"     | 1 / n_b      | S        | mean over turns of each turn's token mean   |
| "seq-mean-token-sum"      | 1            | S        | mean over turns of each turn's token sum    |
| "seq-mean-token-sum-norm" | 1            | S * C    | token sum over a constant (Dr. GRPO style)  |
| "traj-mean-token-mean"    | 1 / |tau_k|  | K        | the per-trajectory 1/|tau| normaliser       |

"traj-mean-token-mean" is the per-trajectory 1/|tau| weighting of the OpenWebRL recipe: each
trajectory's tokens, over all its turns, are averaged, then trajectories are averaged. Long
trajectories (often failures) get less weight per token. "seq-mean-token-sum-norm" is the
constant normaliser that replaces it (AsyncWebRL): no weight depends on a length.

Micro-batches. The weights depend on the whole batch (n_b only on the sample itself, |tau_k|
on every turn of trajectory k) and N is a sum over the whole batch. Gradient accumulation over
micro-batches equals the full batch in every mode when the scale is computed once on the full
batch (`loss_scale`), its rows are selected per micro-batch (`LossScale.select`) and the
micro-batch losses are *summed*. Without that global scale, averaging micro-batch losses is only
exact for "seq-mean-token-mean" and "seq-mean-token-sum" when every micro-batch holds the same
number of non-empty samples (and "traj-mean-token-mean" additionally needs trajectories not to be
split); "token-mean" is exact only when micro-batches hold equal token counts. Tests cover both.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

__all__ = [
    "LOSS_AGGREGATIONS", "LossScale", "loss_scale", "aggregate", "aggregate_samples", "masked_mean",
    "index_sum",
]


@dataclass
class LossScale:
    """Per-sample weights and normalisers of one aggregation mode, computed on a full batch.

    sample_weight: (B,) float, w_b above (0 for samples without trained tokens).
    normalizer: () float tensor, N above; 1 when N would be 0 so an empty batch gives loss 0.
    num_samples: () float tensor, S: the normaliser of per-sample terms (the value loss).
    """

    sample_weight: Tensor
    normalizer: Tensor
    num_samples: Tensor

    def select(self, index: Tensor | slice) -> "LossScale":
        """The scale of a micro-batch: its rows of the weights, the full batch's normalisers."""
        return LossScale(self.sample_weight[index], self.normalizer, self.num_samples)


def index_sum(values: Tensor, index: Tensor) -> tuple[Tensor, Tensor]:
    """Sum `values` (N,) per distinct id in `index` (N,).

    Returns (sums (K,), inverse (N,)): inverse maps each row to its id's slot, so
    sums[inverse] broadcasts the per-id sum back to the rows. Ids need not be 0..K-1.
    """
    _, inverse = torch.unique(index, return_inverse=True)
    num = int(inverse.max()) + 1 if inverse.numel() else 0
    sums = torch.zeros(num, dtype=values.dtype, device=values.device).index_add_(0, inverse, values)
    return sums, inverse


def _safe_reciprocal(x: Tensor) -> Tensor:
    return torch.where(x > 0, 1.0 / x.clamp(min=1e-30), torch.zeros_like(x))


def _nonzero_or_one(x: Tensor) -> Tensor:
    return torch.where(x > 0, x, torch.ones_like(x))


# Each entry: (tokens per sample n (B,), trajectory_index (B,) or None, constant) -> (w (B,), N ()).
def _token_mean(n: Tensor, trajectory_index: Optional[Tensor], constant: float) -> tuple[Tensor, Tensor]:
    return (n > 0).to(n.dtype), n.sum()


def _seq_mean_token_mean(n: Tensor, trajectory_index: Optional[Tensor], constant: float) -> tuple[Tensor, Tensor]:
    return _safe_reciprocal(n), (n > 0).to(n.dtype).sum()


def _seq_mean_token_sum(n: Tensor, trajectory_index: Optional[Tensor], constant: float) -> tuple[Tensor, Tensor]:
    return (n > 0).to(n.dtype), (n > 0).to(n.dtype).sum()


def _seq_mean_token_sum_norm(n: Tensor, trajectory_index: Optional[Tensor], constant: float) -> tuple[Tensor, Tensor]:
    return (n > 0).to(n.dtype), (n > 0).to(n.dtype).sum() * constant


def _traj_mean_token_mean(n: Tensor, trajectory_index: Optional[Tensor], constant: float) -> tuple[Tensor, Tensor]:
    if trajectory_index is None:
        raise ValueError("aggregation 'traj-mean-token-mean' needs trajectory_index (B,)")
    traj_tokens, inverse = index_sum(n, trajectory_index)  # (K,), (B,)
    return _safe_reciprocal(traj_tokens)[inverse], (traj_tokens > 0).to(n.dtype).sum()


LOSS_AGGREGATIONS: dict[str, Callable[[Tensor, Optional[Tensor], float], tuple[Tensor, Tensor]]] = {
    "token-mean": _token_mean,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "seq-mean-token-sum": _seq_mean_token_sum,
    "seq-mean-token-sum-norm": _seq_mean_token_sum_norm,
    "traj-mean-token-mean": _traj_mean_token_mean,
}


def loss_scale(loss_mask: Tensor, mode: str, *, trajectory_index: Optional[Tensor] = None,
               constant: float = 1.0) -> LossScale:
    """Weights and normalisers of `mode` for a (full) batch.

    loss_mask: (B, T) 0/1; trajectory_index: (B,) ids, needed by "traj-mean-token-mean";
    constant: C of "seq-mean-token-sum-norm" (e.g. the response-length budget).
    """
    if mode not in LOSS_AGGREGATIONS:
        raise ValueError(f"unknown loss aggregation {mode!r}; allowed: {sorted(LOSS_AGGREGATIONS)}")
    mask = loss_mask.detach().to(torch.float64)
    n = mask.sum(dim=-1)  # (B,)
    weight, normalizer = LOSS_AGGREGATIONS[mode](n, trajectory_index, constant)
    num_samples = (n > 0).to(n.dtype).sum()
    dtype = loss_mask.dtype if loss_mask.is_floating_point() else torch.float32
    return LossScale(weight.to(dtype), _nonzero_or_one(normalizer).to(dtype), _nonzero_or_one(num_samples).to(dtype))


def aggregate(per_token: Tensor, loss_mask: Tensor, scale: LossScale) -> Tensor:
    """sum_b w_b * sum_t m_bt * L_bt / N. per_token, loss_mask: (B, T). Returns a scalar.

    Masked positions are selected away with `where`, never multiplied, so a NaN or inf there
    (garbage log-probs on prompt or padding tokens) cannot leak into the loss or its gradient.
    """
    mask = loss_mask.bool()
    per_sample = torch.where(mask, per_token, torch.zeros_like(per_token)).sum(dim=-1)  # (B,)
    weight = scale.sample_weight.to(per_sample.dtype)
    return (weight * per_sample).sum() / scale.normalizer.to(per_sample.dtype)


def aggregate_samples(per_sample: Tensor, loss_mask: Tensor, scale: LossScale) -> Tensor:
    """Mean of a per-sample term (B,) over samples with trained tokens, normalised by S."""
    has_tokens = loss_mask.bool().any(dim=-1)  # (B,)
    total = torch.where(has_tokens, per_sample, torch.zeros_like(per_sample)).sum()
    return total / scale.num_samples.to(per_sample.dtype)


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Plain mean of x over mask (0 when the mask is empty); for metrics, not for losses."""
    mask = mask.bool()
    total = torch.where(mask, x, torch.zeros_like(x)).sum()
    return total / mask.sum().clamp(min=1)

"""Random but realistic turn-sample batches for the algos tests (prompt | response | padding)."""
from __future__ import annotations

import torch

from webrl.types import Batch


def random_batch(seed: int = 0, *, num_samples: int = 6, width: int = 10, empty_rows: tuple[int, ...] = (),
                 trajectory_index: list[int] | None = None) -> tuple[Batch, torch.Tensor, torch.Tensor]:
    """A right-padded Batch with random prompt / response lengths, plus learner log-probs (leaf,
    requires grad) and per-token entropy. Rows listed in `empty_rows` have no trained token."""
    gen = torch.Generator().manual_seed(seed)
    B, T = num_samples, width
    loss_mask = torch.zeros(B, T)
    attention = torch.zeros(B, T, dtype=torch.long)
    for b in range(B):
        prompt = int(torch.randint(1, 4, (1,), generator=gen))
        response = int(torch.randint(1, T - prompt + 1, (1,), generator=gen))
        attention[b, : prompt + response] = 1
        if b not in empty_rows:
            loss_mask[b, prompt: prompt + response] = 1
    traj = torch.tensor(trajectory_index if trajectory_index is not None else [b // 2 for b in range(B)])
    old = -torch.rand(B, T, generator=gen) * 3
    adv_per_sample = torch.randn(B, generator=gen)
    batch = Batch(
        input_ids=torch.randint(5, 100, (B, T), generator=gen) * attention,
        attention_mask=attention,
        loss_mask=loss_mask,
        old_logprobs=old * loss_mask,
        advantages=adv_per_sample[:, None] * loss_mask,
        ref_logprobs=(old + 0.2 * torch.randn(B, T, generator=gen)) * loss_mask,
        group_index=traj // 2,
        trajectory_index=traj,
        policy_version=torch.zeros(B, dtype=torch.long),
    )
    logprobs = (old + 0.3 * torch.randn(B, T, generator=gen)).clamp(max=0).requires_grad_(True)
    entropy = torch.rand(B, T, generator=gen).requires_grad_(True)
    return batch, logprobs, entropy


def with_garbage_off_mask(x: torch.Tensor, mask: torch.Tensor, value: float) -> torch.Tensor:
    """x with every untrained position overwritten by `value` (may be nan / inf)."""
    return torch.where(mask.bool(), x, torch.full_like(x, value))


def pad_right(x: torch.Tensor, extra: int, value: float = 0.0) -> torch.Tensor:
    """Append `extra` columns of `value` to a (B, T) tensor."""
    return torch.cat([x, torch.full((x.shape[0], extra), value, dtype=x.dtype)], dim=1)

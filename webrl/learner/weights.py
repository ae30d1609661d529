"""Versioned weight sync from the learner to inference workers.

Only trainable parameters travel (a frozen vision tower never does), named as in the Hugging
Face model's state_dict, so the receiver is any plain `...ForConditionalGeneration`.

Rank 0 returns a `WeightUpdate` of CPU tensors (under ZeRO-3 every learner rank takes part in
gathering each shard); `LearnerGroup.get_weights_ref()` puts it in Ray's object store once and
every inference worker `ray.get`s the same object (zero-copy between processes of one node) and
copies it in place with `apply_weight_update`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator

import torch
from torch import Tensor, nn


@dataclass
class WeightUpdate:
    """One versioned set of weights: names[i] -> tensors[i] (CPU), in the model's dtype."""

    version: int
    names: list[str] = field(default_factory=list)
    tensors: list[Tensor] = field(default_factory=list)

    def __post_init__(self) -> None:
        if len(self.names) != len(self.tensors):
            raise ValueError(f"WeightUpdate has {len(self.names)} names for {len(self.tensors)} tensors")

    def as_dict(self) -> dict[str, Tensor]:
        """name -> tensor, the form `webrl.rollout.InferenceWorker.set_weights` takes."""
        return dict(zip(self.names, self.tensors))

    @property
    def num_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors)


def apply_weight_update(model: nn.Module, update: WeightUpdate) -> int:
    """Copy an update into `model`'s parameters of the same names (in place, no grad).

    Raises KeyError naming an unknown parameter and ValueError on a shape mismatch, before any
    parameter is changed. Returns the number of tensors copied.
    """
    params = dict(model.named_parameters())
    for name, tensor in zip(update.names, update.tensors):
        if name not in params:
            raise KeyError(f"weight update v{update.version}: model has no parameter {name!r}")
        if params[name].shape != tensor.shape:
            raise ValueError(f"weight update v{update.version}: {name} is {tuple(tensor.shape)}, "
                             f"the model's is {tuple(params[name].shape)}")
    with torch.no_grad():
        for name, tensor in zip(update.names, update.tensors):
            params[name].copy_(tensor.to(device=params[name].device, dtype=params[name].dtype))
    return len(update.names)


def gathered(named_params: Iterable[tuple[str, nn.Parameter]], zero3: bool) -> Iterator[tuple[str, Tensor]]:
    """Yield (name, full tensor) one parameter at a time; under ZeRO-3 each is all-gathered
    (a collective: every learner rank must iterate the same list)."""
    if not zero3:
        for name, p in named_params:
            yield name, p.data
        return
    import deepspeed

    for name, p in named_params:
        with deepspeed.zero.GatheredParameters([p], modifier_rank=None):
            yield name, p.data

"""Versioned weight sync from the learner to inference workers, by object store or by broadcast.

Only trainable parameters travel (a frozen vision tower never does), named as in the Hugging
Face model's state_dict, so the receiver is any plain `...ForConditionalGeneration`.

Object store (`learner.weight_sync.mode=object_store`): rank 0 returns a `WeightUpdate` of CPU
tensors (under ZeRO-3 every learner rank takes part in gathering each shard);
`LearnerGroup.get_weights_ref()` puts it in Ray's object store once and every inference worker
`ray.get`s the same object and copies it in place with `apply_weight_update`.

Collective (`mode=collective`): learner rank 0 broadcasts to the receivers in a process group of
their own (`webrl.learner.weight_broadcast`), bucket by bucket (`webrl.learner.weight_buckets`).

Names. In-process receivers take the learner's names (transformers' module tree:
`model.language_model.*`, `model.visual.*`, `lm_head.*`). Servers take checkpoint names
(`checkpoint_name`: `model.*`, `visual.*`, `lm_head.*`), what `save_pretrained` writes and what
SGLang's Qwen2.5-VL `load_weights` looks up (its stacked q/k/v and gate/up params raise KeyError
on other names; the rest are skipped without a word). Qwen3-VL's loader accepts both. Names
outside the model's tree (the pointer head's `element_pointer.*`) travel unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional

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


CHECKPOINT_PREFIXES = (("model.language_model.", "model."), ("model.visual.", "visual."))
"""(module-tree prefix, checkpoint prefix) of Qwen2.5-VL / Qwen3-VL in transformers >= 4.52."""


def checkpoint_name(name: str) -> str:
    """A learner parameter name as checkpoints (and SGLang's loaders) spell it:
    "model.language_model.layers.0.mlp.up_proj.weight" -> "model.layers.0.mlp.up_proj.weight",
    "model.visual.merger.mlp.0.bias" -> "visual.merger.mlp.0.bias"; others unchanged."""
    for tree, saved in CHECKPOINT_PREFIXES:
        if name.startswith(tree):
            return saved + name[len(tree):]
    return name


def module_name(name: str, own: Iterable[str]) -> Optional[str]:
    """The inverse of `checkpoint_name` against a model's own names `own` (a set): the name in
    `own` whose checkpoint spelling is `name`, or None. A module-tree name that is not also a
    checkpoint name ("model.language_model.norm.weight") is None: servers take checkpoint names."""
    for tree, saved in CHECKPOINT_PREFIXES:
        if name.startswith(saved) and tree + name[len(saved):] in own:
            return tree + name[len(saved):]
    if name in own and checkpoint_name(name) == name:
        return name
    return None

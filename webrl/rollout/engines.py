"""Inference engines behind `InferenceWorker`: the transformers generator (CPU and GPU).

An engine is `act(requests) -> decisions` plus `load_weights(state_dict)`. Engines are built
inside the inference actor by a picklable factory, so weights load where they run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from webrl.policy.generator import GeneratorConfig, GeneratorPolicy
from webrl.policy.types import Decision, PolicyRequest


class GeneratorEngine:
    """A `GeneratorPolicy` (or a wrapper of one, e.g. the heads cascade) whose generator weights
    can be replaced in place (only the given tensors)."""

    def __init__(self, policy: Any, model: Any = None):
        self.policy = policy
        self.model = model if model is not None else policy.model

    def act(self, requests: Sequence[PolicyRequest]) -> list[Decision]:
        return self.policy.act(requests)

    def load_weights(self, weights: Mapping[str, Any]) -> None:
        import torch

        params = dict(self.model.named_parameters())
        unknown = [k for k in weights if k not in params]
        if unknown:
            raise KeyError(f"weights name {len(unknown)} parameters the model does not have, e.g. {unknown[:3]}")
        with torch.no_grad():
            for name, value in weights.items():
                params[name].copy_(torch.as_tensor(value, dtype=params[name].dtype))


@dataclass
class GeneratorEngineFactory:
    """Picklable recipe for a `GeneratorEngine`: checkpoint path, dtype, device, generator config."""

    path: str
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    dtype: str = "float32"
    device: Optional[str] = None
    torch_threads: int = 1
    cascade: Any = None
    """A config with `heads_dir` (RolloutCascadeConfig): when heads_dir is set, the generator is
    wrapped in a CascadePolicy with those heads (they stay fixed; only generator weights sync)."""

    def __call__(self) -> GeneratorEngine:
        import torch

        from webrl.models import load_model

        if self.torch_threads:
            torch.set_num_threads(self.torch_threads)
        model, processor = load_model(self.path, dtype=self.dtype, device=self.device)
        policy = GeneratorPolicy(model, processor, self.generator)
        if self.cascade is not None and self.cascade.heads_dir:
            from webrl.policy.cascade import CascadePolicy
            from webrl.policy.heads import load_heads

            return GeneratorEngine(CascadePolicy(policy, load_heads(self.cascade.heads_dir), self.cascade), model)
        return GeneratorEngine(policy)

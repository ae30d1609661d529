"""Inference engines behind `InferenceWorker`: the transformers generator (CPU and GPU).

An engine is `act(requests) -> decisions` plus `load_weights(state_dict)`. Engines are built
inside the inference actor by a picklable factory, so weights load where they run. The same
factory serves rollouts and evaluation: the generator wrapped in the run's policy wrapper stack
(`webrl.policy.stack.build_policy`, config section `policy`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from webrl.policy.generator import GeneratorConfig, GeneratorPolicy
from webrl.policy.stack import PolicyConfig, build_policy
from webrl.policy.types import Decision, PolicyRequest


class GeneratorEngine:
    """A policy (a `GeneratorPolicy` or a wrapper stack around one) and the generator's model, whose
    weights `load_weights` replaces in place (only the given tensors): every wrapper sees them."""

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
    """Picklable recipe for a `GeneratorEngine`: checkpoint path, dtype, device, generator config,
    policy wrapper stack."""

    path: str
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    dtype: str = "float32"
    device: Optional[str] = None
    torch_threads: int = 1
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    """Wrappers around the generator (`policy.wrappers`; e.g. the heads cascade, whose heads stay
    fixed: only generator weights sync)."""

    def __call__(self) -> GeneratorEngine:
        import torch

        from webrl.models import load_model

        if self.torch_threads:
            torch.set_num_threads(self.torch_threads)
        model, processor = load_model(self.path, dtype=self.dtype, device=self.device)
        generator = GeneratorPolicy(model, processor, self.generator)
        return GeneratorEngine(build_policy(generator, self.policy), model)

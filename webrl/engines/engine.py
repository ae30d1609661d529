"""Inference engines behind `InferenceWorker`: the run's policy stack over a generator backend.

An engine is `act(requests) -> decisions` plus weight loading. `GeneratorEngine` is the
generator (`GeneratorPolicy` over any backend, webrl/policy/backend.py) wrapped in the run's
policy wrapper stack (`webrl.policy.stack.build_policy`, config section `policy`), the same way
whatever the backend: the transformers model in this process (`GeneratorEngineFactory`) or
inference servers (`webrl.engines.sglang.ServerEngine`). Engines are built inside the
inference actor by a picklable factory, so weights load where they run.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from webrl.policy.generator import GeneratorConfig, GeneratorPolicy
from webrl.policy.stack import PolicyConfig, build_policy
from webrl.policy.types import Decision, PolicyRequest


class GeneratorEngine:
    """The policy stack over `generator`; weights go to the generator's backend, so every wrapper
    sees them (the cascade's heads stay fixed: only generator weights sync)."""

    def __init__(self, generator: GeneratorPolicy, policy: Optional[PolicyConfig] = None):
        self.generator = generator
        self.policy = build_policy(generator, policy or PolicyConfig())

    @property
    def model(self) -> Any:
        """The transformers model in this process (None over servers)."""
        return self.generator.model

    def act(self, requests: Sequence[PolicyRequest]) -> list[Decision]:
        return self.policy.act(requests)

    def load_weights(self, weights: Any, version: Optional[int | str] = None) -> None:
        """A state dict (name -> tensor: copied in place into the model in this process) or a
        checkpoint folder (servers load it themselves, stamped `version`)."""
        backend = self.generator.backend
        if isinstance(weights, (str, os.PathLike)):
            if not hasattr(backend, "load_weights_from_disk"):
                raise NotImplementedError("the in-process engine takes a state dict, not a folder path")
            backend.load_weights_from_disk(os.fspath(weights), version)
            return
        if not hasattr(backend, "load_state"):
            kind = "a state dict" if isinstance(weights, Mapping) else type(weights).__name__
            raise NotImplementedError(f"{type(backend).__name__} got {kind}; an inference server loads weights from "
                                      f"a checkpoint folder (save the learner's weights with save_pretrained and pass "
                                      f"the folder path) or by broadcast (learner.weight_sync.mode=collective)")
        backend.load_state(weights)

    def note_weights(self, version: str, path: Optional[str] = None) -> None:
        """Another worker just loaded `version` into the servers this engine shares."""
        self.generator.backend.note_weights(version, path)


@dataclass
class GeneratorEngineFactory:
    """Picklable recipe for an in-process `GeneratorEngine`: checkpoint path, dtype, device,
    generator config, policy wrapper stack."""

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
        return GeneratorEngine(GeneratorPolicy(model, processor, self.generator), self.policy)

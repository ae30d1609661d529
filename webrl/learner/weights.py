"""Versioned weight sync from the learner to inference workers.

Only trainable parameters travel (a frozen vision tower never does), named as in the Hugging
Face model's state_dict, so the receiver is any plain `...ForConditionalGeneration`.

Two paths:

* Object store (CPU, tests, small models): rank 0 returns a `WeightUpdate` of CPU tensors;
  `LearnerGroup.get_weights_ref()` puts it in Ray's object store once and every inference
  worker `ray.get`s the same object (zero-copy between processes of one node).
* Collective broadcast (GPU): `WeightBroadcast` is a standalone process group (its own
  TCPStore, NCCL or gloo) of learner rank 0 (rank 0 of the group) and N inference workers
  (ranks 1..N), separate from DeepSpeed's default group. The learner gathers each ZeRO-3 shard
  (all learner ranks take part in the gather), rank 0 broadcasts the full tensor, receivers copy
  it into their parameter of the same name. A header broadcast first carries the version and
  the number of tensors, so a receiver that expects another layout fails loudly.
  On CUDA this is the NCCL path; the tests run the same code with gloo on CPU.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional, Sequence

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


class WeightBroadcast:
    """A process group of learner rank 0 (group rank 0) and inference workers (1..N).

    Every member constructs it with the same host / port / world_size (host: learner rank 0's
    node, port: free there). backend "nccl" on GPU, "gloo" on CPU.
    """

    def __init__(self, host: str, port: int, rank: int, world_size: int, backend: str = "nccl",
                 timeout_s: float = 600.0):
        import torch.distributed as dist

        if backend not in ("nccl", "gloo"):
            raise ValueError(f"WeightBroadcast backend must be 'nccl' or 'gloo', got {backend!r}")
        timeout = datetime.timedelta(seconds=timeout_s)
        self.rank, self.world_size, self.backend = rank, world_size, backend
        self.store = dist.TCPStore(host, port, world_size, is_master=(rank == 0), timeout=timeout)
        if backend == "gloo":
            self.group = dist.ProcessGroupGloo(self.store, rank, world_size, timeout)
        else:  # pragma: no cover - needs CUDA
            self.group = dist.ProcessGroupNCCL(self.store, rank, world_size)
        self.device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")

    def _broadcast(self, tensor: Tensor) -> None:
        self.group.broadcast(tensor, 0).wait()

    def send(self, version: int, tensors: Iterable[tuple[str, Tensor]], count: int) -> None:
        """Rank 0: broadcast the header (version, count), then each tensor in order."""
        self._broadcast(torch.tensor([version, count], dtype=torch.long, device=self.device))
        for _, tensor in tensors:
            self._broadcast(tensor.detach().to(self.device).contiguous())

    def receive(self, model: nn.Module, names: Sequence[str], expected_version: Optional[int] = None) -> int:
        """Ranks 1..N: receive into `model`'s parameters `names` (same order as the sender's).
        Returns the version received."""
        header = torch.zeros(2, dtype=torch.long, device=self.device)
        self._broadcast(header)
        version, count = int(header[0]), int(header[1])
        if count != len(names):
            raise ValueError(f"weight broadcast v{version} carries {count} tensors, the receiver expects {len(names)}")
        if expected_version is not None and version != expected_version:
            raise ValueError(f"weight broadcast carries v{version}, expected v{expected_version}")
        params = dict(model.named_parameters())
        with torch.no_grad():
            for name in names:
                param = params[name]
                buffer = torch.empty(param.shape, dtype=param.dtype, device=self.device)
                self._broadcast(buffer)
                param.copy_(buffer.to(param.device))
        return version

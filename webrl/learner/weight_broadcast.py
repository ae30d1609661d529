"""The weight-broadcast group (`learner.weight_sync.mode=collective`) and servers as its receivers.

Learner rank 0 and the receivers (in-process inference workers, or `webrl serve` / SGLang
servers) form a `WeightBroadcastGroup`, a process group of its own (a TCPStore hosted by rank 0
plus gloo or NCCL, never DeepSpeed's default group). Rank 0 sends bucket by bucket in the layout
of `webrl.learner.weight_buckets`. In-process receivers get a 3-number header first (version,
tensors, bytes) and refuse a sync whose header differs from what the driver told them; servers
get each bucket's names, dtypes and shapes over HTTP (`ServerTargets`:
`/update_weights_from_distributed`), as slime drives SGLang, under checkpoint names
(`webrl.learner.weights.checkpoint_name`).

Rendezvous keys follow SGLang's `init_custom_process_group` (torch's `_new_process_group_helper`
under `PrefixStore(group_name)`, i.e. `PrefixStore(group_name + "/", PrefixStore(group_name,
store))`), checked here only against `webrl serve`; every wait has a deadline whose error names
the group, its address and the members that did not arrive.
"""
from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional, Sequence

import torch
from torch import Tensor

from webrl.learner.weight_buckets import TensorSpec, plan_buckets, unflatten_bucket
from webrl.learner.weights import checkpoint_name

GROUP_NAME = "weight_update_group"
"""SGLang's default group name."""
BACKENDS = ("gloo", "nccl")


# -- the group ----------------------------------------------------------------------------------
class GroupSetupError(TimeoutError):
    """A weight-broadcast group that did not form within its deadline (the message names what it waited for)."""


def host_store(host: str, timeout_s: float, port: int = 0):
    """Rank 0's rendezvous store, listening before anyone joins (port 0: a free port, read back
    from `.port`)."""
    from torch.distributed import TCPStore

    return TCPStore(host, port, None, True, timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False)


class WeightBroadcastGroup:
    """One member (rank) of a weight-broadcast group; rank 0 is the learner and sends."""

    def __init__(self, process_group, rank: int, world_size: int, backend: str, name: str):
        self.process_group, self.rank, self.world_size, self.backend, self.name = \
            process_group, rank, world_size, backend, name
        self.device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")

    @classmethod
    def join(cls, master_address: str, master_port: int, rank: int, world_size: int, *, backend: str = "gloo",
             group_name: str = GROUP_NAME, timeout_s: float = 60.0, store=None,
             members: Optional[Sequence[str]] = None) -> "WeightBroadcastGroup":
        """Join (rank 0: pass the store from `host_store`). Blocks until all `world_size`
        members have joined, or raises `GroupSetupError` after `timeout_s` naming the missing
        ranks (`members[r]` describes rank r in the message)."""
        from torch.distributed import PrefixStore, TCPStore

        if backend not in BACKENDS:
            raise ValueError(f"weight-broadcast backend must be one of {list(BACKENDS)}, got {backend!r}")
        if not 0 <= rank < world_size:
            raise ValueError(f"weight-broadcast rank {rank} is outside world_size {world_size}")
        where = f"weight-broadcast group {group_name!r} at {master_address}:{master_port}"
        timeout = datetime.timedelta(seconds=timeout_s)
        if store is None:
            try:
                store = TCPStore(master_address, int(master_port), None, False, timeout=timeout)
            except Exception as e:  # noqa: BLE001 - torch raises several kinds here
                raise GroupSetupError(f"{where}: rank {rank} could not reach rank 0's store (the learner) within "
                                      f"{timeout_s:g} s ({type(e).__name__}: {str(e)[:200]})") from None
        inner = PrefixStore(group_name + "/", PrefixStore(group_name, store))
        t0 = time.monotonic()
        try:
            process_group = _backend(backend, inner, rank, world_size, timeout)
        except Exception as e:  # noqa: BLE001
            missing = _missing_ranks(inner, world_size)
            names = ", ".join(f"rank {r}" + (f" ({members[r]})" if members and r < len(members) else "")
                              for r in missing) or "unknown"
            raise GroupSetupError(
                f"{where}: rank {rank} waited {time.monotonic() - t0:.1f} s (timeout {timeout_s:g} s) for "
                f"{world_size} members to join; not joined: {names} ({type(e).__name__}: {str(e)[:160]})") from None
        group = cls(process_group, rank, world_size, backend, group_name)
        group._store = store  # rank 0's store must outlive the group
        return group

    def broadcast(self, tensor: Tensor) -> None:
        """Rank 0's `tensor` into every member's (same shape and dtype), in place."""
        from torch.distributed import BroadcastOptions

        opts = BroadcastOptions()
        opts.rootRank, opts.rootTensor = 0, 0
        self.process_group.broadcast([tensor], opts).wait()

    # -- rank 0 --------------------------------------------------------------------------------
    def send(self, named_tensors: Iterable[tuple[str, Tensor]], specs: Sequence[TensorSpec], bucket_bytes: int,
             header: Optional[Sequence[int]] = None,
             announce: Optional[Callable[[list[TensorSpec], bool], Callable[[], None]]] = None) -> dict[str, float]:
        """Broadcast `named_tensors` (in `specs` order) bucket by bucket. `header` (in-process
        receivers) goes first as int64; `announce(bucket specs, is_last)` runs before each
        bucket's broadcast and returns a function that waits for the receivers' answers (servers).
        Returns {"buckets", "bytes", "seconds"}."""
        if self.rank != 0:
            raise RuntimeError("only rank 0 of a weight-broadcast group sends")
        t0 = time.monotonic()
        if header is not None:
            self.broadcast(torch.tensor(list(header), dtype=torch.int64, device=self.device))
        plan = plan_buckets(specs, bucket_bytes)
        source = iter(named_tensors)
        total = 0
        for k, bucket in enumerate(plan):
            flat = torch.empty(sum(specs[i].num_bytes for i in bucket), dtype=torch.uint8, device=self.device)
            offset = 0
            for i in bucket:
                name, tensor = next(source)
                if name != specs[i].name or tuple(tensor.shape) != tuple(specs[i].shape):
                    raise ValueError(f"weight broadcast: tensor {i} is {name} {tuple(tensor.shape)}, the spec says "
                                     f"{specs[i].name} {tuple(specs[i].shape)}")
                # copied into the bucket now: under ZeRO-3 the gathered storage is released once
                # the source moves on (same bytes as `flatten_bucket`)
                data = tensor.detach().to(specs[i].torch_dtype).contiguous().reshape(-1).view(torch.uint8)
                flat[offset:offset + data.numel()].copy_(data)
                offset += data.numel()
            wait = announce([specs[i] for i in bucket], k == len(plan) - 1) if announce else None
            self.broadcast(flat)
            if wait is not None:
                wait()
            total += flat.numel()
        return {"buckets": float(len(plan)), "bytes": float(total), "seconds": time.monotonic() - t0}

    # -- receivers -----------------------------------------------------------------------------
    def receive(self, specs: Sequence[TensorSpec], bucket_bytes: int,
                header: Optional[Sequence[int]] = None) -> Iterator[list[tuple[str, Tensor]]]:
        """Yield each bucket's [(name, tensor)] as it arrives (views into one buffer per bucket);
        with `header`, first check that rank 0 sent the same one, else raise ValueError (after
        draining the broadcast when only the version differs, so rank 0 finishes its send)."""
        if header is not None:
            got = torch.zeros(len(header), dtype=torch.int64, device=self.device)
            self.broadcast(got)
            if got.tolist() != list(header):
                if got.tolist()[1:] == list(header)[1:]:  # same sizes: drain the buckets, so rank 0 is not left waiting
                    for bucket in plan_buckets(specs, bucket_bytes):
                        self.broadcast(torch.empty(sum(specs[i].num_bytes for i in bucket), dtype=torch.uint8,
                                                   device=self.device))
                raise ValueError(f"weight broadcast {self.name!r}: rank 0 sent (version, tensors, bytes) = "
                                 f"{tuple(got.tolist())}, this receiver expected {tuple(header)}")
        for bucket in plan_buckets(specs, bucket_bytes):
            chosen = [specs[i] for i in bucket]
            flat = torch.empty(sum(s.num_bytes for s in chosen), dtype=torch.uint8, device=self.device)
            self.broadcast(flat)
            yield list(zip([s.name for s in chosen], unflatten_bucket(flat, chosen)))

    def close(self) -> None:
        self.process_group = None
        self._store = None


def _backend(backend: str, store, rank: int, world_size: int, timeout: datetime.timedelta):
    import torch.distributed as dist

    if backend == "gloo":
        return dist.ProcessGroupGloo(store, rank, world_size, timeout)
    options = dist.ProcessGroupNCCL.Options()
    options._timeout = timeout
    return dist.ProcessGroupNCCL(store, rank, world_size, options)


def _missing_ranks(store, world_size: int) -> list[int]:
    """Ranks whose gloo/NCCL address key never appeared in the store (best effort)."""
    try:
        return [r for r in range(world_size) if not store.check([f"0/{r}"]) and not store.check([str(r)])]
    except Exception:  # noqa: BLE001 - the store itself may be gone
        return list(range(world_size))


def group_ranks(tp_sizes: Sequence[int]) -> tuple[list[int], int]:
    """(rank offset of each server, world size) of learner rank 0 plus servers of `tp_sizes`
    TP ranks each: [2, 1, 4] -> ([1, 3, 4], 8)."""
    offsets, next_rank = [], 1
    for tp in tp_sizes:
        if not isinstance(tp, int) or tp < 1:
            raise ValueError(f"tensor-parallel sizes must be integers >= 1, got {list(tp_sizes)}")
        offsets.append(next_rank)
        next_rank += tp
    return offsets, next_rank


# -- servers as receivers (SGLang's protocol) ----------------------------------------------------
@dataclass
class ServerTargets:
    """Inference servers (SGLang, or `webrl serve` with gloo) that are ranks 1..N of a group,
    driven over HTTP: `/init_weights_update_group` once, then one `/update_weights_from_distributed`
    per bucket (load_format "flattened_bucket"), `weight_version` on the last one only, so a
    server reports the new version once every bucket has landed."""

    urls: list[str]
    group_name: str = GROUP_NAME
    api_key_env: str = ""
    """Environment variable holding the servers' bearer key (read where the request is sent)."""
    timeout_s: float = 300.0
    weight_version: Optional[str] = None
    """Stamped on the last bucket of the next `send`."""
    admin_api_key_env: str = ""
    """Environment variable holding the servers' admin key; when set, sent instead of the API key
    (SGLang's weight routes then take only the admin key)."""
    tp_sizes: Optional[list[int]] = None
    """Tensor-parallel size of each server: every TP rank of server i joins the group, as rank
    `rank_offset + tp_rank` (SGLang's scheduler does this per rank). None = read from each
    server's GET /server_info (`tp_size`; 1 where it does not say)."""

    def members(self) -> tuple[list[int], list[str], int]:
        """(rank_offset per server, a name per rank 1.., world size)."""
        sizes = self.tp_sizes if self.tp_sizes is not None else [self._tp_size(url) for url in self.urls]
        self.tp_sizes = sizes
        offsets, world = group_ranks(sizes)
        names = [url if tp == 1 else f"{url} tp rank {r}" for url, tp in zip(self.urls, sizes) for r in range(tp)]
        return offsets, names, world

    def _headers(self, path: str) -> dict:
        from webrl.chat.server_http import env_key, route_headers

        return route_headers(path, env_key(self.api_key_env), env_key(self.admin_api_key_env))

    def _tp_size(self, url: str) -> int:
        import httpx

        try:
            r = httpx.get(url.rstrip("/") + "/server_info", timeout=self.timeout_s, headers=self._headers("/server_info"))
        except httpx.HTTPError as e:
            raise RuntimeError(f"{url}/server_info: {type(e).__name__}: {e}") from None
        if r.status_code != 200:
            raise RuntimeError(f"{url}/server_info: HTTP {r.status_code}: {r.text[:300]}")
        tp = r.json().get("tp_size", 1)
        if not isinstance(tp, int) or tp < 1:
            raise RuntimeError(f"{url}/server_info: tp_size must be an integer >= 1, got {tp!r}")
        return tp

    def _post_all(self, path: str, bodies: Sequence[dict]) -> Callable[[], list[dict]]:
        """POST bodies[i] to urls[i] in background threads; returns a function that waits and
        raises naming the server whose answer is not 200 with success true."""
        from concurrent.futures import ThreadPoolExecutor

        import httpx

        headers = self._headers(path)
        pool = ThreadPoolExecutor(len(self.urls), thread_name_prefix="webrl-weight-post")

        def post(url: str, body: dict) -> dict:
            try:
                r = httpx.post(url.rstrip("/") + path, json=body, headers=headers, timeout=self.timeout_s)
            except httpx.HTTPError as e:
                raise RuntimeError(f"{url}{path}: {type(e).__name__}: {e}") from None
            answer = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
            if r.status_code != 200 or answer.get("success") is not True:
                raise RuntimeError(f"{url}{path}: HTTP {r.status_code}: {str(answer or r.text)[:300]}")
            return answer

        futures = [pool.submit(post, url, body) for url, body in zip(self.urls, bodies)]
        pool.shutdown(wait=False)
        return lambda: [f.result() for f in futures]

    def init_group(self, master_address: str, master_port: int, backend: str) -> Callable[[], list[dict]]:
        """Ask every server to join at its rank offset (`members`); they block until the group forms."""
        offsets, _, world = self.members()
        return self._post_all("/init_weights_update_group", [
            {"master_address": master_address, "master_port": int(master_port), "rank_offset": offset,
             "world_size": world, "group_name": self.group_name, "backend": backend} for offset in offsets])

    def announce(self, specs: list[TensorSpec], last: bool) -> Callable[[], list[dict]]:
        body = {"names": [checkpoint_name(s.name) for s in specs], "dtypes": [s.dtype for s in specs],
                "shapes": [list(s.shape) for s in specs], "group_name": self.group_name,
                "load_format": "flattened_bucket", "flush_cache": last}
        if last and self.weight_version is not None:
            body["weight_version"] = str(self.weight_version)
        return self._post_all("/update_weights_from_distributed", [body] * len(self.urls))

    def destroy_group(self) -> None:
        """Best effort: the servers leave the group (errors ignored: the run is ending)."""
        try:
            self._post_all("/destroy_weights_update_group", [{"group_name": self.group_name}] * len(self.urls))()
        except Exception:  # noqa: BLE001
            pass

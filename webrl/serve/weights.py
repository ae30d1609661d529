"""`webrl serve`'s weight-update routes (SGLang's names and bodies): from a folder on disk and from
the learner's broadcast group, plus the model-info route that reports the weight version.

    POST /update_weights_from_disk {"model_path", "weight_version"?} -> {"success", "message", ...}
    POST /init_weights_update_group {master_address, master_port, rank_offset, world_size, group_name?,
                                     backend: "gloo"} -> {"success", "message"}  (blocks until the group forms)
    POST /update_weights_from_distributed {names, dtypes, shapes, group_name?, load_format?
                                     (null | "flattened_bucket"), weight_version?, flush_cache?,
                                     abort_all_requests?, torch_empty_cache?} -> {"success", "message"}
    POST /destroy_weights_update_group {group_name?}
    GET  /model_info               {"model_path", ..., "weight_version"}  (/get_model_info: SGLang's old name)

Keys: with an admin key (`ServeConfig.admin_api_key_env`) the weight routes take only it, as
SGLang's `--admin-api-key`; without one they take the API key; /model_info takes the API key.

Distributed weight updates (SGLang's `InitWeightsUpdateGroupReqInput` and
`UpdateWeightsFromDistributedReqInput`, read in sgl-project/sglang io_struct.py at 001067ff; the
receive side as its model runner's `update_weights_from_distributed` /
`_update_bucketed_weights_from_distributed`): the server joins the learner's group as rank
`rank_offset` (gloo only: this is the CPU backend) through `webrl.learner.weight_broadcast`, and each
update receives the tensors `names` / `dtypes` / `shapes` describe from rank 0, one broadcast per
tensor (load_format null) or one flat uint8 bucket ("flattened_bucket"), then copies them in
under the lock. Unlike the disk route, an update without `weight_version` keeps the version (as
SGLang does): a multi-bucket sync stamps only its last bucket. Between two buckets a request may
see some tensors new and the version old; the trainer syncs between collections.

Weight updates load the folder (Hugging Face format) into a CPU copy and copy every parameter
and buffer into the served model in place, under the lock that also orders generation and
chat completions: no request ever sees half-updated weights. The weight version is
`weight_version` when the request gives one, else the previous one plus 1 (numeric versions).
"""
from __future__ import annotations

import json
import os
import threading
from typing import Any, Optional

from webrl.config import LOOPBACK_HOSTS

from fastapi import Request  # module level: FastAPI resolves the endpoints' string annotations here

from webrl.serve.protocol import RequestError, check_keys, int_field, json_object

UPDATE_FIELDS = ("model_path", "weight_version", "load_format", "abort_all_requests", "flush_cache")
INIT_GROUP_FIELDS = ("master_address", "master_port", "rank_offset", "world_size", "group_name", "backend")
DISTRIBUTED_FIELDS = ("names", "dtypes", "shapes", "group_name", "flush_cache", "abort_all_requests",
                      "weight_version", "load_format", "torch_empty_cache")
GROUP_TIMEOUT_S = 300.0
"""How long `/init_weights_update_group` and each update wait for the learner's rank 0."""


class WeightUpdater:
    """The weight routes of one served model (`webrl.serve.native.NativeBackend`: its model, lock,
    model path and weight version)."""

    def __init__(self, backend: Any):
        self.backend = backend
        self.weight_groups: dict[str, Any] = {}
        """group name -> this server's `WeightBroadcastGroup` membership."""
        self.group_timeout_s = GROUP_TIMEOUT_S
        self._receive_lock = threading.Lock()  # one distributed update at a time

    def update_weights_from_disk(self, path: str, weight_version: Optional[str] = None) -> dict:
        """Copy the folder's weights into the served model in place; bump the weight version."""
        import torch

        from webrl.models import load_model

        try:
            fresh, _ = load_model(path, dtype=next(self.backend.model.parameters()).dtype, device="cpu")
        except (OSError, ValueError) as e:
            raise RequestError(400, f"model_path {path!r}: {e}", "model_path") from None
        new = dict(fresh.named_parameters())
        new.update(fresh.named_buffers())
        with self.backend.lock, torch.no_grad():
            own = dict(self.backend.model.named_parameters())
            own.update(self.backend.model.named_buffers())
            missing = sorted(set(own) - set(new))
            wrong = [k for k in own if k in new and new[k].shape != own[k].shape]
            if missing or wrong:
                raise RequestError(400, f"model_path {path!r} does not fit the served model: "
                                        f"{len(missing)} missing tensors (e.g. {missing[:3]}), {len(wrong)} with "
                                        f"other shapes (e.g. {wrong[:3]})", "model_path")
            for name, tensor in own.items():
                tensor.copy_(new[name].to(tensor.device, tensor.dtype))
            previous = self.backend.weight_version
            if weight_version is not None:
                self.backend.weight_version = str(weight_version)
            else:
                self.backend.weight_version = str(int(previous) + 1) if previous.isdigit() else f"{previous}+1"
            self.backend.model_path = path
        return {"success": True, "message": f"Succeeded to update model weights from {path}.",
                "num_paused_requests": 0, "weight_version": self.backend.weight_version}

    def init_weights_update_group(self, req: dict) -> dict:
        """Join the learner's broadcast group as rank `rank_offset` (blocks until it forms)."""
        from webrl.learner.weight_broadcast import GroupSetupError, WeightBroadcastGroup

        name = req.get("group_name") or "weight_update_group"
        try:
            group = WeightBroadcastGroup.join(req["master_address"], req["master_port"], req["rank_offset"],
                                              req["world_size"], backend="gloo", group_name=name,
                                              timeout_s=self.group_timeout_s)
        except GroupSetupError as e:
            raise RequestError(400, str(e), "master_address") from None
        previous = self.weight_groups.pop(name, None)
        if previous is not None:  # a re-init under the same name replaces the group
            previous.close()
        self.weight_groups[name] = group
        return {"success": True, "message": f"Succeeded to initialize group {name!r} as rank {req['rank_offset']}."}

    def destroy_weights_update_group(self, name: str) -> dict:
        group = self.weight_groups.pop(name, None)
        if group is not None:
            group.close()
        return {"success": group is not None, "message": ""}

    def update_weights_from_distributed(self, req: dict) -> dict:
        """Receive `names` from rank 0 of the group, then copy them into the model in place."""
        import torch

        from webrl.learner.weight_buckets import unflatten_bucket
        from webrl.learner.weights import module_name

        name = req.get("group_name") or "weight_update_group"
        group = self.weight_groups.get(name)
        if group is None:
            raise RequestError(400, f"no weight-update group {name!r} here: call /init_weights_update_group first "
                                    f"(groups: {sorted(self.weight_groups)})", "group_name")
        specs = req["specs"]
        with self._receive_lock:  # receive outside the generation lock: requests go on meanwhile
            if req.get("load_format") == "flattened_bucket":
                flat = torch.empty(sum(s.num_bytes for s in specs), dtype=torch.uint8)
                group.broadcast(flat)
                try:
                    tensors = unflatten_bucket(flat, specs)
                except ValueError as e:  # a misaligned offset: SGLang's receiver fails there too
                    raise RequestError(400, f"flattened_bucket: {e}", "dtypes") from None
            else:
                tensors = [torch.empty(s.shape, dtype=s.torch_dtype) for s in specs]
                for t in tensors:
                    group.broadcast(t)
        with self.backend.lock, torch.no_grad():
            own = dict(self.backend.model.named_parameters())
            own.update(self.backend.model.named_buffers())
            targets = [module_name(s.name, own) for s in specs]  # checkpoint names only, as SGLang's loaders
            unknown = [s.name for s, t in zip(specs, targets) if t is None]
            wrong = [s.name for s, t in zip(specs, targets) if t is not None and tuple(own[t].shape) != tuple(s.shape)]
            if unknown or wrong:
                raise RequestError(400, f"names do not fit the served model: unknown {unknown[:3]} (servers take "
                                        f"checkpoint names: model.layers.*, visual.*, lm_head.*), other shapes "
                                        f"{wrong[:3]} (nothing was changed)", "names")
            for target, tensor in zip(targets, tensors):
                own[target].copy_(tensor.to(own[target].device, own[target].dtype))
            if req.get("weight_version") is not None:
                self.backend.weight_version = str(req["weight_version"])
        return {"success": True, "message": "Succeeded to update parameter online.",
                "weight_version": self.backend.weight_version}

    def model_info(self) -> dict:
        return {"model_path": self.backend.model_path, "tokenizer_path": self.backend.model_path, "is_generation": True,
                "preferred_sampling_params": None, "weight_version": self.backend.weight_version}


def parse_update_request(body: bytes) -> tuple[str, Optional[str]]:
    """(model_path, weight_version) of an `/update_weights_from_disk` body."""
    obj = parse_body(body, "/update_weights_from_disk", UPDATE_FIELDS)
    path = obj.get("model_path")
    if not isinstance(path, str) or not path:
        raise RequestError(400, "model_path is required: the checkpoint folder to load", "model_path")
    if obj.get("load_format") not in (None, "auto"):
        raise RequestError(400, f"load_format must be 'auto' here, got {obj['load_format']!r}", "load_format")
    version = obj.get("weight_version")
    if version is not None and not isinstance(version, (str, int)):
        raise RequestError(400, f"weight_version must be a string, got {version!r}", "weight_version")
    return path, None if version is None else str(version)


def parse_body(body: bytes, route: str, allowed: tuple[str, ...]) -> dict:
    """A JSON object body whose keys are all in `allowed` (400 otherwise)."""
    try:
        obj = json_object(json.loads(body), "request body")
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(400, f"request body is not valid JSON: {e}") from None
    check_keys(obj, allowed, route)
    return obj


def parse_init_group_request(body: bytes) -> dict:
    """An `/init_weights_update_group` body, checked (400 naming the field)."""
    obj = parse_body(body, "/init_weights_update_group", INIT_GROUP_FIELDS)
    if not isinstance(obj.get("master_address"), str) or not obj["master_address"]:
        raise RequestError(400, "master_address is required: the learner rank 0's host", "master_address")
    int_field(obj.get("master_port"), "master_port", 1)
    world = int_field(obj.get("world_size"), "world_size", 2)
    rank = int_field(obj.get("rank_offset"), "rank_offset", 1)
    if rank >= world:
        raise RequestError(400, f"rank_offset {rank} must be < world_size {world}", "rank_offset")
    if obj.get("backend", "nccl") != "gloo":  # SGLang's default is nccl: say so rather than hang
        raise RequestError(400, f"backend must be 'gloo' on webrl serve (CPU, transformers backend), got "
                                f"{obj.get('backend', 'nccl')!r}", "backend")
    if not isinstance(obj.get("group_name", "weight_update_group"), str):
        raise RequestError(400, "group_name must be a string", "group_name")
    return obj


def parse_distributed_request(body: bytes) -> dict:
    """An `/update_weights_from_distributed` body; adds "specs" (`TensorSpec`s) for the receive."""
    from webrl.learner.weight_buckets import TensorSpec, torch_dtype

    obj = parse_body(body, "/update_weights_from_distributed", DISTRIBUTED_FIELDS)
    names, dtypes, shapes = obj.get("names"), obj.get("dtypes"), obj.get("shapes")
    if not (isinstance(names, list) and isinstance(dtypes, list) and isinstance(shapes, list)) or not names \
            or not len(names) == len(dtypes) == len(shapes):
        raise RequestError(400, "names, dtypes and shapes must be non-empty lists of the same length", "names")
    specs = []
    for i, (name, dtype, shape) in enumerate(zip(names, dtypes, shapes)):
        if not isinstance(name, str):
            raise RequestError(400, f"names[{i}] must be a string, got {name!r}", "names")
        try:
            torch_dtype(dtype)
        except ValueError as e:
            raise RequestError(400, f"dtypes[{i}]: {e}", "dtypes") from None
        if not isinstance(shape, list):
            raise RequestError(400, f"shapes[{i}] must be a list of sizes, got {shape!r}", "shapes")
        specs.append(TensorSpec(name, tuple(int_field(d, f"shapes[{i}]", 0) for d in shape), dtype))
    if obj.get("load_format") not in (None, "flattened_bucket"):
        raise RequestError(400, f"load_format must be null or 'flattened_bucket' here, got {obj['load_format']!r}",
                           "load_format")
    version = obj.get("weight_version")
    if version is not None and not isinstance(version, (str, int)):
        raise RequestError(400, f"weight_version must be a string, got {version!r}", "weight_version")
    return {**obj, "specs": specs}

def mount_weight_routes(app: Any, updater: WeightUpdater, config: Any, authorised, error, read_body,
                        admin=None) -> None:
    """Add the weight routes to `create_app`'s FastAPI app (same limits and error format; the
    update routes check `admin` (default `authorised`), the model-info routes `authorised`)."""
    admin = admin or authorised
    from starlette.concurrency import run_in_threadpool

    denied = "missing or wrong bearer key (send 'Authorization: Bearer <key>')"
    # replacing the served weights from any folder on disk is open only on loopback or behind a key
    weights_open = config.host in LOOPBACK_HOSTS or bool(config.api_key() or config.admin_api_key())

    def weight_route(path: str, parse, handle):
        @app.post(path)
        async def route(request: Request):
            if not admin(request):
                return error(401, denied)
            if not weights_open:
                return error(403, f"weight updates are refused on {config.host} without a key: set the "
                                  f"{config.admin_api_key_env} or {config.api_key_env} variable (or bind 127.0.0.1)")
            try:
                return await run_in_threadpool(handle, parse(await read_body(request, config.max_request_bytes)))
            except RequestError as e:
                return error(e.status, e.message, e.param, e.code)

    def parse_disk_update(body: bytes) -> tuple[str, Any]:
        path, version = parse_update_request(body)
        if not os.path.isdir(path):
            raise RequestError(400, f"model_path {path!r} is not a folder on this server", "model_path")
        return path, version

    weight_route("/update_weights_from_disk", parse_disk_update, lambda req: updater.update_weights_from_disk(*req))
    weight_route("/init_weights_update_group", parse_init_group_request, updater.init_weights_update_group)
    weight_route("/update_weights_from_distributed", parse_distributed_request,
                 updater.update_weights_from_distributed)
    weight_route("/destroy_weights_update_group",
                 lambda body: parse_body(body, "/destroy_weights_update_group", ("group_name",)),
                 lambda req: updater.destroy_weights_update_group(req.get("group_name") or "weight_update_group"))

    @app.get("/get_model_info")
    async def get_model_info(request: Request):
        if not authorised(request):
            return error(401, denied)
        return updater.model_info()

    @app.get("/model_info")  # SGLang's current route; /get_model_info is its deprecated name
    async def model_info(request: Request):
        if not authorised(request):
            return error(401, denied)
        return updater.model_info()

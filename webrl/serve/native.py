"""`webrl serve`'s SGLang-native routes: token-in/token-out generation and in-place weight updates.

    POST /generate                 SGLang `GenerateReqInput` subset -> `{"text", "output_ids", "meta_info"}`
    POST /update_weights_from_disk {"model_path", "weight_version"?} -> {"success", "message", ...}
    POST /init_weights_update_group {master_address, master_port, rank_offset, world_size, group_name?,
                                     backend: "gloo"} -> {"success", "message"}  (blocks until the group forms)
    POST /update_weights_from_distributed {names, dtypes, shapes, group_name?, load_format?
                                     (null | "flattened_bucket"), weight_version?, flush_cache?,
                                     abort_all_requests?, torch_empty_cache?} -> {"success", "message"}
    POST /destroy_weights_update_group {group_name?}
    GET  /get_model_info           {"model_path", ..., "weight_version"}
    GET  /health                   (the app's own route)

The subset is what `webrl.rollout.server_engine.ServerEngine` sends, so a rollout runs the same
against SGLang and against `webrl serve` on the transformers backend (CPU tests).

Request (`/generate`): `input_ids` (the prompt exactly as the policy built it, each image's
`<|image_pad|>` already repeated to its token count), `image_data` (one data URL, or a list in
prompt order; `data:image/png|jpeg|webp;base64,...` only: the server never fetches a URL),
`sampling_params` {temperature (0 = greedy), top_p, top_k (-1 = off, or >= 1), max_new_tokens,
stop_token_ids, skip_special_tokens, no_stop_trim, sampling_seed}, `return_logprob`,
`logprob_start_len` (-1 only: no prompt log-probs), `top_logprobs_num` (0 only), `stream`
(false only), `rid`. Anything else is a 400 naming the field.

Pixel bounds (a webrl extension, ignored by SGLang): `webrl_image_pixels` {"min_pixels",
"max_pixels"} resizes the images as the policy's `PromptConfig` does; without it the checkpoint's
own image processor bounds apply (as SGLang uses). The image pads in `input_ids` must match the
resized grids, or the request is refused (400) instead of silently misaligned.

Log-probs: `meta_info.output_token_logprobs` = [[logprob, token_id, None], ...], where logprob
is log softmax(raw logits / T) of the sampled token (`SampledLogprobs`, as `GeneratorPolicy`;
greedy reports T = 1), which is also SGLang's default (before top-p / top-k filtering, with
SGLANG_RETURN_ORIGINAL_LOGPROB unset). `output_ids` ends with the stop token that ended
generation; finish_reason is {"type": "stop", "matched": id} or {"type": "length", "length": N}.
Vision placeholder tokens are never sampled (suppressed after the log-probs, as in-process).

Distributed weight updates (SGLang's `InitWeightsUpdateGroupReqInput` and
`UpdateWeightsFromDistributedReqInput`, read in sgl-project/sglang io_struct.py at 001067ff; the
receive side as its model runner's `update_weights_from_distributed` /
`_update_bucketed_weights_from_distributed`): the server joins the learner's group as rank
`rank_offset` (gloo only: this is the CPU backend) through `webrl.learner.weights`, and each
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
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

from fastapi import Request  # module level: FastAPI resolves the endpoints' string annotations here

from webrl.serve.protocol import RequestError, decode_image_url
from webrl.types import Image

GENERATE_FIELDS = ("input_ids", "image_data", "sampling_params", "return_logprob", "logprob_start_len",
                   "top_logprobs_num", "stream", "rid", "webrl_image_pixels")
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "max_new_tokens", "stop_token_ids", "skip_special_tokens",
                   "no_stop_trim", "sampling_seed")
UPDATE_FIELDS = ("model_path", "weight_version", "load_format", "abort_all_requests", "flush_cache")
INIT_GROUP_FIELDS = ("master_address", "master_port", "rank_offset", "world_size", "group_name", "backend")
DISTRIBUTED_FIELDS = ("names", "dtypes", "shapes", "group_name", "flush_cache", "abort_all_requests",
                      "weight_version", "load_format", "torch_empty_cache")
GROUP_TIMEOUT_S = 300.0
"""How long `/init_weights_update_group` and each update wait for the learner's rank 0."""


@dataclass
class NativeSampling:
    """`sampling_params` of one request (SGLang names and conventions)."""

    temperature: float = 1.0
    """0 = greedy (log-probs at T = 1)."""
    top_p: float = 1.0
    top_k: int = -1
    """-1 = off."""
    max_new_tokens: int = 128
    """SGLang's default; `webrl serve` uses its `default_max_tokens`."""
    stop_token_ids: list[int] = field(default_factory=list)
    skip_special_tokens: bool = True
    """Only shapes the returned `text`; ids and log-probs are unaffected."""
    seed: Optional[int] = None


@dataclass
class NativeRequest:
    """A parsed `/generate` request."""

    input_ids: list[int]
    images: list[Image]
    sampling: NativeSampling
    return_logprob: bool = False
    pixel_bounds: Optional[tuple[int, int]] = None
    """(min_pixels, max_pixels) from `webrl_image_pixels`; None = the checkpoint's."""
    rid: str = ""


def _object(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise RequestError(400, f"{where} must be a JSON object, got {type(value).__name__}", where)
    return value


def _check_keys(obj: dict, allowed: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(obj) - set(allowed))
    if unknown:
        raise RequestError(400, f"{where}: unsupported field(s) {unknown}; supported: {list(allowed)}", unknown[0])


def _int(value: Any, where: str, low: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low):
        bound = f" >= {low}" if low is not None else ""
        raise RequestError(400, f"{where} must be an integer{bound}, got {value!r}", where)
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(400, f"{where} must be a number, got {value!r}", where)
    return float(value)


def _int_list(value: Any, where: str) -> list[int]:
    if not isinstance(value, list):
        raise RequestError(400, f"{where} must be a list of token ids, got {type(value).__name__}", where)
    return [_int(v, f"{where}[{i}]", 0) for i, v in enumerate(value)]


def parse_sampling(params: Any, config: Any) -> NativeSampling:
    """`sampling_params` -> `NativeSampling`, with SGLang's validity rules (400 naming the key);
    max_new_tokens defaults to `config.default_max_tokens` and is capped by `config.max_new_tokens`."""
    params = _object(params if params is not None else {}, "sampling_params")
    _check_keys(params, SAMPLING_FIELDS, "sampling_params")
    s = NativeSampling(max_new_tokens=config.default_max_tokens)
    if "temperature" in params:
        s.temperature = _number(params["temperature"], "sampling_params.temperature")
        if s.temperature < 0:
            raise RequestError(400, f"sampling_params.temperature must be >= 0, got {s.temperature}", "temperature")
    if "top_p" in params:
        s.top_p = _number(params["top_p"], "sampling_params.top_p")
        if not 0 < s.top_p <= 1:
            raise RequestError(400, f"sampling_params.top_p must be in (0, 1], got {s.top_p}", "top_p")
    if "top_k" in params:
        s.top_k = _int(params["top_k"], "sampling_params.top_k")
        if s.top_k != -1 and s.top_k < 1:
            raise RequestError(400, f"sampling_params.top_k must be -1 (off) or >= 1, got {s.top_k}", "top_k")
    if "max_new_tokens" in params:
        s.max_new_tokens = _int(params["max_new_tokens"], "sampling_params.max_new_tokens", 1)
    if s.max_new_tokens > config.max_new_tokens:
        raise RequestError(400, f"sampling_params.max_new_tokens is {s.max_new_tokens}; the limit is "
                                f"{config.max_new_tokens}", "max_new_tokens")
    if params.get("stop_token_ids") is not None:
        s.stop_token_ids = _int_list(params["stop_token_ids"], "sampling_params.stop_token_ids")
    for name in ("skip_special_tokens", "no_stop_trim"):
        if name in params and not isinstance(params[name], bool):
            raise RequestError(400, f"sampling_params.{name} must be true or false, got {params[name]!r}", name)
    s.skip_special_tokens = params.get("skip_special_tokens", True)
    if params.get("sampling_seed") is not None:
        s.seed = _int(params["sampling_seed"], "sampling_params.sampling_seed", 0)
    return s


def parse_generate_request(body: bytes, config: Any) -> NativeRequest:
    """A `/generate` body -> `NativeRequest` under `config`'s limits (`ServeConfig`)."""
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(400, f"request body is not valid JSON: {e}") from None
    obj = _object(obj, "request body")
    _check_keys(obj, GENERATE_FIELDS, "/generate")
    if obj.get("input_ids") is None:
        raise RequestError(400, "input_ids is required (token-in/token-out: this server takes no 'text')",
                            "input_ids")
    ids = _int_list(obj["input_ids"], "input_ids")
    if not ids:
        raise RequestError(400, "input_ids must not be empty", "input_ids")
    if len(ids) > config.max_prompt_tokens:
        raise RequestError(400, f"input_ids has {len(ids)} tokens; the limit is {config.max_prompt_tokens}",
                           "input_ids", "context_length_exceeded")
    urls = obj.get("image_data")
    urls = [] if urls is None else [urls] if isinstance(urls, str) else urls
    if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        raise RequestError(400, "image_data must be a data URL or a list of data URLs", "image_data")
    if len(urls) > config.max_images:
        raise RequestError(400, f"image_data has {len(urls)} images; the limit is {config.max_images}", "image_data")
    images = [decode_image_url(u, config.max_image_pixels, f"image_data[{i}]") for i, u in enumerate(urls)]
    for name, allowed in (("stream", (None, False)), ("logprob_start_len", (None, -1)), ("top_logprobs_num", (None, 0))):
        if obj.get(name) not in allowed:
            raise RequestError(400, f"{name} must be one of {[a for a in allowed if a is not None]} here, got "
                                    f"{obj[name]!r}", name)
    bounds = None
    if obj.get("webrl_image_pixels") is not None:
        px = _object(obj["webrl_image_pixels"], "webrl_image_pixels")
        _check_keys(px, ("min_pixels", "max_pixels"), "webrl_image_pixels")
        low = _int(px.get("min_pixels"), "webrl_image_pixels.min_pixels", 1)
        high = _int(px.get("max_pixels"), "webrl_image_pixels.max_pixels", low)
        if high > config.max_image_pixels:  # the resize happens before the pad check: bound it first
            raise RequestError(400, f"webrl_image_pixels.max_pixels is {high}; the limit is "
                                    f"{config.max_image_pixels} (max_image_pixels)", "webrl_image_pixels.max_pixels")
        bounds = (low, high)
    ret = obj.get("return_logprob", False)
    if not isinstance(ret, bool):
        raise RequestError(400, f"return_logprob must be true or false, got {ret!r}", "return_logprob")
    rid = obj.get("rid") or uuid.uuid4().hex
    return NativeRequest(ids, images, parse_sampling(obj.get("sampling_params"), config),
                         ret, bounds, str(rid))


class NativeBackend:
    """A local Qwen-VL model behind the native routes. `lock` orders generation, weight updates
    and (shared with `LocalChatEngine`) chat completions."""

    def __init__(self, model: Any, processor: Any, lock: Optional[threading.Lock] = None,
                 model_path: str = "", weight_version: str = "0"):
        from webrl.chat.tokens import VISION_TOKENS

        self.model, self.processor = model, processor
        self.lock = lock or threading.Lock()
        self.model_path, self.weight_version = model_path, weight_version
        self.tokenizer = processor.tokenizer
        vocab = self.tokenizer.get_vocab()
        self.image_pad_id = vocab["<|image_pad|>"]
        self.suppress_ids = [vocab[t] for t in VISION_TOKENS if t in vocab]
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.weight_groups: dict[str, Any] = {}
        """group name -> this server's `WeightBroadcastGroup` membership."""
        self.group_timeout_s = GROUP_TIMEOUT_S
        self._receive_lock = threading.Lock()  # one distributed update at a time

    @classmethod
    def from_chat_engine(cls, engine: Any, model_path: str = "") -> Optional["NativeBackend"]:
        """The backend sharing a `LocalChatEngine`'s model, processor and lock; None for engines
        without a local model (stubs, proxies): they serve chat completions only."""
        model, processor = getattr(engine, "model", None), getattr(engine, "processor", None)
        if model is None or processor is None:
            return None
        return cls(model, processor, getattr(engine, "_lock", None), model_path)

    # -- generation ------------------------------------------------------------------------------
    def model_inputs(self, req: NativeRequest) -> dict:
        """Tensors for `model.generate`: the ids as sent, the images' pixels and grids."""
        import torch

        vocab = self.model.get_input_embeddings().num_embeddings
        bad = [i for i in req.input_ids if not 0 <= i < vocab]
        if bad:
            raise RequestError(400, f"input_ids hold ids outside the vocabulary [0, {vocab}): {bad[:5]}", "input_ids")

        ids = torch.tensor([req.input_ids])  # (1, P)
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                  "mm_token_type_ids": (ids == self.image_pad_id).long()}
        pads = int(inputs["mm_token_type_ids"].sum())
        if not req.images:
            if pads:
                raise RequestError(400, f"input_ids hold {pads} <|image_pad|> tokens but image_data is empty",
                                   "image_data")
            return inputs
        ip = self.processor.image_processor
        kwargs = {}
        if req.pixel_bounds is not None:
            kwargs["size"] = {"shortest_edge": req.pixel_bounds[0], "longest_edge": req.pixel_bounds[1]}
        vision = ip(images=[im.to_pil() for im in req.images], return_tensors="pt", **kwargs)
        expected = int(vision["image_grid_thw"].prod(-1).sum()) // ip.merge_size ** 2
        if expected != pads:
            raise RequestError(400, f"input_ids hold {pads} <|image_pad|> tokens but the {len(req.images)} image(s) "
                                    f"resize to {expected} visual tokens (check webrl_image_pixels / the prompt's "
                                    f"min_pixels and max_pixels)", "input_ids")
        inputs.update(pixel_values=vision["pixel_values"], image_grid_thw=vision["image_grid_thw"])
        return inputs

    def generate(self, req: NativeRequest) -> dict:
        """One request -> SGLang's non-streaming `/generate` response subset."""
        import torch

        from webrl.policy.sampled_logprobs import LogitsProcessorList, SampledLogprobs

        t0 = time.perf_counter()
        inputs = {k: v.to(self.model.device) for k, v in self.model_inputs(req).items()}
        s = req.sampling
        greedy = s.temperature == 0
        recorder = SampledLogprobs(1.0 if greedy else s.temperature, self.suppress_ids)
        kwargs = dict(max_new_tokens=s.max_new_tokens, pad_token_id=self.pad_id, return_dict_in_generate=True,
                      repetition_penalty=1.0, logits_processor=LogitsProcessorList([recorder]),
                      eos_token_id=s.stop_token_ids or None)
        if greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=s.temperature, top_p=s.top_p,
                          top_k=0 if s.top_k == -1 else s.top_k)  # 0, not None: None = the checkpoint's
        if not s.stop_token_ids:  # the checkpoint's eos would apply otherwise; SGLang also stops there
            kwargs["eos_token_id"] = self.model.generation_config.eos_token_id
        with self.lock, torch.no_grad():
            if s.seed is not None:
                torch.manual_seed(s.seed)
            out = self.model.generate(**inputs, **kwargs)
            version = self.weight_version
        P = len(req.input_ids)
        ids = out.sequences[0, P:].tolist()  # (N,)
        logp = recorder.finish(out.sequences)[0].tolist()  # (N,)
        stops = set(s.stop_token_ids or _as_list(self.model.generation_config.eos_token_id))
        if ids and ids[-1] in stops:
            finish = {"type": "stop", "matched": ids[-1]}
        else:
            finish = {"type": "length", "length": len(ids)}
        meta = {"id": req.rid, "finish_reason": finish, "prompt_tokens": P, "completion_tokens": len(ids),
                "cached_tokens": 0, "weight_version": version, "e2e_latency": time.perf_counter() - t0}
        if req.return_logprob:
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(logp, ids)]
        text = self.tokenizer.decode(ids, skip_special_tokens=s.skip_special_tokens)
        return {"text": text, "output_ids": ids, "meta_info": meta}

    # -- weights ---------------------------------------------------------------------------------
    def update_weights_from_disk(self, path: str, weight_version: Optional[str] = None) -> dict:
        """Copy the folder's weights into the served model in place; bump the weight version."""
        import torch

        from webrl.models import load_model

        try:
            fresh, _ = load_model(path, dtype=next(self.model.parameters()).dtype, device="cpu")
        except (OSError, ValueError) as e:
            raise RequestError(400, f"model_path {path!r}: {e}", "model_path") from None
        new = dict(fresh.named_parameters())
        new.update(fresh.named_buffers())
        with self.lock, torch.no_grad():
            own = dict(self.model.named_parameters())
            own.update(self.model.named_buffers())
            missing = sorted(set(own) - set(new))
            wrong = [k for k in own if k in new and new[k].shape != own[k].shape]
            if missing or wrong:
                raise RequestError(400, f"model_path {path!r} does not fit the served model: "
                                        f"{len(missing)} missing tensors (e.g. {missing[:3]}), {len(wrong)} with "
                                        f"other shapes (e.g. {wrong[:3]})", "model_path")
            for name, tensor in own.items():
                tensor.copy_(new[name].to(tensor.device, tensor.dtype))
            previous = self.weight_version
            if weight_version is not None:
                self.weight_version = str(weight_version)
            else:
                self.weight_version = str(int(previous) + 1) if previous.isdigit() else f"{previous}+1"
            self.model_path = path
        return {"success": True, "message": f"Succeeded to update model weights from {path}.",
                "num_paused_requests": 0, "weight_version": self.weight_version}

    def init_weights_update_group(self, req: dict) -> dict:
        """Join the learner's broadcast group as rank `rank_offset` (blocks until it forms)."""
        from webrl.learner.weights import GroupSetupError, WeightBroadcastGroup

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

        from webrl.learner.weights import unflatten_bucket

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
                tensors = unflatten_bucket(flat, specs)
            else:
                tensors = [torch.empty(s.shape, dtype=s.torch_dtype) for s in specs]
                for t in tensors:
                    group.broadcast(t)
        with self.lock, torch.no_grad():
            own = dict(self.model.named_parameters())
            own.update(self.model.named_buffers())
            unknown = [s.name for s in specs if s.name not in own]
            wrong = [s.name for s in specs if s.name in own and tuple(own[s.name].shape) != tuple(s.shape)]
            if unknown or wrong:
                raise RequestError(400, f"names do not fit the served model: unknown {unknown[:3]}, other shapes "
                                        f"{wrong[:3]} (nothing was changed)", "names")
            for spec, tensor in zip(specs, tensors):
                own[spec.name].copy_(tensor.to(own[spec.name].device, own[spec.name].dtype))
            if req.get("weight_version") is not None:
                self.weight_version = str(req["weight_version"])
        return {"success": True, "message": "Succeeded to update parameter online.",
                "weight_version": self.weight_version}

    def model_info(self) -> dict:
        return {"model_path": self.model_path, "tokenizer_path": self.model_path, "is_generation": True,
                "preferred_sampling_params": None, "weight_version": self.weight_version}


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [] if value is None else [value]


def parse_update_request(body: bytes) -> tuple[str, Optional[str]]:
    """(model_path, weight_version) of an `/update_weights_from_disk` body."""
    try:
        obj = _object(json.loads(body), "request body")
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(400, f"request body is not valid JSON: {e}") from None
    _check_keys(obj, UPDATE_FIELDS, "/update_weights_from_disk")
    path = obj.get("model_path")
    if not isinstance(path, str) or not path:
        raise RequestError(400, "model_path is required: the checkpoint folder to load", "model_path")
    if obj.get("load_format") not in (None, "auto"):
        raise RequestError(400, f"load_format must be 'auto' here, got {obj['load_format']!r}", "load_format")
    version = obj.get("weight_version")
    if version is not None and not isinstance(version, (str, int)):
        raise RequestError(400, f"weight_version must be a string, got {version!r}", "weight_version")
    return path, None if version is None else str(version)


def _json_object(body: bytes, route: str, allowed: tuple[str, ...]) -> dict:
    try:
        obj = _object(json.loads(body), "request body")
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(400, f"request body is not valid JSON: {e}") from None
    _check_keys(obj, allowed, route)
    return obj


def parse_init_group_request(body: bytes) -> dict:
    """An `/init_weights_update_group` body, checked (400 naming the field)."""
    obj = _json_object(body, "/init_weights_update_group", INIT_GROUP_FIELDS)
    if not isinstance(obj.get("master_address"), str) or not obj["master_address"]:
        raise RequestError(400, "master_address is required: the learner rank 0's host", "master_address")
    _int(obj.get("master_port"), "master_port", 1)
    world = _int(obj.get("world_size"), "world_size", 2)
    rank = _int(obj.get("rank_offset"), "rank_offset", 1)
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
    from webrl.learner.weights import TensorSpec, torch_dtype

    obj = _json_object(body, "/update_weights_from_distributed", DISTRIBUTED_FIELDS)
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
        specs.append(TensorSpec(name, tuple(_int(d, f"shapes[{i}]", 0) for d in shape), dtype))
    if obj.get("load_format") not in (None, "flattened_bucket"):
        raise RequestError(400, f"load_format must be null or 'flattened_bucket' here, got {obj['load_format']!r}",
                           "load_format")
    version = obj.get("weight_version")
    if version is not None and not isinstance(version, (str, int)):
        raise RequestError(400, f"weight_version must be a string, got {version!r}", "weight_version")
    return {**obj, "specs": specs}


def mount_native_routes(app: Any, backend: NativeBackend, config: Any, authorised, error, read_body) -> None:
    """Add the native routes to `create_app`'s FastAPI app (same key check, limits, error format)."""
    from starlette.concurrency import run_in_threadpool

    denied = "missing or wrong bearer key (send 'Authorization: Bearer <key>')"
    # replacing the served weights from any folder on disk is open only on loopback or behind a key
    weights_open = config.host in ("127.0.0.1", "localhost", "::1") or bool(config.api_key())

    @app.post("/generate")
    async def generate(request: Request):
        if not authorised(request):
            return error(401, denied)
        try:
            req = parse_generate_request(await read_body(request, config.max_request_bytes), config)
            return await run_in_threadpool(backend.generate, req)
        except RequestError as e:
            return error(e.status, e.message, e.param, e.code)

    def weight_route(path: str, parse, handle):
        @app.post(path)
        async def route(request: Request):
            if not authorised(request):
                return error(401, denied)
            if not weights_open:
                return error(403, f"weight updates are refused on {config.host} without a key: set the "
                                  f"{config.api_key_env} variable (or bind 127.0.0.1)")
            try:
                return await run_in_threadpool(handle, parse(await read_body(request, config.max_request_bytes)))
            except RequestError as e:
                return error(e.status, e.message, e.param, e.code)

    def parse_disk_update(body: bytes) -> tuple[str, Any]:
        path, version = parse_update_request(body)
        if not os.path.isdir(path):
            raise RequestError(400, f"model_path {path!r} is not a folder on this server", "model_path")
        return path, version

    weight_route("/update_weights_from_disk", parse_disk_update, lambda req: backend.update_weights_from_disk(*req))
    weight_route("/init_weights_update_group", parse_init_group_request, backend.init_weights_update_group)
    weight_route("/update_weights_from_distributed", parse_distributed_request,
                 backend.update_weights_from_distributed)
    weight_route("/destroy_weights_update_group",
                 lambda body: _json_object(body, "/destroy_weights_update_group", ("group_name",)),
                 lambda req: backend.destroy_weights_update_group(req.get("group_name") or "weight_update_group"))

    @app.get("/get_model_info")
    async def get_model_info(request: Request):
        if not authorised(request):
            return error(401, denied)
        return backend.model_info()

"""`webrl serve`'s SGLang-native `/generate`: token-in/token-out generation, prompt log-probs and
hidden states, on the in-process generator backend (`TransformersBackend`) that rollouts use.

    POST /generate                 SGLang `GenerateReqInput` subset -> `{"text", "output_ids", "meta_info"}`
    weight updates, GET /model_info   webrl.serve.weights
    GET  /health                   (the app's own route)

`webrl serve` stands for SGLang in the CPU tests, so it is as strict as SGLang wherever webrl's
server engine could go wrong, each rule read in sgl-project/sglang (commits named per rule):

- Images: each image is one `<|image_pad|>` in `input_ids`, which the server expands to the
  image's token count at its own pixel bounds (ServeConfig.image_min_pixels / image_max_pixels,
  SGLang's `--mm-process-config`); a pre-expanded run is refused (multimodal/mm_token_expansion.py
  at 749962b6, `expand_token_placeholders`), as is a count that does not match `image_data`.
  `meta_info.prompt_tokens` is the expanded length.
- Prompt log-probs (`logprob_start_len` = L >= 0): `meta_info.input_token_logprobs` covers
  positions L .. end, entry 0 `[None, ids[L], None]`, entry k log p(ids[L + k] | ids[:L + k]) at
  temperature 1 whatever the sampling temperature (logprob_result_processor.py at 17b67163;
  input log-probs are never temperature-scaled, logits_processor.py at 5993251f). The prefix cache
  then reuses at most L tokens (schedule_batch.py at 001067ff, `Req._compute_max_prefix_len`).
- Hidden states (`return_hidden_states: true`): `meta_info.hidden_states` = [the (E, H) rows of
  the E positions computed in the prefill] (the final layer after the final norm; a cached prefix
  has no rows: batch_result_processor.py at 003ddbce); none at max_new_tokens 0, as the newest
  SGLang answers a prefill-only request. Departure: SGLang appends one vector per decoded token
  after the first element; `webrl serve` does not compute them (no client here reads them).
- `max_new_tokens` 0 scores only (sampling/sampling_params.py at 00c17caf).

Request: `input_ids`, `image_data` (data URLs only: the server never fetches a URL),
`sampling_params` {temperature (0 = greedy), top_p, top_k (-1 = off, or >= 1), max_new_tokens,
stop_token_ids, skip_special_tokens, no_stop_trim, sampling_seed}, `return_logprob`,
`logprob_start_len`, `return_hidden_states`, `extra_key` (the prefix-cache namespace),
`top_logprobs_num` (0 only), `stream` (false only), `rid`. Anything else is a 400 naming the field.

Log-probs: `meta_info.output_token_logprobs` = [[logprob, token_id, None], ...], log softmax(raw
logits / T) of each sampled token (greedy: T = 1), SGLang's default. `output_ids` ends with the
stop token that ended generation; finish_reason is {"type": "stop", "matched": id} or
{"type": "length", "length": N}. `meta_info.cached_tokens`: prompt tokens served from the
backend's prefix cache. Vision placeholder tokens are never sampled (a departure: SGLang does not
mask them; webrl's server engine refuses a response holding one).
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

from fastapi import Request  # module level: FastAPI resolves the endpoints' string annotations here

from webrl.serve.protocol import (RequestError, check_keys, decode_image_url, int_field, int_list, json_object,
                                  number_field)
from webrl.serve.weights import WeightUpdater, mount_weight_routes
from webrl.types import Image

GENERATE_FIELDS = ("input_ids", "image_data", "sampling_params", "return_logprob", "logprob_start_len",
                   "top_logprobs_num", "stream", "rid", "return_hidden_states", "extra_key")
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "max_new_tokens", "stop_token_ids", "skip_special_tokens",
                   "no_stop_trim", "sampling_seed")


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
    logprob_start_len: int = -1
    """Position the prompt log-probs start at (-1: none)."""
    return_hidden_states: bool = False
    rid: str = ""
    extra_key: Optional[str] = None
    """The prefix-cache namespace (SGLang's radix cache never matches across keys)."""


def parse_sampling(params: Any, config: Any) -> NativeSampling:
    """`sampling_params` -> `NativeSampling`, with SGLang's validity rules (400 naming the key);
    max_new_tokens defaults to `config.default_max_tokens` and is capped by `config.max_new_tokens`."""
    params = json_object(params if params is not None else {}, "sampling_params")
    check_keys(params, SAMPLING_FIELDS, "sampling_params")
    s = NativeSampling(max_new_tokens=config.default_max_tokens)
    if "temperature" in params:
        s.temperature = number_field(params["temperature"], "sampling_params.temperature")
        if s.temperature < 0:
            raise RequestError(400, f"sampling_params.temperature must be >= 0, got {s.temperature}", "temperature")
    if "top_p" in params:
        s.top_p = number_field(params["top_p"], "sampling_params.top_p")
        if not 0 < s.top_p <= 1:
            raise RequestError(400, f"sampling_params.top_p must be in (0, 1], got {s.top_p}", "top_p")
    if "top_k" in params:
        s.top_k = int_field(params["top_k"], "sampling_params.top_k")
        if s.top_k != -1 and s.top_k < 1:
            raise RequestError(400, f"sampling_params.top_k must be -1 (off) or >= 1, got {s.top_k}", "top_k")
    if "max_new_tokens" in params:
        s.max_new_tokens = int_field(params["max_new_tokens"], "sampling_params.max_new_tokens", 0)
    if s.max_new_tokens > config.max_new_tokens:
        raise RequestError(400, f"sampling_params.max_new_tokens is {s.max_new_tokens}; the limit is "
                                f"{config.max_new_tokens}", "max_new_tokens")
    if params.get("stop_token_ids") is not None:
        s.stop_token_ids = int_list(params["stop_token_ids"], "sampling_params.stop_token_ids")
    for name in ("skip_special_tokens", "no_stop_trim"):
        if name in params and not isinstance(params[name], bool):
            raise RequestError(400, f"sampling_params.{name} must be true or false, got {params[name]!r}", name)
    s.skip_special_tokens = params.get("skip_special_tokens", True)
    if params.get("sampling_seed") is not None:
        s.seed = int_field(params["sampling_seed"], "sampling_params.sampling_seed", 0)
    return s


def parse_generate_request(body: bytes, config: Any) -> NativeRequest:
    """A `/generate` body -> `NativeRequest` under `config`'s limits (`ServeConfig`)."""
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(400, f"request body is not valid JSON: {e}") from None
    obj = json_object(obj, "request body")
    check_keys(obj, GENERATE_FIELDS, "/generate")
    if obj.get("input_ids") is None:
        raise RequestError(400, "input_ids is required (token-in/token-out: this server takes no 'text')",
                            "input_ids")
    ids = int_list(obj["input_ids"], "input_ids")
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
    for name, allowed in (("stream", (None, False)), ("top_logprobs_num", (None, 0))):
        if obj.get(name) not in allowed:
            raise RequestError(400, f"{name} must be one of {[a for a in allowed if a is not None]} here, got "
                                    f"{obj[name]!r}", name)
    flags = {}
    for name in ("return_logprob", "return_hidden_states"):
        flags[name] = obj.get(name, False)
        if not isinstance(flags[name], bool):
            raise RequestError(400, f"{name} must be true or false, got {flags[name]!r}", name)
    start = -1 if obj.get("logprob_start_len") is None else int_field(obj["logprob_start_len"], "logprob_start_len", -1)
    if not flags["return_logprob"]:
        start = -1  # as SGLang's scheduler does
    rid = obj.get("rid") or uuid.uuid4().hex
    extra = obj.get("extra_key")
    if extra is not None and not isinstance(extra, str):
        raise RequestError(400, f"extra_key must be a string, got {extra!r}", "extra_key")
    return NativeRequest(ids, images, parse_sampling(obj.get("sampling_params"), config), flags["return_logprob"],
                         start, flags["return_hidden_states"], str(rid), extra)


class NativeBackend:
    """A local Qwen-VL model behind the native routes, through the in-process generator backend.
    `lock` orders generation, weight updates and (shared with `LocalChatEngine`) chat completions;
    `pixel_bounds` (min_pixels, max_pixels) the images are expanded at (None: the checkpoint's)."""

    def __init__(self, model: Any, processor: Any, lock: Optional[threading.Lock] = None,
                 model_path: str = "", weight_version: str = "0", pixel_bounds: Optional[tuple[int, int]] = None):
        from webrl.engines.transformers import TransformersBackend

        self.model, self.processor = model, processor
        self.lock = lock or threading.Lock()
        self.model_path, self.weight_version = model_path, weight_version
        self.tokenizer = processor.tokenizer
        self.backend = TransformersBackend(model, processor, max_batch_size=1)
        self.image_pad_id = self.backend.image_pad_id
        ip = processor.image_processor
        default = (getattr(ip, "min_pixels", None) or ip.size["shortest_edge"],
                   getattr(ip, "max_pixels", None) or ip.size["longest_edge"])
        self.pixel_bounds = tuple(pixel_bounds) if pixel_bounds and pixel_bounds[1] else default
        self.factor = ip.patch_size * ip.merge_size
        self._cached_under = weight_version

    def weights_changed(self) -> None:
        """The served weights changed: drop the prefix cache (it holds the old weights' states)."""
        self.backend.clear_cache()
        self._cached_under = self.weight_version

    @classmethod
    def from_chat_engine(cls, engine: Any, model_path: str = "",
                         pixel_bounds: Optional[tuple[int, int]] = None) -> Optional["NativeBackend"]:
        """The backend sharing a `LocalChatEngine`'s model, processor and lock; None for engines
        without a local model (stubs, proxies): they serve chat completions only."""
        model, processor = getattr(engine, "model", None), getattr(engine, "processor", None)
        if model is None or processor is None:
            return None
        return cls(model, processor, getattr(engine, "lock", None), model_path, pixel_bounds=pixel_bounds)

    # -- generation ------------------------------------------------------------------------------
    def expand(self, req: NativeRequest) -> list[int]:
        """`input_ids` with each image's one `<|image_pad|>` expanded to its token count at this
        server's pixel bounds (400 for a pre-expanded run or a count that does not match)."""
        from webrl.policy.images import image_token_count

        vocab = self.model.get_input_embeddings().num_embeddings
        bad = [i for i in req.input_ids if not 0 <= i < vocab]
        if bad:
            raise RequestError(400, f"input_ids hold ids outside the vocabulary [0, {vocab}): {bad[:5]}", "input_ids")
        pad = self.image_pad_id
        runs = [i for i, t in enumerate(req.input_ids) if t == pad and (i == 0 or req.input_ids[i - 1] != pad)]
        if any(i + 1 < len(req.input_ids) and req.input_ids[i + 1] == pad for i in runs):
            raise RequestError(400, "input_ids hold an expanded run of <|image_pad|> tokens: send each image as one "
                                    "<|image_pad|> (the server expands it at its own pixel bounds, as SGLang does)",
                               "input_ids")
        if len(runs) != len(req.images):
            raise RequestError(400, f"input_ids hold {len(runs)} image placeholder(s) for {len(req.images)} image(s) "
                                    f"in image_data", "image_data")
        out = []
        counts = iter(image_token_count(*im.size, self.factor, *self.pixel_bounds) for im in req.images)
        for t in req.input_ids:
            out.extend([pad] * next(counts) if t == pad else [t])
        return out

    def generate(self, req: NativeRequest, max_prompt_tokens: int = 1 << 30) -> dict:
        """One request -> SGLang's non-streaming `/generate` response subset."""
        from webrl.policy.backend import GenerateRequest

        t0 = time.perf_counter()
        seq = self.expand(req)
        if len(seq) > max_prompt_tokens:
            raise RequestError(400, f"the prompt has {len(seq)} tokens with its images expanded; the limit is "
                                    f"{max_prompt_tokens}", "input_ids", "context_length_exceeded")
        start = req.logprob_start_len
        if start >= len(seq):
            raise RequestError(400, f"logprob_start_len {start} is not below the {len(seq)} input tokens",
                               "logprob_start_len")
        s = req.sampling
        stops = tuple(s.stop_token_ids or _as_list(self.model.generation_config.eos_token_id))
        cut = start + 1 if start >= 0 else len(seq)
        row = GenerateRequest(seq[:cut], req.images, self.pixel_bounds, forced_ids=seq[cut:],
                              max_new_tokens=s.max_new_tokens, temperature=s.temperature or 1.0, top_p=s.top_p,
                              top_k=0 if s.top_k == -1 else s.top_k, greedy=s.temperature == 0, stop_ids=stops,
                              forced_temperature=1.0, hidden_layer=-1 if req.return_hidden_states else None,
                              seed=s.seed, cache_key=req.extra_key)
        with self.lock:
            if self.weight_version != self._cached_under:  # kept KV caches hold other weights' states
                self.weights_changed()
            out = self.backend.generate([row])[0]
            version = self.weight_version
        ids = list(out.ids)
        if ids and ids[-1] in stops:
            finish = {"type": "stop", "matched": ids[-1]}
        else:
            finish = {"type": "length", "length": len(ids)}
        meta = {"id": req.rid, "finish_reason": finish, "prompt_tokens": len(seq), "completion_tokens": len(ids),
                "cached_tokens": out.cached_tokens, "weight_version": version,
                "e2e_latency": time.perf_counter() - t0}
        if req.return_logprob:
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(out.logprobs, ids)]
            if start >= 0:
                meta["input_token_logprobs"] = [[None, seq[start], None]] + [
                    [lp, t, None] for lp, t in zip(out.forced_logprobs or [], seq[cut:])]
        if req.return_hidden_states:
            meta["hidden_states"] = [out.hidden.tolist()] if s.max_new_tokens else []
        text = self.tokenizer.decode(ids, skip_special_tokens=s.skip_special_tokens)
        return {"text": text, "output_ids": ids, "meta_info": meta}


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [] if value is None else [value]


def mount_native_routes(app: Any, backend: NativeBackend, config: Any, authorised, error, read_body,
                        admin=None) -> None:
    """Add the native routes to `create_app`'s FastAPI app (same key check, limits, error format;
    `admin` checks the weight routes' key, default `authorised`)."""
    from starlette.concurrency import run_in_threadpool

    denied = "missing or wrong bearer key (send 'Authorization: Bearer <key>')"

    @app.post("/generate")
    async def generate(request: Request):
        if not authorised(request):
            return error(401, denied)
        try:
            req = parse_generate_request(await read_body(request, config.max_request_bytes), config)
            return await run_in_threadpool(backend.generate, req, config.max_prompt_tokens)
        except RequestError as e:
            return error(e.status, e.message, e.param, e.code)

    mount_weight_routes(app, WeightUpdater(backend), config, authorised, error, read_body, admin)

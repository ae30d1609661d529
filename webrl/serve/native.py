"""`webrl serve`'s SGLang-native routes: token-in/token-out generation and in-place weight updates.

    POST /generate                 SGLang `GenerateReqInput` subset -> `{"text", "output_ids", "meta_info"}`
    weight updates, GET /get_model_info   webrl.serve.weights
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

Weight updates and `/get_model_info` are `webrl.serve.weights`'s.
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

from webrl.serve.protocol import (RequestError, check_keys, decode_image_url, int_field, int_list, json_object,
                                  number_field)
from webrl.serve.weights import WeightUpdater, mount_weight_routes
from webrl.types import Image

GENERATE_FIELDS = ("input_ids", "image_data", "sampling_params", "return_logprob", "logprob_start_len",
                   "top_logprobs_num", "stream", "rid", "webrl_image_pixels")
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
    pixel_bounds: Optional[tuple[int, int]] = None
    """(min_pixels, max_pixels) from `webrl_image_pixels`; None = the checkpoint's."""
    rid: str = ""


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
        s.max_new_tokens = int_field(params["max_new_tokens"], "sampling_params.max_new_tokens", 1)
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
    for name, allowed in (("stream", (None, False)), ("logprob_start_len", (None, -1)), ("top_logprobs_num", (None, 0))):
        if obj.get(name) not in allowed:
            raise RequestError(400, f"{name} must be one of {[a for a in allowed if a is not None]} here, got "
                                    f"{obj[name]!r}", name)
    bounds = None
    if obj.get("webrl_image_pixels") is not None:
        px = json_object(obj["webrl_image_pixels"], "webrl_image_pixels")
        check_keys(px, ("min_pixels", "max_pixels"), "webrl_image_pixels")
        low = int_field(px.get("min_pixels"), "webrl_image_pixels.min_pixels", 1)
        high = int_field(px.get("max_pixels"), "webrl_image_pixels.max_pixels", low)
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

def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [] if value is None else [value]


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

    mount_weight_routes(app, WeightUpdater(backend), config, authorised, error, read_body)

"""`ServerEngine`: the `Engine` protocol (act + weight loading) over an inference server's native
`/generate`, token-in/token-out.

The prompt is rendered and tokenised here by webrl's own code (`PromptBuilder` and
`GeneratorPolicy.prompt_ids`, the same ids the in-process engine feeds its model, image pads
expanded), sent as `input_ids` with the screenshots as data URLs, and the server answers with the
sampled ids and their log-probs. Nothing is re-tokenised: the learner trains on exactly what was
sampled. The response text is decoded locally and parsed by the prompt's action format.

Protocol: SGLang's native API, read in sgl-project/sglang at commits 001067ff (managers/io_struct.py,
`GenerateReqInput`, `UpdateWeightFromDiskReqInput`) and 0025436e (entrypoints/http_server.py), and
the token_in_token_out_vlm_server example (processor-expanded `input_ids` + `image_data`). Fields
relied on:

    POST /generate  input_ids, image_data (data URLs), return_logprob: true, logprob_start_len: -1,
                    sampling_params {temperature (0 = greedy), top_p, top_k (-1 = off), max_new_tokens,
                    stop_token_ids, skip_special_tokens, no_stop_trim}
        answer      meta_info.output_token_logprobs [[logprob, token_id, text|null], ...] (the ids and
                    log-probs used), output_ids (checked against them), meta_info.finish_reason.type
                    ("abort" is an error), meta_info.prompt_tokens (must equal len(input_ids)),
                    meta_info.weight_version (must equal the version last loaded, when given)
    POST /update_weights_from_disk  {model_path, weight_version} -> 200 {success, message}
    GET  /get_model_info            weight_version (read back after each update)
    GET  /health                    200
    meta_info.cached_tokens          prompt tokens the server's prefix (radix) cache reused, when given
                                     (SGLang's tokenizer_manager fills it; `webrl serve` reports 0)

`webrl serve` (`webrl.serve.native`) speaks the same subset on the transformers backend.

Log-probs: SGLang reports log softmax(logits / T) before top-p / top-k filtering (leave
SGLANG_RETURN_ORIGINAL_LOGPROB unset) and T = 1 log-probs for greedy, which is what
`GeneratorPolicy` records. vLLM's OpenAI routes take token ids but not together with images, so
its offline engine (not this HTTP engine) is the way there.

Departures from the in-process engine: the vision placeholders are not masked on the server (no
portable SGLang field does it); trained checkpoints give them ~0 mass, and a response holding one
is refused (the rollout retries) rather than sent to the learner. Pixel bounds: the prompt's
min/max pixels travel as `webrl_image_pixels` (a webrl field; SGLang ignores it), so an SGLang
server must be started with the same bounds in its checkpoint's preprocessor config; a mismatch
shows as a prompt length or image-token error, never as silently different pixels.

Servers that are down: a request whose server cannot be reached (connection refused or dropped,
not a timeout) or answers with stale weights goes to the next URL; when every server is so, it
keeps trying, every 0.5 s, for `down_wait_s` (a launched server being restarted and reloading
its last weights, `webrl.rollout.server_launcher`), then fails the step. Generation is
stateless, so sending a dropped request again is safe; a stale answer is never used.

Servers can be started by the user (`rollout.server.urls`) or by the run
(`rollout.server.launch`, `webrl.rollout.server_launcher`), never both.
"""
from __future__ import annotations

import base64
import itertools
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from webrl.chat.tokens import STOP_TOKENS, VISION_TOKENS
from webrl.policy.generator import GeneratorConfig, GeneratorPolicy
from webrl.policy.types import Decision, DecisionStats, PolicyRequest
from webrl.types import Image


class ServerEngineError(RuntimeError):
    """A server that is unreachable, slow, failing or answering something malformed (the message
    names the URL and the field). The rollout's retry logic treats it as a failed step."""


class ServerUnreachableError(ServerEngineError):
    """The server could not be reached or dropped the connection (down or restarting)."""


class ServerStaleError(ServerEngineError):
    """The server answered with other weights than this engine loaded (a restarted server
    before its launcher reloaded the last weights, or someone else's update)."""


def reusable_prefix(cached_ids: Sequence[Any], prompt_ids: Sequence[Any]) -> int:
    """Tokens at the start of `prompt_ids` a prefix (radix) cache holding `cached_ids` could skip:
    their longest common prefix. For turn t of an episode, `cached_ids` is turn t-1's prompt ids
    followed by its response ids (what the server computed last for this episode). Pass
    `image_keyed` sequences so that two images of one size (same pad ids) do not match."""
    n = 0
    for a, b in zip(cached_ids, prompt_ids):
        if a != b:
            break
        n += 1
    return n


def image_keyed(ids: Sequence[int], images: Sequence[Image], pad_id: int) -> list[Any]:
    """`ids` with the k-th run of `pad_id` tokens keyed by the k-th image's bytes, as SGLang's
    radix cache keys image tokens by image content (a different screenshot never matches)."""
    out, k, previous = [], -1, None
    for t in ids:
        if t == pad_id:
            k += previous != pad_id
            out.append((t, hash(images[k].data) if k < len(images) else None))
        else:
            out.append(t)
        previous = t
    return out


def image_data_url(image: Image) -> str:
    return f"data:image/{image.format};base64,{base64.b64encode(image.data).decode()}"


class ServerEngine:
    """Decides requests on one or more SGLang-native servers (round robin, one `/generate` per
    request, at most `max_concurrency` in flight); `load_weights_from_disk` updates them all."""

    def __init__(self, urls: Sequence[str], processor: Any, generator: Optional[GeneratorConfig] = None,
                 family: str = "qwen2.5-vl", timeout_s: float = 300.0, max_concurrency: int = 16,
                 send_pixel_bounds: bool = True, api_key: str = "", down_wait_s: float = 0.0):
        import httpx

        if isinstance(urls, str) or not urls:
            raise ValueError(f"ServerEngine.urls must be a non-empty list of base URLs, got {urls!r}")
        if not timeout_s > 0 or max_concurrency < 1:
            raise ValueError(f"ServerEngine needs timeout_s > 0 and max_concurrency >= 1, "
                             f"got {timeout_s}, {max_concurrency}")
        self.urls = [u.rstrip("/") for u in urls]
        # The prompt half of the in-process policy (no model): same builder, prompt ids, stop ids.
        self.prompts = GeneratorPolicy(None, processor, generator or GeneratorConfig(), family)
        self.tokenizer = self.prompts.tokenizer
        if down_wait_s < 0:
            raise ValueError(f"ServerEngine needs down_wait_s >= 0, got {down_wait_s}")
        self.timeout_s, self.send_pixel_bounds, self.down_wait_s = timeout_s, send_pixel_bounds, down_wait_s
        vocab = self.tokenizer.get_vocab()
        self.vision_ids = {vocab[t] for t in VISION_TOKENS if t in vocab}
        self.weight_version: Optional[str] = None
        """The version last loaded through this engine (None: whatever the servers started with)."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(timeout=timeout_s, headers=headers)
        self.pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="webrl-server-engine")
        self._next = itertools.count()
        self._lock = threading.Lock()

    # -- the request -----------------------------------------------------------------------------
    def sampling_params(self) -> dict:
        """`SamplingConfig` in SGLang's names: greedy -> temperature 0, top_k 0 (off) -> -1."""
        s = self.prompts.config.sampling
        return {"temperature": 0.0 if s.greedy else s.temperature, "top_p": 1.0 if s.greedy else s.top_p,
                "top_k": -1 if s.greedy or s.top_k == 0 else s.top_k, "max_new_tokens": s.max_new_tokens,
                "stop_token_ids": list(self.prompts.stop_ids), "skip_special_tokens": False, "no_stop_trim": True}

    def request_body(self, prompt_ids: list[int], images: Sequence[Image]) -> dict:
        body = {"input_ids": list(prompt_ids), "sampling_params": self.sampling_params(),
                "return_logprob": True, "logprob_start_len": -1}
        if images:
            body["image_data"] = [image_data_url(im) for im in images]
            if self.send_pixel_bounds:
                cfg = self.prompts.config.prompt
                body["webrl_image_pixels"] = {"min_pixels": cfg.min_pixels, "max_pixels": cfg.max_pixels}
        return body

    # -- acting ----------------------------------------------------------------------------------
    def act(self, requests: Sequence[PolicyRequest]) -> list[Decision]:
        return list(self.pool.map(self._act_one, requests))

    def _act_one(self, request: PolicyRequest) -> Decision:
        t0 = time.perf_counter()
        prompt = self.prompts.builder.render(request)
        prompt_ids = self.prompts.prompt_ids(prompt)
        with self._lock:
            first = next(self._next)
        body = self.request_body(prompt_ids, prompt.images)
        ids, logprobs, cached = self._generate(body, first, len(prompt_ids))
        ids, finish = self.prompts._cut(ids)  # the in-process engine's own rule
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        for tok in STOP_TOKENS[1:]:  # <|im_end|> / <|endoftext|> are frame, not content (as in-process)
            text = text.removesuffix(tok)
        stats = DecisionStats(prompt_tokens=len(prompt_ids), response_tokens=len(ids),
                              latency_s=time.perf_counter() - t0, history_turns=len(request.history),
                              history_dropped=prompt.history_dropped, images=len(prompt.images),
                              over_budget=prompt.over_budget, finish_reason=finish, cached_tokens=cached)
        return Decision(parsed=self.prompts.builder.format.parse(text, prompt.geometry), response_text=text,
                        prompt_ids=prompt_ids, response_ids=ids, logprobs=logprobs[:len(ids)],
                        images=list(prompt.images), stats=stats)

    def _generate(self, body: dict, first: int, prompt_len: int) -> tuple[list[int], list[float], int]:
        """`_read_tokens` of the first server, from `first` on round robin, that answers `body`
        well. A failing server passes the request on; when every server is unreachable it tries
        again until `down_wait_s` has passed since the first try."""
        deadline = time.monotonic() + self.down_wait_s
        while True:
            errors, down = [], 0
            for k in range(len(self.urls)):
                url = self.urls[(first + k) % len(self.urls)]
                try:
                    return self._read_tokens(url, self._post(url, "/generate", body), prompt_len)
                except ServerEngineError as e:
                    errors.append(str(e))
                    down += isinstance(e, (ServerUnreachableError, ServerStaleError))
            if down < len(self.urls) or time.monotonic() >= deadline:
                waited = f" (still down or stale after down_wait_s={self.down_wait_s:g} s)" if down == len(
                    self.urls) and self.down_wait_s else ""
                raise ServerEngineError(f"every server failed this request{waited}: {'; '.join(errors)}")
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    def _read_tokens(self, url: str, answer: Any, prompt_len: int) -> tuple[list[int], list[float], int]:
        """(sampled ids, their log-probs, prompt tokens served from the server's prefix cache)
        from a `/generate` answer, checked field by field."""
        where = f"{url}/generate"
        meta = answer.get("meta_info") if isinstance(answer, dict) else None
        if not isinstance(meta, dict):
            raise ServerEngineError(f"{where}: the answer has no 'meta_info' object: {str(answer)[:200]}")
        finish = meta.get("finish_reason")
        if isinstance(finish, dict) and finish.get("type") == "abort":
            raise ServerEngineError(f"{where}: the request was aborted: {finish.get('message', '')}")
        entries = meta.get("output_token_logprobs")
        if not isinstance(entries, list) or not all(
                isinstance(e, (list, tuple)) and len(e) >= 2 and isinstance(e[1], int)
                and isinstance(e[0], (int, float)) for e in entries):
            raise ServerEngineError(f"{where}: meta_info.output_token_logprobs must be a list of "
                                    f"[logprob, token_id, text], got {str(entries)[:200]}")
        ids, logprobs = [int(e[1]) for e in entries], [float(e[0]) for e in entries]
        output_ids = answer.get("output_ids")
        # output_ids may or may not repeat the final stop token; the log-prob entries always hold it.
        if output_ids is not None and output_ids not in (ids, ids[:-1]):
            raise ServerEngineError(f"{where}: output_ids {output_ids[:8]}... disagree with the ids of "
                                    f"meta_info.output_token_logprobs {ids[:8]}...")
        if meta.get("prompt_tokens") is not None and meta["prompt_tokens"] != prompt_len:
            raise ServerEngineError(f"{where}: meta_info.prompt_tokens is {meta['prompt_tokens']} for "
                                    f"{prompt_len} input_ids (did the server re-expand the image tokens? check "
                                    f"its min/max pixels against generator.prompt)")
        version = meta.get("weight_version")
        if self.weight_version is not None and version is not None and str(version) != self.weight_version:
            raise ServerStaleError(f"{where}: meta_info.weight_version is {version!r}, but this engine loaded "
                                    f"{self.weight_version!r} (was the server updated by someone else?)")
        if self.vision_ids.intersection(ids):
            raise ServerEngineError(f"{where}: the response holds a vision placeholder token "
                                    f"({sorted(self.vision_ids.intersection(ids))}); refusing the sample")
        cached = meta.get("cached_tokens")
        if cached is not None and (isinstance(cached, bool) or not isinstance(cached, int)
                                   or not 0 <= cached <= prompt_len):
            raise ServerEngineError(f"{where}: meta_info.cached_tokens must be an integer in [0, {prompt_len}], "
                                    f"got {cached!r}")
        return ids, logprobs, cached or 0

    # -- weights ---------------------------------------------------------------------------------
    def note_weights(self, version: str) -> None:
        """Another engine of the run has just loaded `version` into these servers: expect it."""
        self.weight_version = str(version)

    def load_weights(self, weights: Any, version: Optional[int | str] = None) -> None:
        """A checkpoint folder (str / PathLike) -> `load_weights_from_disk`. A state dict cannot
        reach a server over this protocol."""
        if isinstance(weights, (str, os.PathLike)):
            self.load_weights_from_disk(os.fspath(weights), version)
            return
        kind = "a state dict" if isinstance(weights, Mapping) else type(weights).__name__
        raise NotImplementedError(f"ServerEngine.load_weights got {kind}; an inference server loads weights from "
                                  f"a checkpoint folder: save the learner's weights with save_pretrained and pass "
                                  f"the folder path (or call load_weights_from_disk(path, version))")

    def load_weights_from_disk(self, path: str, version: Optional[int | str] = None) -> str:
        """Every server loads `path` in place, stamped `version` (read back from /get_model_info).
        Returns the version the servers report."""
        body = {"model_path": path}
        if version is not None:
            body["weight_version"] = str(version)
        reported = list(self.pool.map(lambda url: self._update_one(url, body), self.urls))
        if len(set(reported)) != 1:
            raise ServerEngineError(f"servers report different weight versions after the update: "
                                    f"{dict(zip(self.urls, reported))}")
        self.weight_version = reported[0]
        return reported[0]

    def _update_one(self, url: str, body: dict) -> str:
        answer = self._post(url, "/update_weights_from_disk", body)
        if not isinstance(answer, dict) or answer.get("success") is not True:
            raise ServerEngineError(f"{url}/update_weights_from_disk: 'success' is not true: {str(answer)[:300]}")
        info = self._request(url, "GET", "/get_model_info")
        version = info.get("weight_version") if isinstance(info, dict) else None
        if version is None:
            raise ServerEngineError(f"{url}/get_model_info: no 'weight_version' in {str(info)[:200]}")
        if "weight_version" in body and str(version) != body["weight_version"]:
            raise ServerEngineError(f"{url}/get_model_info: weight_version is {version!r} after loading "
                                    f"{body['weight_version']!r}")
        return str(version)

    def health(self) -> None:
        """Raise `ServerEngineError` unless every server answers GET /health with 200."""
        for url in self.urls:
            self._request(url, "GET", "/health", want_json=False)

    # -- HTTP ------------------------------------------------------------------------------------
    def _post(self, url: str, path: str, body: dict) -> Any:
        return self._request(url, "POST", path, body)

    def _request(self, url: str, method: str, path: str, body: Optional[dict] = None, want_json: bool = True) -> Any:
        import httpx

        where = f"{url}{path}"
        try:
            r = self.client.request(method, where, json=body)
        except httpx.TimeoutException:
            raise ServerEngineError(f"{where}: no answer within {self.timeout_s} s (timeout_s)") from None
        except httpx.HTTPError as e:  # refused, reset, dropped mid-answer: the server is down
            raise ServerUnreachableError(f"{where}: server unreachable ({type(e).__name__}: {e})") from None
        if r.status_code != 200:
            raise ServerEngineError(f"{where}: HTTP {r.status_code}: {_error_message(r)}")
        if not want_json:
            return None
        try:
            return r.json()
        except ValueError:
            raise ServerEngineError(f"{where}: the answer is not JSON: {r.text[:200]!r}") from None

    def close(self) -> None:
        self.pool.shutdown(wait=False)
        self.client.close()


def _error_message(response: Any) -> str:
    """The message of an error body in SGLang's ({"message"}) or OpenAI's ({"error": {"message"}}) shape."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and "message" in inner:
            return str(inner["message"])[:300]
        if "message" in body:
            return str(body["message"])[:300]
    return str(body)[:300]


@dataclass
class ServerEngineFactory:
    """Picklable recipe for a `ServerEngine`: server URLs, the checkpoint folder whose processor
    renders prompts (the servers' model), generator config. No policy wrappers: the heads cascade
    and LOCI read the model's hidden states, which a server does not return."""

    urls: Sequence[str]
    model_path: str
    """The checkpoint the servers were started from (a folder or a shipped `webrl:` name); only its
    processor is read here. A pointer checkpoint (action_format=pointer) needs a server that runs
    its element pointer, i.e. `webrl serve`; SGLang serves plain Qwen-VL checkpoints."""
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    timeout_s: float = 300.0
    max_concurrency: int = 16
    api_key_env: str = ""
    """Environment variable holding the servers' bearer key (empty: none)."""
    down_wait_s: float = 0.0
    """How long a request retries while every server is unreachable (`ServerEngine`)."""

    def __call__(self) -> ServerEngine:
        from transformers import AutoConfig

        from webrl.models.loading import model_family
        from webrl.models.processor import load_processor

        from webrl.models.shipped import resolve_shipped

        path = resolve_shipped(str(self.model_path))
        config = AutoConfig.from_pretrained(path)
        processor = load_processor(path, config.model_type)
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        return ServerEngine(list(self.urls), processor, self.generator, model_family(config), self.timeout_s,
                            self.max_concurrency, api_key=key, down_wait_s=self.down_wait_s)

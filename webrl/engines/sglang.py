"""`ServerBackend`: the generator backend interface (webrl/policy/backend.py) over inference
servers' SGLang-native `/generate`; `ServerEngine`: the run's policy stack over it.

The prompt is rendered and tokenised by webrl's own code (`GeneratorPolicy`), exactly as for the
in-process model; the server samples, scores forced ids and returns hidden states. The policy
wrappers (cascade, LOCI, skills) therefore run over a server as they do in process.

Protocol, read in sgl-project/sglang at 001067ff (managers/io_struct.py `GenerateReqInput`,
managers/scheduler.py, managers/tokenizer_manager.py, managers/schedule_batch.py, server_args.py)
and the files named below; fields relied on:

    POST /generate  input_ids, image_data (data URLs), return_logprob: true, logprob_start_len
                    (P - 1 to score forced ids, else -1), return_hidden_states (the heads),
                    extra_key (the prefix-cache namespace: radix-cache entries of other keys never
                    match, mem_cache/radix_cache.py `RadixKey(token_ids, extra_key)`),
                    sampling_params {temperature (0 = greedy), top_p, top_k (-1 = off), max_new_tokens,
                    stop_token_ids, skip_special_tokens, no_stop_trim, sampling_seed}
        answer      meta_info.output_token_logprobs [[logprob, token_id, text|null], ...];
                    meta_info.input_token_logprobs from position logprob_start_len on, entry 0
                    [None, ids[L]] and entry k log p(ids[L + k] | ids[:L + k]), NOT temperature
                    scaled (logprob_result_processor.py at 17b67163; logits_processor.py at 5993251f);
                    meta_info.hidden_states[0]: (E, H) rows of the E positions computed in the
                    prefill (after the final norm; the prefix SGLang served from its cache has no
                    rows: batch_result_processor.py at 003ddbce); output_ids, finish_reason ("abort"
                    is an error), prompt_tokens (after image expansion), cached_tokens, weight_version
    POST /update_weights_from_disk  {model_path, weight_version} -> {success, message}
    GET  /model_info                weight_version (`/get_model_info` is deprecated)
    GET  /health                    200

Image prompts: SGLang's newest Qwen-VL processors take `input_ids` without decoding them and
expand each single `<|image_pad|>` to the image's token count (multimodal/mm_token_expansion.py
at 749962b6, `expand_token_placeholders`: a count that does not match the images is an error);
older ones decode pre-expanded ids to text and re-tokenise. So every image's pad run is sent
collapsed to one pad, and the server must be started with the prompt's pixel bounds
(`--mm-process-config '{"image": {"min_pixels": ..., "max_pixels": ...}}'`, which the launcher
passes). The answer's `prompt_tokens` must equal the length of webrl's expanded ids, and the
forced ids' entries in input_token_logprobs must name webrl's ids: the learner trains on the ids
the server computed, or the request fails naming the difference.

Log-probs: SGLang reports log softmax(logits / T) of sampled tokens (SGLANG_RETURN_ORIGINAL_LOGPROB
unset) and T = 1 for greedy, as `GeneratorPolicy` records. Forced ids are scored at T = 1 only:
at another temperature `Generated.forced_logprobs` is None and the learner recomputes them.
Hidden states: the final layer only; `max_new_tokens` is at least 1 when they are asked (the
newest SGLang returns none for a prefill-only request).

Departures from the in-process engine: the vision placeholders are not masked on the server (no
portable SGLang field does it); trained checkpoints give them ~0 mass, and a response holding one
is refused (the rollout retries) rather than sent to the learner.

Servers that are down: a request whose server cannot be reached (connection refused or dropped,
not a timeout) or answers with stale weights goes to the next URL; when every server is so, it
keeps trying, every 0.5 s, for `down_wait_s` (a launched server being restarted and reloading
its last weights, `webrl.engines.launcher`), then fails the step. Generation is
stateless, so sending a dropped request again is safe; a stale answer is never used.
"""
from __future__ import annotations

import base64
import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from webrl.models.tokens import VISION_TOKENS
from webrl.policy.backend import ENGINE_CAPABILITIES, GenerateRequest, Generated, cut_at_stop
from webrl.policy.generator import GeneratorConfig, GeneratorPolicy
from webrl.policy.stack import PolicyConfig
from webrl.engines.engine import GeneratorEngine
from webrl.engines.server_weights import ServerWeights
from webrl.chat.server_http import (ServerEngineError, ServerHTTP, env_key, ServerStaleError, ServerUnreachableError,
                                       check_output)
from webrl.types import Image

__all__ = ["ServerBackend", "ServerEngine", "ServerEngineError", "ServerEngineFactory", "ServerStaleError",
           "ServerUnreachableError", "collapse_image_pads"]


def image_data_url(image: Image) -> str:
    return f"data:image/{image.format};base64,{base64.b64encode(image.data).decode()}"


def collapse_image_pads(ids: Sequence[int], pad_id: int) -> list[int]:
    """`ids` with every run of `pad_id` cut to one pad (what SGLang expands per image)."""
    out: list[int] = []
    for t in ids:
        if t == pad_id and out and out[-1] == pad_id:
            continue
        out.append(t)
    return out


class ServerBackend(ServerWeights):
    """Answers `GenerateRequest`s on SGLang-native servers (round robin, one `/generate` per row,
    at most `max_concurrency` in flight); `load_weights_from_disk` updates them all."""

    capabilities = ENGINE_CAPABILITIES["server"]
    generate_path = "/generate"
    """The route one row is posted to (a subclass speaks another server's protocol)."""

    def __init__(self, urls: Sequence[str], processor: Any, model_config: Any = None, timeout_s: float = 300.0,
                 max_concurrency: int = 16, api_key: str = "", down_wait_s: float = 0.0, admin_api_key: str = ""):
        if isinstance(urls, str) or not urls:
            raise ValueError(f"ServerEngine.urls must be a non-empty list of base URLs, got {urls!r}")
        if not timeout_s > 0 or max_concurrency < 1:
            raise ValueError(f"ServerEngine needs timeout_s > 0 and max_concurrency >= 1, "
                             f"got {timeout_s}, {max_concurrency}")
        if down_wait_s < 0:
            raise ValueError(f"ServerEngine needs down_wait_s >= 0, got {down_wait_s}")
        self.http = ServerHTTP(urls, timeout_s, api_key, admin_api_key)
        self.urls, self.model_config, self.down_wait_s = self.http.urls, model_config, down_wait_s
        vocab = processor.tokenizer.get_vocab()
        self.image_pad_id = vocab["<|image_pad|>"]
        self.vision_ids = {vocab[t] for t in VISION_TOKENS if t in vocab}
        self.init_weights(self.http.urls)
        self.pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="webrl-server-engine")
        self._next = itertools.count()
        self._lock = threading.Lock()

    # -- the request -----------------------------------------------------------------------------
    def body(self, r: GenerateRequest) -> dict:
        """The `/generate` body of one row (SGLang's names: greedy -> temperature 0, top_k 0 -> -1)."""
        new = max(r.max_new_tokens, 1 if r.hidden_layer is not None else 0)
        params = {"temperature": 0.0 if r.greedy else r.temperature, "top_p": 1.0 if r.greedy else r.top_p,
                  "top_k": -1 if r.greedy or r.top_k == 0 else r.top_k, "max_new_tokens": new,
                  "stop_token_ids": list(r.stop_ids), "skip_special_tokens": False, "no_stop_trim": True}
        if r.seed is not None:
            params["sampling_seed"] = int(r.seed)
        body = {"input_ids": collapse_image_pads(r.sequence, self.image_pad_id), "sampling_params": params,
                "return_logprob": True, "logprob_start_len": len(r.prompt_ids) - 1 if r.forced_ids else -1}
        if r.images:
            body["image_data"] = [image_data_url(im) for im in r.images]
        if r.hidden_layer is not None:
            body["return_hidden_states"] = True
        if r.cache_key is not None:
            body["extra_key"] = r.cache_key
        return body

    def generate(self, requests: Sequence[GenerateRequest]) -> list[Generated]:
        return list(self.pool.map(self._one, requests))

    def _one(self, r: GenerateRequest) -> Generated:
        if r.hidden_layer not in (None, -1) and r.hidden_layer != _num_layers(self.model_config):
            raise ServerEngineError(f"hidden states of layer {r.hidden_layer} were asked, but an inference server "
                                    f"returns the final layer's only (layer -1)")
        with self._lock:
            first = next(self._next)
        answer, url = self._generate(self.body(r), first)
        return self.read(url, answer, r)

    def _generate(self, body: dict, first: int) -> tuple[Any, str]:
        """The answer of the first server, from `first` on round robin, that answers `body` well.
        A failing server passes the request on; when every server is unreachable it tries again
        until `down_wait_s` has passed since the first try."""
        deadline = time.monotonic() + self.down_wait_s
        while True:
            errors, down = [], 0
            for k in range(len(self.urls)):
                url = self.urls[(first + k) % len(self.urls)]
                try:
                    answer = self.http.post(url, self.generate_path, body)
                    self.check(url, answer)
                    return answer, url
                except ServerEngineError as e:
                    errors.append(str(e))
                    down += isinstance(e, (ServerUnreachableError, ServerStaleError))
            if down < len(self.urls) or time.monotonic() >= deadline:
                waited = f" (still down or stale after down_wait_s={self.down_wait_s:g} s)" if down == len(
                    self.urls) and self.down_wait_s else ""
                raise ServerEngineError(f"every server failed this request{waited}: {'; '.join(errors)}")
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    def check(self, url: str, answer: Any) -> None:
        """Raise `ServerEngineError` (`ServerStaleError`: other weights) unless `answer` is usable;
        a stale answer first gets the server its weights back (`restore`), then is retried."""
        try:
            check_output(url, answer, self.weight_version)
        except ServerStaleError:
            self.restore(url, {str(answer["meta_info"].get("weight_version"))})
            raise

    def read(self, url: str, answer: dict, r: GenerateRequest) -> Generated:
        """A checked `Generated` from one answer (`check_output` has read its generic fields)."""
        where, meta, seq = f"{url}/generate", answer["meta_info"], r.sequence
        entries = meta["output_token_logprobs"]
        ids, logprobs = [int(e[1]) for e in entries], [float(e[0]) for e in entries]
        ids, finish = cut_at_stop(ids[:r.max_new_tokens], r.stop_ids)  # the in-process engine's own rule
        logprobs = logprobs[:len(ids)]
        if meta.get("prompt_tokens") is not None and meta["prompt_tokens"] != len(seq):
            raise ServerEngineError(f"{where}: meta_info.prompt_tokens is {meta['prompt_tokens']} for webrl's {len(seq)} "
                                    f"ids (does the server expand the images at other pixel bounds than "
                                    f"generator.prompt's min_pixels={r.pixel_bounds[0]} / max_pixels={r.pixel_bounds[1]}? "
                                    f"start it with them: --mm-process-config)")
        if self.vision_ids.intersection(ids):
            raise ServerEngineError(f"{where}: the response holds a vision placeholder token "
                                    f"({sorted(self.vision_ids.intersection(ids))}); refusing the sample")
        cached = meta.get("cached_tokens") or 0
        if isinstance(cached, bool) or not isinstance(cached, int) or not 0 <= cached <= len(seq):
            raise ServerEngineError(f"{where}: meta_info.cached_tokens must be an integer in [0, {len(seq)}], "
                                    f"got {cached!r}")
        forced = self._forced(where, meta, r) if r.forced_ids else None
        hidden, start = self._hidden(where, meta, r, cached) if r.hidden_layer is not None else (None, 0)
        finish = finish if r.max_new_tokens else "none"
        return Generated(ids, logprobs, finish, forced, hidden, start, len(seq), cached, meta.get("weight_version"))

    def _forced(self, where: str, meta: dict, r: GenerateRequest) -> Optional[list[float]]:
        """The forced ids' log-probs from input_token_logprobs (from position P - 1 on), checked id
        by id; None when the row wants them at a temperature other than 1."""
        entries = meta.get("input_token_logprobs")
        P, want = len(r.prompt_ids), [r.prompt_ids[-1], *r.forced_ids]
        if not isinstance(entries, list) or len(entries) < len(want) or not all(
                isinstance(e, (list, tuple)) and len(e) >= 2 for e in entries):
            raise ServerEngineError(f"{where}: meta_info.input_token_logprobs must hold {len(want)} [logprob, token_id] "
                                    f"entries from position {P - 1} on, got {str(entries)[:200]}")
        got = [int(e[1]) for e in entries[:len(want)]]
        if got != want:
            raise ServerEngineError(f"{where}: the server's prompt ids from position {P - 1} are {got[:8]}..., webrl's "
                                    f"{want[:8]}...: the server tokenised the prompt differently; refusing the sample")
        if abs(r.score_temperature - 1.0) > 1e-9:
            return None
        return [float(e[0]) for e in entries[1:len(want)]]

    def _hidden(self, where: str, meta: dict, r: GenerateRequest, cached: int) -> tuple[Any, int]:
        import torch

        states = meta.get("hidden_states")
        rows = states[0] if isinstance(states, list) and states else None
        if not isinstance(rows, list) or not rows or not isinstance(rows[0], list):
            raise ServerEngineError(f"{where}: no meta_info.hidden_states rows (start SGLang with "
                                    f"--enable-return-hidden-states), got {str(states)[:120]}")
        hidden = torch.tensor(rows, dtype=torch.float32)  # (E, H)
        start = len(r.sequence) - hidden.shape[0]
        if start < 0 or (cached and start != cached):
            raise ServerEngineError(f"{where}: {hidden.shape[0]} hidden-state rows for {len(r.sequence)} ids, "
                                    f"{cached} of them cached")
        return hidden, start

    # -- weights: ServerWeights (webrl.engines.server_weights) ----------------------------------

    def health(self) -> None:
        """Raise `ServerEngineError` unless every server answers GET /health with 200."""
        for url in self.urls:
            self.http.request(url, "GET", "/health", want_json=False)

    def close(self) -> None:
        self.pool.shutdown(wait=False)
        self.http.close()


def _num_layers(model_config: Any) -> Optional[int]:
    text = getattr(model_config, "text_config", model_config)
    return getattr(text, "num_hidden_layers", None)


class ServerEngine(GeneratorEngine):
    """The run's policy stack over a `ServerBackend`; weights reach the servers as a folder path
    (`load_weights`) or by broadcast (`webrl.learner.weight_broadcast.ServerTargets`, then `note_weights`)."""

    def __init__(self, urls: Sequence[str], processor: Any, generator: Optional[GeneratorConfig] = None,
                 family: str = "qwen2.5-vl", timeout_s: float = 300.0, max_concurrency: int = 16,
                 api_key: str = "", down_wait_s: float = 0.0, admin_api_key: str = "", model_config: Any = None,
                 policy: Optional[PolicyConfig] = None, protocol: str = "sglang", hidden_backend: Any = None):
        if protocol == "vllm":
            from webrl.engines.vllm import VLLMBackend

            backend: ServerBackend = VLLMBackend(urls, processor, model_config, timeout_s, max_concurrency, api_key,
                                                 down_wait_s, hidden_backend=hidden_backend)
        elif protocol == "sglang":
            backend = ServerBackend(urls, processor, model_config, timeout_s, max_concurrency, api_key, down_wait_s,
                                    admin_api_key)
        else:
            raise ValueError(f"ServerEngine.protocol must be 'sglang' or 'vllm', got {protocol!r}")
        super().__init__(GeneratorPolicy(backend, processor, generator or GeneratorConfig(), family),
                         policy or PolicyConfig())
        self.backend = backend

    @property
    def weight_version(self) -> Optional[str]:
        return self.backend.weight_version

    @weight_version.setter
    def weight_version(self, value: Optional[str]) -> None:
        self.backend.weight_version = value

    def load_weights_from_disk(self, path: str, version: Optional[int | str] = None) -> str:
        return self.backend.load_weights_from_disk(path, version)

    def health(self) -> None:
        self.backend.health()

    def close(self) -> None:
        self.backend.close()


@dataclass
class ServerEngineFactory:
    """Picklable recipe for a `ServerEngine`: server URLs, the checkpoint folder whose processor
    renders prompts (the servers' model), generator config and the policy wrapper stack."""

    urls: Sequence[str]
    model_path: str
    """The checkpoint the servers were started from (a folder or a shipped `webrl:` name); only its
    processor and config are read here. A pointer checkpoint (action_format=pointer) needs a server
    that runs its element pointer, i.e. `webrl serve`; SGLang serves plain Qwen-VL checkpoints."""
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    timeout_s: float = 300.0
    max_concurrency: int = 16
    api_key_env: str = ""
    """Environment variable holding the servers' bearer key (empty: none)."""
    down_wait_s: float = 0.0
    """How long a request retries while every server is unreachable (`ServerBackend`)."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    """Wrappers around the generator (`policy.wrappers`), as in process."""
    admin_api_key_env: str = ""
    """Environment variable holding the servers' admin key (weight routes; empty: none)."""
    protocol: str = "sglang"
    """What the servers speak: "sglang" (SGLang, `webrl serve`) or "vllm"."""
    dtype: str = "float32"
    """vllm with the cascade: the dtype of the in-process copy that gives the heads' hidden states."""

    def __call__(self) -> ServerEngine:
        from transformers import AutoConfig

        from webrl.models.loading import model_family
        from webrl.models.processor import load_processor
        from webrl.models.shipped import resolve_shipped

        path = resolve_shipped(str(self.model_path))
        config = AutoConfig.from_pretrained(path)
        processor = load_processor(path, config.model_type)
        hidden = None
        if self.protocol == "vllm" and "cascade" in self.policy.wrappers:
            # vLLM returns no hidden states: the heads read them from a copy of the weights here
            from webrl.models import load_model
            from webrl.engines.transformers import TransformersBackend

            model, _ = load_model(path, dtype=self.dtype)
            hidden = TransformersBackend(model, processor, max_batch_size=1)
        return ServerEngine(list(self.urls), processor, self.generator, model_family(config), self.timeout_s,
                            self.max_concurrency, api_key=env_key(self.api_key_env), down_wait_s=self.down_wait_s,
                            admin_api_key=env_key(self.admin_api_key_env),
                            model_config=config, policy=self.policy, protocol=self.protocol, hidden_backend=hidden)

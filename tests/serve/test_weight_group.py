"""`webrl serve`'s SGLang distributed weight routes over real HTTP: a learner-side rank 0 (this
process) forms a gloo group with the server, broadcasts new weights in flattened buckets, and
the server's /generate then answers exactly as a model holding those weights; every malformed
request is a 400 naming the field, and a refused update still drains its broadcast."""
import threading

import httpx
import pytest
import torch

from tests.reward.fixtures import SMALL_LIMITS
from webrl.learner.weight_broadcast import ServerTargets, WeightBroadcastGroup, host_store
from webrl.learner.weight_buckets import TensorSpec, dtype_name, plan_buckets
from webrl.serve import ServeConfig, ServerThread, create_app
from webrl.serve.native import NativeBackend, parse_generate_request


@pytest.fixture(scope="module")
def served(tiny_qwen25vl_path):
    """Its own engine (the session's tiny_engine must keep its weights for other tests)."""
    from webrl.serve import LocalChatEngine

    engine = LocalChatEngine.from_pretrained(tiny_qwen25vl_path, model_name="tiny")
    with ServerThread(create_app(engine, ServeConfig(**SMALL_LIMITS))) as server:
        yield server, engine


def post(server, path, payload):
    return httpx.post(server.url + path, json=payload, timeout=60)


def join_server(server, group_name):
    """Rank 0 here, the server as rank 1 (its /init_weights_update_group blocks until both joined)."""
    store = host_store("127.0.0.1", 30.0)
    targets = ServerTargets([server.url], group_name, timeout_s=60)
    answers = targets.init_group("127.0.0.1", store.port, "gloo")
    group = WeightBroadcastGroup.join("127.0.0.1", store.port, 0, 2, group_name=group_name, timeout_s=30, store=store)
    assert answers()[0]["success"] is True
    return group, targets


GREEDY = {"input_ids": None, "return_logprob": True, "sampling_params": {"temperature": 0, "max_new_tokens": 6}}


def greedy(server, ids):
    out = post(server, "/generate", {**GREEDY, "input_ids": ids}).json()
    return out["output_ids"], [e[0] for e in out["meta_info"]["output_token_logprobs"]], out["meta_info"]


@pytest.mark.slow
def test_after_a_distributed_update_generate_answers_as_a_model_with_those_weights(served, tiny_qwen25vl_path):
    from webrl.models import load_model

    server, engine = served
    ids = engine.processor.tokenizer("<|im_start|>user\nopen the cart<|im_end|>\n<|im_start|>assistant\n",
                                     add_special_tokens=False)["input_ids"]
    before_ids, before_logp, _ = greedy(server, ids)
    # new weights: every parameter moved by fixed noise (as one learner update would, only larger)
    g = torch.Generator().manual_seed(3)
    named = [(n, (p.detach() + 0.05 * torch.randn(p.shape, generator=g)).to(p.dtype))
             for n, p in engine.model.named_parameters()]
    specs = [TensorSpec(n, tuple(t.shape), dtype_name(t.dtype)) for n, t in named]
    bucket = 256 * 1024
    assert len(plan_buckets(specs, bucket)) > 2 and max(s.num_bytes for s in specs) > bucket

    group, targets = join_server(server, "train")  # sends checkpoint names; the server maps them back
    targets.weight_version = "run-1:v1"
    stats = group.send(iter(named), specs, bucket, announce=targets.announce)
    assert stats["buckets"] == len(plan_buckets(specs, bucket))
    own = dict(engine.model.named_parameters())
    assert all(torch.equal(own[n].detach(), t) for n, t in named)
    assert httpx.get(server.url + "/model_info").json()["weight_version"] == "run-1:v1"

    after_ids, after_logp, meta = greedy(server, ids)
    assert meta["weight_version"] == "run-1:v1" and (after_ids, after_logp) != (before_ids, before_logp)
    reference, processor = load_model(tiny_qwen25vl_path)
    with torch.no_grad():
        ref_params = dict(reference.named_parameters())
        for n, t in named:
            ref_params[n].copy_(t)
    expected = NativeBackend(reference, processor).generate(parse_generate_request(
        httpx.Request("POST", "/", json={**GREEDY, "input_ids": ids}).read(), ServeConfig(**SMALL_LIMITS)))
    assert after_ids == expected["output_ids"]
    assert after_logp == pytest.approx([e[0] for e in expected["meta_info"]["output_token_logprobs"]], abs=1e-5)

    # load_format null: one broadcast per tensor, in order; no weight_version keeps the version
    name, shape = "lm_head.weight", tuple(own["lm_head.weight"].shape)
    new = torch.full(shape, 0.5)
    answer = {}
    t = threading.Thread(target=lambda: answer.update(post(server, "/update_weights_from_distributed", {
        "names": [name], "dtypes": ["float32"], "shapes": [list(shape)], "group_name": "train"}).json()))
    t.start()
    group.broadcast(new)
    t.join()
    assert answer["success"] is True and torch.equal(own[name].detach(), new)
    assert httpx.get(server.url + "/model_info").json()["weight_version"] == "run-1:v1"

    # names the model lacks: the broadcast still completes, nothing changes, 400 naming "names"
    t = threading.Thread(target=lambda: answer.update(post(server, "/update_weights_from_distributed", {
        "names": ["no.such.weight"], "dtypes": ["float32"], "shapes": [[2]], "group_name": "train",
        "load_format": "flattened_bucket"}).json()))
    t.start()
    group.broadcast(torch.zeros(8, dtype=torch.uint8))
    t.join()
    assert answer["error"]["param"] == "names" and "nothing was changed" in answer["error"]["message"]
    # the module tree's spelling of a real weight: refused as SGLang's Qwen2.5-VL loader would
    tree_name = next(n for n in own if n.startswith("model.language_model."))
    t = threading.Thread(target=lambda: answer.update(post(server, "/update_weights_from_distributed", {
        "names": [tree_name], "dtypes": ["float32"], "shapes": [list(own[tree_name].shape)], "group_name": "train",
        "load_format": "flattened_bucket"}).json()))
    t.start()
    group.broadcast(torch.zeros(own[tree_name].numel() * 4, dtype=torch.uint8))
    t.join()
    assert answer["error"]["param"] == "names" and "checkpoint names" in answer["error"]["message"]
    assert post(server, "/destroy_weights_update_group", {"group_name": "train"}).json()["success"] is True


@pytest.mark.parametrize("path, payload, param, words", [
    ("/init_weights_update_group", {"master_address": "127.0.0.1", "master_port": 1, "rank_offset": 1,
                                    "world_size": 2}, "backend", "backend must be 'gloo' on webrl serve"),
    ("/init_weights_update_group", {"master_address": "127.0.0.1", "master_port": 1, "rank_offset": 2,
                                    "world_size": 2, "backend": "gloo"}, "rank_offset", "must be < world_size 2"),
    ("/init_weights_update_group", {"master_address": "h", "master_port": 1, "rank_offset": 1, "world_size": 2,
                                    "backend": "gloo", "ranks": 3}, "ranks", "unsupported field(s) ['ranks']"),
    ("/update_weights_from_distributed", {"names": ["a"], "dtypes": ["float32"], "shapes": [[2]],
                                          "group_name": "never"}, "group_name", "call /init_weights_update_group"),
    ("/update_weights_from_distributed", {"names": ["a"], "dtypes": ["float99"], "shapes": [[2]]},
     "dtypes", "dtypes[0]: unknown dtype 'float99'"),
    ("/update_weights_from_distributed", {"names": ["a", "b"], "dtypes": ["float32"], "shapes": [[2]]},
     "names", "same length"),
    ("/update_weights_from_distributed", {"names": ["a"], "dtypes": ["float32"], "shapes": [[2]],
                                          "load_format": "direct"}, "load_format", "null or 'flattened_bucket'"),
])
def test_malformed_weight_requests_are_400_naming_the_field(served, path, payload, param, words):
    server, _ = served
    r = post(server, path, payload)
    assert r.status_code == 400 and r.json()["error"]["param"] == param and words in r.json()["error"]["message"]

"""ServerEngine against `webrl serve`'s native routes over real HTTP on 127.0.0.1: greedy decisions
equal the in-process GeneratorPolicy's (ids exactly, log-probs within 1e-4), weight updates from a
folder change outputs and version, and every server failure is a clear error naming the URL."""
import base64
import dataclasses
import pickle
import socket
import time

import pytest
import torch

from tests.policy.helpers import PIXELS, episode, observation
from webrl.chat.local import LocalChatEngine
from webrl.models import load_model
from webrl.policy import GeneratorConfig, GeneratorPolicy, PolicyRequest, PromptConfig, SamplingConfig
from webrl.engines.sglang import ServerEngine, ServerEngineError, ServerEngineFactory
from webrl.serve import ServeConfig, ServerThread, create_app

FAMILIES = ["qwen2.5-vl", "qwen3-vl"]
LOGPROB_TOL = 1e-4  # fp32 on CPU: one forward pass unpadded (server) vs left-padded batch (in-process)


def serve_config(**kw):
    """`webrl serve` expanding images at the prompt's pixel bounds (SGLang: --mm-process-config)."""
    return ServeConfig(**{"max_new_tokens": 64, "default_max_tokens": 16, "image_min_pixels": PIXELS["min_pixels"],
                          "image_max_pixels": PIXELS["max_pixels"], **kw})


def generator_config(greedy=True, **sampling):
    return GeneratorConfig(prompt=PromptConfig(**PIXELS, num_screenshots=2),
                           sampling=SamplingConfig(greedy=greedy, **{"max_new_tokens": 12, **sampling}))


def requests(fmt):
    """With a screenshot (two sizes, with history) and without any (text only)."""
    turns, _ = episode(2, fmt)
    return [PolicyRequest(observation(0, size=(320, 200))),
            PolicyRequest(observation(2, size=(200, 320)), turns),
            PolicyRequest(observation(1, screenshot=None))]


@pytest.fixture(scope="module")
def served(tiny_model_paths):
    """family -> (server, in-process policy over the same model object)."""
    out = {}
    for family in FAMILIES:
        model, processor = load_model(tiny_model_paths[family])
        server = ServerThread(create_app(LocalChatEngine(model, processor, family), serve_config()))
        out[family] = (server.start(), GeneratorPolicy(model, processor, generator_config()))
    yield out
    for server, _ in out.values():
        server.stop()


def assert_same_decisions(remote, local):
    assert len(remote) == len(local)
    for r, l in zip(remote, local):
        assert r.prompt_ids == l.prompt_ids  # the exact ids, image pads included
        assert r.response_ids == l.response_ids and len(r.logprobs) == len(r.response_ids) >= 1
        assert torch.allclose(torch.tensor(r.logprobs), torch.tensor(l.logprobs), atol=LOGPROB_TOL, rtol=0), \
            (r.logprobs, l.logprobs)
        assert r.response_text == l.response_text and r.parsed == l.parsed
        assert (r.stats.prompt_tokens, r.stats.response_tokens, r.stats.images, r.stats.finish_reason) == \
            (l.stats.prompt_tokens, l.stats.response_tokens, l.stats.images, l.stats.finish_reason)
        assert r.images == l.images


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_decisions_equal_in_process(family, served):
    server, local = served[family]
    engine = ServerEngine([server.url], local.processor, generator_config(), family)
    reqs = requests(local.builder.format)
    remote = engine.act(reqs)
    assert [d.stats.images for d in remote] == [1, 2, 0]  # with and without images
    assert_same_decisions(remote, local.act(reqs))
    engine.close()


def test_seeded_sampled_decisions_equal_in_process(served):
    """The same seeds sample the same tokens through webrl serve as in process (the seed travels
    as sampling_seed); another seed samples others."""
    server, local = served["qwen2.5-vl"]
    config = generator_config(greedy=False, temperature=1.0)
    sampler = GeneratorPolicy(local.model, local.processor, config)
    engine = ServerEngine([server.url], local.processor, config, "qwen2.5-vl")
    reqs = [dataclasses.replace(r, seed=40 + i) for i, r in enumerate(requests(local.builder.format))]
    remote = engine.act(reqs)
    assert_same_decisions(remote, sampler.act(reqs))
    reseeded = engine.act([dataclasses.replace(r, seed=r.seed + 100) for r in reqs])
    assert [d.response_ids for d in reseeded] != [d.response_ids for d in remote]
    engine.close()


def test_factory_is_picklable_and_builds_the_same_prompts(served, tiny_qwen25vl_path):
    server, local = served["qwen2.5-vl"]
    factory = pickle.loads(pickle.dumps(ServerEngineFactory([server.url], tiny_qwen25vl_path, generator_config())))
    engine = factory()
    reqs = requests(local.builder.format)[:1]
    assert_same_decisions(engine.act(reqs), local.act(reqs))
    engine.close()


@pytest.fixture(scope="module")
def update_server(tmp_path_factory, tiny_qwen25vl_path):
    """A server of its own (its weights change) and a perturbed copy of the checkpoint."""
    model, processor = load_model(tiny_qwen25vl_path)
    folder = tmp_path_factory.mktemp("perturbed")
    copy, _ = load_model(tiny_qwen25vl_path)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in copy.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    copy.save_pretrained(folder)
    processor.save_pretrained(folder)
    with ServerThread(create_app(LocalChatEngine(model, processor, "tiny"), serve_config())) as s:
        yield s, processor, str(folder)


def test_weight_update_from_folder_changes_outputs_and_version(update_server):
    server, processor, folder = update_server
    engine = ServerEngine([server.url], processor, generator_config(), "qwen2.5-vl")
    reqs = requests(engine.generator.builder.format)[:2]
    before = engine.act(reqs)
    info = (lambda: engine.backend.http.request(server.url, "GET", "/model_info")["weight_version"])
    assert info() == "0"
    assert engine.load_weights(folder, version=3) is None and engine.weight_version == "3"
    assert info() == "3"
    after = engine.act(reqs)
    assert any(a.response_ids != b.response_ids for a, b in zip(after, before)) or not torch.allclose(
        torch.tensor(after[0].logprobs[:1]), torch.tensor(before[0].logprobs[:1]), atol=1e-3)
    # ... and they are the perturbed checkpoint's own in-process decisions
    model, proc = load_model(folder)
    assert_same_decisions(after, GeneratorPolicy(model, proc, generator_config()).act(reqs))
    # without a version the server counts on from the last one
    assert engine.load_weights_from_disk(folder) == "4"
    engine.close()


def test_weight_update_errors(update_server):
    server, processor, _ = update_server
    engine = ServerEngine([server.url], processor, generator_config(), "qwen2.5-vl")
    with pytest.raises(NotImplementedError, match="checkpoint folder"):
        engine.load_weights({"lm_head.weight": torch.zeros(1)})
    with pytest.raises(ServerEngineError, match=f"{server.url}/update_weights_from_disk: HTTP 400: model_path"):
        engine.load_weights("/nonexistent/checkpoint", version=9)
    engine.close()


# -- failures, against stub servers -----------------------------------------------------------------
class Stub:
    """A FastAPI app answering /generate with `reply` (a dict, a status, raw text, or a delay)."""

    def __init__(self):
        from fastapi import FastAPI, Request
        from fastapi.responses import JSONResponse, PlainTextResponse

        self.reply, self.status, self.raw, self.delay_s, self.bodies = {}, 200, None, 0.0, []
        app = FastAPI()

        @app.post("/generate")
        async def generate(request: Request):
            self.bodies.append(await request.json())
            if self.delay_s:
                time.sleep(self.delay_s)
            if self.raw is not None:
                return PlainTextResponse(self.raw, status_code=self.status)
            return JSONResponse(self.reply, status_code=self.status)

        self.app = app


@pytest.fixture(scope="module")
def stub(tiny_qwen25vl_path):
    s = Stub()
    _, processor = load_model(tiny_qwen25vl_path)
    with ServerThread(s.app) as server:
        yield s, server, processor


def stub_engine(stub, **kw):
    s, server, processor = stub
    s.reply, s.status, s.raw, s.delay_s = {}, 200, None, 0.0
    return s, server, ServerEngine([server.url], processor, generator_config(), "qwen2.5-vl", **kw)


def good_reply(engine, ids, prompt_len, **meta):
    return {"output_ids": ids, "meta_info": {"output_token_logprobs": [[-0.5, t, None] for t in ids],
                                             "prompt_tokens": prompt_len, "finish_reason": {"type": "stop"}, **meta}}


def test_request_mapping_by_hand(stub):
    s, server, engine = stub_engine(stub)
    req = requests(engine.generator.builder.format)[0]
    vocab = engine.generator.tokenizer.get_vocab()
    stops = [vocab["</tool_call>"], vocab["<|im_end|>"], vocab["<|endoftext|>"]]
    policy = engine.generator
    prompt = policy.builder.render(req)
    row = policy.request(prompt)
    body = engine.backend.body(row)
    assert body["sampling_params"] == {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 12,
                                       "stop_token_ids": stops, "skip_special_tokens": False, "no_stop_trim": True}
    sampled = ServerEngine([server.url], policy.processor, generator_config(
        greedy=False, temperature=0.7, top_p=0.9, top_k=0, max_new_tokens=33, stop_at_tool_call=False), "qwen2.5-vl")
    srow = sampled.generator.request(prompt)
    assert sampled.backend.body(dataclasses.replace(srow, seed=5))["sampling_params"] == {
        "temperature": 0.7, "top_p": 0.9, "top_k": -1, "max_new_tokens": 33, "stop_token_ids": stops[1:],
        "skip_special_tokens": False, "no_stop_trim": True, "sampling_seed": 5}
    topk = ServerEngine([server.url], policy.processor, generator_config(greedy=False, top_k=5), "qwen2.5-vl")
    assert topk.backend.body(topk.generator.request(prompt))["sampling_params"]["top_k"] == 5
    # the body: the processor's ids with the image's pad run collapsed to one pad (the server expands
    # it), the screenshot byte-for-byte, no webrl field; forced ids are scored from position P - 1
    prompt_ids = policy.encode([prompt])["input_ids"][0].tolist()
    pad = vocab["<|image_pad|>"]
    collapsed = [t for i, t in enumerate(prompt_ids) if not (t == pad and prompt_ids[i - 1] == pad)]
    assert body["input_ids"] == collapsed and collapsed.count(pad) == 1 and prompt_ids.count(pad) > 1
    assert body["return_logprob"] is True and body["logprob_start_len"] == -1 and "extra_key" not in body
    forced = engine.backend.body(dataclasses.replace(row, forced_ids=[5, 6], max_new_tokens=0, hidden_layer=-1,
                                                     cache_key="k"))
    assert forced["logprob_start_len"] == len(prompt_ids) - 1 and forced["input_ids"][-2:] == [5, 6]
    assert forced["return_hidden_states"] is True and forced["extra_key"] == "k"
    assert forced["sampling_params"]["max_new_tokens"] == 1  # SGLang returns no hidden states for 0
    word = engine.generator.tokenizer("click", add_special_tokens=False)["input_ids"]
    ids = [word[0], stops[1], word[0]]  # the answer goes on past the stop id: cut after it
    s.reply = good_reply(engine, ids, len(prompt_ids))
    [d] = engine.act([req])
    [sent] = s.bodies[-1:]
    assert sent["input_ids"] == collapsed and set(sent) == {"input_ids", "sampling_params", "return_logprob",
                                                            "logprob_start_len", "image_data"}
    assert base64.b64decode(sent["image_data"][0].split(",", 1)[1]) == req.observation.screenshot.data
    assert d.response_ids == ids[:2] and d.logprobs == [-0.5, -0.5] and d.stats.finish_reason == "stop"
    for e in (engine, sampled, topk):
        e.close()


@pytest.mark.parametrize("setup, message", [
    (dict(status=404, reply={"detail": "Not Found"}), "/generate: HTTP 404"),
    (dict(status=500, reply={"object": "error", "message": "CUDA out of memory"}), "HTTP 500: CUDA out of memory"),
    (dict(raw="<html>oops</html>"), "/generate: the answer is not JSON"),
    (dict(reply={"text": "hi"}), "no 'meta_info'"),
    (dict(reply={"meta_info": {"output_token_logprobs": [[0.1]]}}), "meta_info.output_token_logprobs must be"),
    (dict(reply={"meta_info": {"finish_reason": {"type": "abort", "message": "weights updating"},
                               "output_token_logprobs": []}}), "aborted: weights updating"),
])
def test_server_errors_name_the_url_and_field(stub, setup, message):
    s, server, engine = stub_engine(stub)
    for k, v in setup.items():
        setattr(s, k, v)
    with pytest.raises(ServerEngineError, match=message) as e:
        engine.act(requests(engine.generator.builder.format)[2:])
    assert server.url in str(e.value)
    engine.close()


def test_answer_checks(stub):
    s, server, engine = stub_engine(stub)
    req = requests(engine.generator.builder.format)[2]  # text only
    n = len(engine.generator.prompt_ids(engine.generator.builder.render(req)))
    pad = engine.generator.tokenizer.get_vocab()["<|image_pad|>"]
    a, b = engine.generator.tokenizer("click type", add_special_tokens=False)["input_ids"][:2]
    cases = [(good_reply(engine, [a, b], n + 4), "prompt_tokens is"),
             (good_reply(engine, [a, pad], n), "vision placeholder"),
             ({**good_reply(engine, [a, b], n), "output_ids": [b]}, "output_ids .* disagree")]
    for reply, message in cases:
        s.reply = reply
        with pytest.raises(ServerEngineError, match=message):
            engine.act([req])
    engine.weight_version = "7"
    s.reply = good_reply(engine, [a, b], n, weight_version="6")
    with pytest.raises(ServerEngineError, match="weight_version is '6', but this engine loaded '7'"):
        engine.act([req])
    engine.close()


def test_timeout_and_unreachable(stub):
    s, server, engine = stub_engine(stub, timeout_s=0.3)
    s.delay_s = 1.5
    with pytest.raises(ServerEngineError, match=rf"{server.url}/generate: no answer within 0.3 s"):
        engine.act(requests(engine.generator.builder.format)[2:])
    engine.close()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    dead = ServerEngine([f"http://127.0.0.1:{port}"], engine.generator.processor, generator_config(), "qwen2.5-vl")
    with pytest.raises(ServerEngineError, match=rf"127.0.0.1:{port}/generate: server unreachable"):
        dead.act(requests(engine.generator.builder.format)[2:])
    with pytest.raises(ServerEngineError, match="unreachable"):
        dead.health()
    dead.close()


def test_bad_construction(tiny_qwen25vl_path):
    _, processor = load_model(tiny_qwen25vl_path)
    with pytest.raises(ValueError, match="urls must be a non-empty list"):
        ServerEngine("http://127.0.0.1:1", processor)
    with pytest.raises(ValueError, match="timeout_s > 0"):
        ServerEngine(["http://127.0.0.1:1"], processor, timeout_s=0)


@pytest.mark.slow
def test_learner_to_server_weight_sync_through_the_inference_worker(tiny_qwen25vl_path, tmp_path):
    """The server-engine sync path without Ray: the learner trains, exports a Hugging Face folder,
    and an InferenceWorker over ServerEngine hands it to `webrl serve` with its version; the
    server's greedy decisions then equal an in-process policy on the exported weights, and a
    second worker's update of the same version does not reload the server."""
    from tests.learner.helpers import learner_config, learner_run, make_samples, with_rollout_logprobs
    from webrl.learner import LearnerGroup
    from webrl.rollout import InferenceConfig, InferenceWorker
    from webrl.rollout.coordinator import run_coroutine

    model, processor = load_model(tiny_qwen25vl_path)
    server = ServerThread(create_app(LocalChatEngine(model, processor, "qwen2.5-vl"),
                                     serve_config())).start()
    engine = ServerEngine([server.url], processor, generator_config(), "qwen2.5-vl")
    worker = InferenceWorker(engine, InferenceConfig(batch_window_s=0.0), version=0)
    reqs = requests(GeneratorPolicy(model, processor, generator_config()).builder.format)[:2]
    group = LearnerGroup(learner_config(), learner_run(tiny_qwen25vl_path), 1, use_ray=False)
    try:
        before = engine.act(reqs)
        samples = make_samples(processor, 4)
        group.update(with_rollout_logprobs(samples, group.compute_logprobs(samples).logprobs))
        path = group.export_hf(str(tmp_path / "v00000001"))
        # what SGLang's Qwen2.5-VL loader looks up: checkpoint names, never the module tree's
        from safetensors import safe_open
        from webrl.learner.weights import checkpoint_name

        (shard,) = sorted(tmp_path.glob("v00000001/*.safetensors"))
        with safe_open(str(shard), "pt") as f:
            saved = set(f.keys())
        assert saved == {checkpoint_name(n) for n in saved} and "lm_head.weight" in saved
        assert any(n.startswith("model.layers.") for n in saved) and any(n.startswith("visual.") for n in saved)
        run_coroutine(worker.set_weights_async(path, 1))  # a fresh loop also when the thread holds Playwright's
        assert worker.version == 1 and engine.weight_version == "1"
        trained, trained_processor = load_model(path)
        after = engine.act(reqs)
        assert_same_decisions(after, GeneratorPolicy(trained, trained_processor, generator_config()).act(reqs))
        assert [d.logprobs for d in after] != [d.logprobs for d in before]  # the update reached the server
        # a second worker on the same servers (the evaluation worker) takes the label without reloading
        calls = []
        dead = f"http://127.0.0.1:{_free_port()}"
        other = ServerEngine([dead, server.url], processor, generator_config(), "qwen2.5-vl")
        post = other.backend.http.post
        other.backend.http.post = lambda url, route, body: (calls.append((url, route)), post(url, route, body))[1]
        other.note_weights("1")
        assert_same_decisions(other.act(reqs[:1]), after[:1])  # the dead server's request went to the live one
        assert calls == [(dead, "/generate"), (server.url, "/generate")]
        other.note_weights("an older load")
        with pytest.raises(ServerEngineError, match="weight_version is '1', but this engine loaded 'an older load'"):
            other.act(reqs[:1])
        other.close()
    finally:
        group.shutdown()
        engine.close()
        server.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

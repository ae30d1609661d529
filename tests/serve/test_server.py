"""`webrl serve` over real HTTP on 127.0.0.1: OpenAI-shaped replies, usage counts, images, limits,
keys, and a 4xx with a message for every malformed request."""
import base64
import io

import httpx
import pytest

from webrl.chat import ChatMessage, SamplingParams
from webrl.chat.local import cut_at_stop
from webrl.serve import ServeConfig, ServerThread, create_app

from tests.reward.fixtures import SMALL_LIMITS
from tests.reward.helpers import StubEngine, screenshot


def data_url(img, fmt="png"):
    return f"data:image/{fmt};base64,{base64.b64encode(img.data).decode()}"


def body(content, **extra):
    return {"model": "tiny-qwen25vl", "messages": [{"role": "user", "content": content}], "max_tokens": 4, **extra}


def post(server, payload, **kw):
    return httpx.post(server.url + "/v1/chat/completions", json=payload, timeout=60, **kw)


def test_multimodal_completion_with_usage_counts(tiny_server, tiny_engine):
    server, recorder = tiny_server
    img = screenshot(90, size=(120, 80))
    content = [{"type": "text", "text": "What does the page show?"},
               {"type": "image_url", "image_url": {"url": data_url(img)}}]
    r = post(server, body(content, max_tokens=5, temperature=0))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["object"] == "chat.completion" and out["model"] == "tiny-qwen25vl"
    assert out["choices"][0]["message"]["role"] == "assistant"
    assert isinstance(out["choices"][0]["message"]["content"], str)
    # the server received the image byte-for-byte (PNG kept as PNG) after the text
    [user] = recorder.seen[-1]
    assert user.content[0] == "What does the page show?" and user.content[1] == img
    # prompt tokens = the processor's prompt length for the same messages (text + image pads)
    expected = tiny_engine.prepare([ChatMessage("user", ("What does the page show?", img))]).num_tokens
    usage = out["usage"]
    assert usage["prompt_tokens"] == expected > 20
    assert 1 <= usage["completion_tokens"] <= 5
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert out["choices"][0]["finish_reason"] in ("stop", "length")


def test_seeded_sampling_repeats_and_greedy_is_deterministic(tiny_server):
    server, _ = tiny_server
    payload = body("Describe the button.", max_tokens=6, temperature=1.0, seed=7)
    a, b = post(server, payload).json(), post(server, payload).json()
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    g1 = post(server, body("Describe the button.", max_tokens=6, temperature=0)).json()
    g2 = post(server, body("Describe the button.", max_tokens=6, temperature=0)).json()
    assert g1["choices"][0]["message"]["content"] == g2["choices"][0]["message"]["content"]


def test_prompt_token_limit_uses_real_token_counts(tiny_server):
    server, _ = tiny_server
    r = post(server, body("mug " * 3000))  # far above max_prompt_tokens=1500
    assert r.status_code == 400
    err = r.json()["error"]
    assert "tokens; the limit is 1500" in err["message"] and err["code"] == "context_length_exceeded"


def test_models_and_health(tiny_server):
    server, _ = tiny_server
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    assert httpx.get(server.url + "/v1/models").json()["data"][0]["id"] == "tiny-qwen25vl"


@pytest.fixture(scope="module")
def stub_server():
    engine = StubEngine(lambda messages: "Verdict: SUCCESS", model_name="stub")
    with ServerThread(create_app(engine, ServeConfig(**SMALL_LIMITS))) as server:
        yield server


def _png_of(width, height):
    from PIL import Image as PILImage

    buf = io.BytesIO()
    PILImage.new("RGB", (width, height)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


IMG = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(screenshot(1).data).decode()}}
MALFORMED = [
    # (raw body or JSON payload, expected status, words the message must contain)
    (b"{not json", 400, "not valid JSON"),
    ([1, 2], 400, "JSON object"),
    ({"model": "stub"}, 400, "messages"),
    ({"messages": []}, 400, "messages"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, 400, "messages.0.role"),
    ({"messages": [{"role": "user", "content": [{"type": "video", "url": "x"}]}]}, 400, "messages.0.content"),
    ({"messages": [{"role": "user", "content": "hi"}], "temperature": -1}, 400, "temperature"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, 400, "max_tokens"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 65}, 400, "limit of 64"),
    ({"messages": [{"role": "user", "content": "hi"}], "stream": True}, 400, "stream"),
    ({"messages": [{"role": "user", "content": "hi"}], "n": 2}, 400, "n must be 1"),
    ({"messages": [{"role": "user", "content": "hi"}], "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ({"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}, 404, "not served here"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, 400, "needs 'text'"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400, "needs 'image_url'"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://127.0.0.1:1/a.png"}}]}]},
     400, "only inline images"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}]}]},
     400, "not valid base64"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": "data:image/png;base64," + base64.b64encode(b"hello, not an image").decode()}}]}]},
     400, "not a readable"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": "data:image/png;base64," + _png_of(600, 600)}}]}]}, 400, "600x600 pixels"),
    ({"messages": [{"role": "user", "content": [IMG] * 5}]}, 400, "more than 4 images"),
    ({"messages": [{"role": "assistant", "content": [IMG]}]}, 400, "only user messages may carry images"),
]


@pytest.mark.parametrize("payload, status, words", MALFORMED)
def test_malformed_requests_get_4xx_with_a_message(stub_server, payload, status, words):
    if isinstance(payload, bytes):
        r = httpx.post(stub_server.url + "/v1/chat/completions", content=payload,
                       headers={"content-type": "application/json"})
    else:
        r = post(stub_server, payload)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert words in err["message"] and err["type"]


def test_request_byte_limit_is_413(stub_server):
    big = {"messages": [{"role": "user", "content": "x" * 1_100_000}]}
    r = post(stub_server, big)
    assert r.status_code == 413 and "limit" in r.json()["error"]["message"]


def test_unknown_route_and_method_use_the_error_format(stub_server):
    r = httpx.get(stub_server.url + "/v1/chat/completions")
    assert r.status_code == 405 and r.json()["error"]["message"]
    assert httpx.get(stub_server.url + "/v1/nothing").status_code == 404


def test_valid_request_on_the_stub_and_ignored_extra_fields(stub_server):
    r = post(stub_server, {"messages": [{"role": "system", "content": "judge"}, {"role": "user", "content": [IMG]}],
                           "response_format": {"type": "text"}, "user": "x"})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "Verdict: SUCCESS"


def test_bearer_key_is_required_when_configured(monkeypatch):
    monkeypatch.setenv("WEBRL_TEST_SERVE_KEY", "s3cret")
    config = ServeConfig(api_key_env="WEBRL_TEST_SERVE_KEY", **SMALL_LIMITS)
    engine = StubEngine(lambda messages: "ok")
    with ServerThread(create_app(engine, config)) as server:
        payload = {"messages": [{"role": "user", "content": "hi"}]}
        assert post(server, payload).status_code == 401
        wrong = post(server, payload, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and "bearer key" in wrong.json()["error"]["message"]
        assert post(server, payload, headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert httpx.get(server.url + "/v1/models").status_code == 401
        assert httpx.get(server.url + "/health").status_code == 200
        assert engine.seen and len(engine.seen) == 1  # refused requests never reached the model


def test_binds_loopback_by_default():
    assert ServeConfig().host == "127.0.0.1"
    with ServerThread(create_app(StubEngine(lambda m: "ok"))) as server:
        assert server.host == "127.0.0.1"


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="max_images"):
        ServeConfig(max_images=0)
    with pytest.raises(ValueError, match="dtype"):
        ServeConfig(dtype="int4")
    with pytest.raises(ValueError, match="port"):
        ServeConfig(port=70000)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)


def test_stop_strings_cut_the_reply():
    assert cut_at_stop("abc STOP def END", ["END", "STOP"]) == ("abc ", True)
    assert cut_at_stop("abc", ["x"]) == ("abc", False)


def test_engine_serves_a_qwen3_vl_checkpoint_too(tiny_qwen3vl_path):
    from webrl.chat import LocalChatEngine

    engine = LocalChatEngine.from_pretrained(tiny_qwen3vl_path)
    messages = [ChatMessage("system", ("You judge.",)), ChatMessage("user", ("Page:", screenshot(3, size=(96, 64))))]
    prompt = engine.prepare(messages)
    text_only = engine.prepare([messages[0], ChatMessage("user", ("Page:",))])
    assert prompt.num_tokens > text_only.num_tokens  # the image expanded into visual tokens
    out = engine.generate(prompt, SamplingParams(max_tokens=3))
    assert out.prompt_tokens == prompt.num_tokens and 1 <= out.completion_tokens <= 3


@pytest.mark.gpu
def test_engine_on_cuda_in_bfloat16(tiny_qwen25vl_path):
    from webrl.chat import LocalChatEngine

    engine = LocalChatEngine.from_pretrained(tiny_qwen25vl_path, dtype="bfloat16", device="cuda")
    with ServerThread(create_app(engine, ServeConfig(**SMALL_LIMITS))) as server:
        content = [{"type": "text", "text": "Page?"}, {"type": "image_url", "image_url": {"url": data_url(screenshot(4))}}]
        r = post(server, {"messages": [{"role": "user", "content": content}], "max_tokens": 4, "seed": 1,
                          "temperature": 0.7})
    assert r.status_code == 200, r.text
    assert 1 <= r.json()["usage"]["completion_tokens"] <= 4


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_logprobs_and_token_ids_match_a_forward_pass(tiny_server, tiny_engine, temperature):
    """The served log-probs equal log_softmax(logits / T) of a plain forward pass over prompt +
    returned ids (T = 1 when greedy): the policy generator's convention, so a learner can
    recompute them. The prompt carries an image, so the visual tokens are part of the check."""
    import torch

    server, _ = tiny_server
    img = screenshot(33, size=(56, 56))
    content = [{"type": "text", "text": "Which button?"}, {"type": "image_url", "image_url": {"url": data_url(img)}}]
    r = post(server, body(content, max_tokens=6, temperature=temperature, seed=3, logprobs=True,
                          return_tokens_as_token_ids=True))
    assert r.status_code == 200, r.text
    entries = r.json()["choices"][0]["logprobs"]["content"]
    ids = [int(e["token"].removeprefix("token_id:")) for e in entries]
    served = torch.tensor([e["logprob"] for e in entries])
    assert len(ids) == r.json()["usage"]["completion_tokens"] >= 1

    prompt = tiny_engine.prepare([ChatMessage("user", ("Which button?", img))])
    inputs = dict(prompt.inputs)
    P = prompt.num_tokens
    inputs["input_ids"] = torch.cat([inputs["input_ids"], torch.tensor([ids])], dim=1)  # (1, P + R)
    inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    if "mm_token_type_ids" in inputs:
        pad = torch.zeros((1, len(ids)), dtype=inputs["mm_token_type_ids"].dtype)
        inputs["mm_token_type_ids"] = torch.cat([inputs["mm_token_type_ids"], pad], dim=1)
    with torch.no_grad():
        logits = tiny_engine.model(**inputs).logits[0, P - 1:-1].float()  # (R, V): position t predicts token t+1
    T = temperature if temperature > 0 else 1.0
    expected = torch.log_softmax(logits / T, dim=-1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1)
    torch.testing.assert_close(served, expected, atol=1e-4, rtol=1e-4)
    if temperature == 0.0:  # greedy picks the arg-max of every step
        assert ids == logits.argmax(-1).tolist()
    # without the vLLM flag tokens are text pieces; top_logprobs is refused with a message
    plain = post(server, body("hi", max_tokens=2, logprobs=True)).json()["choices"][0]["logprobs"]["content"]
    assert all(not e["token"].startswith("token_id:") for e in plain)
    refused = post(server, body("hi", logprobs=True, top_logprobs=5))
    assert refused.status_code == 400 and "top_logprobs" in refused.json()["error"]["message"]

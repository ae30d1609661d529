"""`webrl serve`'s SGLang-native routes over real HTTP: token-in/token-out answers whose log-probs
equal a plain forward pass, stop ids and lengths, images, and a 400 naming the field for every
request outside the subset."""
import base64

import httpx
import pytest
import torch

from tests.reward.fixtures import SMALL_LIMITS
from tests.reward.helpers import screenshot
from webrl.serve import ServeConfig, ServerThread, create_app


PIXELS = {"min_pixels": 1024, "max_pixels": 64 * 28 * 28}


@pytest.fixture(scope="module")
def native(tiny_engine):
    config = ServeConfig(**SMALL_LIMITS, image_min_pixels=PIXELS["min_pixels"], image_max_pixels=PIXELS["max_pixels"])
    with ServerThread(create_app(tiny_engine, config)) as server:
        yield server, tiny_engine


def post(server, path, payload, **kw):
    return httpx.post(server.url + path, json=payload, timeout=60, **kw)


def prompt_ids(engine, text="Which button buys the mug?"):
    return engine.processor.tokenizer(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n",
                                      add_special_tokens=False)["input_ids"]


def image_prompt(engine, img, pixels):
    """(input_ids with the image's pads expanded by the processor, data URL)."""
    text = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What is shown?<|im_end|>\n" \
           "<|im_start|>assistant\n"
    enc = engine.processor(text=[text], images=[img.to_pil()], return_tensors="pt",
                           size={"shortest_edge": pixels["min_pixels"], "longest_edge": pixels["max_pixels"]})
    return enc, f"data:image/png;base64,{base64.b64encode(img.data).decode()}"


def forward_logprobs(engine, ids, new, temperature, **vision):
    """log softmax(logits / T) of each new token from one forward pass over prompt + response."""
    full = torch.tensor([ids + new])  # (1, P + N)
    extra = {}
    if vision:
        extra = dict(vision, mm_token_type_ids=(full == engine.processor.tokenizer.convert_tokens_to_ids(
            "<|image_pad|>")).long())
    with torch.no_grad():
        logits = engine.model(input_ids=full, attention_mask=torch.ones_like(full), **extra).logits  # (1, P+N, V)
    P = len(ids)
    logp = torch.log_softmax(logits[0, P - 1:-1].float() / temperature, -1)  # (N, V)
    return logp.gather(-1, torch.tensor(new)[:, None]).squeeze(-1)  # (N,)


def test_greedy_answer_shape_and_logprobs_match_a_forward_pass(native):
    server, engine = native
    ids = prompt_ids(engine)
    r = post(server, "/generate", {"input_ids": ids, "return_logprob": True, "rid": "r1",
                                   "sampling_params": {"temperature": 0, "max_new_tokens": 6}})
    assert r.status_code == 200, r.text
    out = r.json()
    meta, new = out["meta_info"], out["output_ids"]
    assert meta["id"] == "r1" and meta["prompt_tokens"] == len(ids) and meta["completion_tokens"] == len(new)
    assert meta["weight_version"] == "0" and 1 <= len(new) <= 6
    assert [e[1] for e in meta["output_token_logprobs"]] == new
    recomputed = forward_logprobs(engine, ids, new, 1.0)  # greedy reports T = 1
    assert torch.allclose(torch.tensor([e[0] for e in meta["output_token_logprobs"]]), recomputed, atol=1e-4)
    assert out["text"] == engine.processor.tokenizer.decode(new, skip_special_tokens=True)


def test_stop_ids_and_length(native):
    server, engine = native
    ids = prompt_ids(engine)
    first = post(server, "/generate", {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": 3,
                                                                             "stop_token_ids": [5]}}).json()
    # id 5 is a vision token, suppressed, so never sampled: three tokens, ended by length
    assert len(first["output_ids"]) == 3 and 5 not in first["output_ids"]
    assert first["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert "output_token_logprobs" not in first["meta_info"]  # not asked for
    # stopping at the second greedy token: the answer ends with it
    stop = first["output_ids"][1]
    cut = post(server, "/generate", {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": 3,
                                                                           "stop_token_ids": [stop]}}).json()
    assert cut["output_ids"] == first["output_ids"][:2]
    assert cut["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}


def test_seeded_sampling_repeats_with_tempered_logprobs(native):
    server, engine = native
    ids = prompt_ids(engine)
    body = {"input_ids": ids, "return_logprob": True,
            "sampling_params": {"temperature": 0.7, "top_p": 1.0, "top_k": -1, "max_new_tokens": 5,
                                "sampling_seed": 3, "stop_token_ids": [5]}}
    a, b = post(server, "/generate", body).json(), post(server, "/generate", body).json()
    assert a["output_ids"] == b["output_ids"]
    got = torch.tensor([e[0] for e in a["meta_info"]["output_token_logprobs"]])
    assert torch.allclose(got, forward_logprobs(engine, ids, a["output_ids"], 0.7), atol=1e-4)


def collapse(ids, pad):
    return [t for i, t in enumerate(ids) if not (t == pad and i and ids[i - 1] == pad)]


def test_an_image_is_one_pad_the_server_expands_at_its_pixel_bounds(native):
    """As SGLang's newest Qwen-VL processors: one `<|image_pad|>` per image, expanded by the server at
    its --mm-process-config bounds (here ServeConfig.image_*_pixels); prompt_tokens is the expanded
    length; a pre-expanded run or a count that does not match image_data is refused."""
    server, engine = native
    enc, url = image_prompt(engine, screenshot(90, size=(300, 180)), PIXELS)
    ids = enc["input_ids"][0].tolist()
    pad = engine.processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    body = {"input_ids": collapse(ids, pad), "image_data": [url], "return_logprob": True,
            "sampling_params": {"temperature": 0, "max_new_tokens": 4}}
    out = post(server, "/generate", body).json()
    assert out["meta_info"]["prompt_tokens"] == len(ids) > len(body["input_ids"])
    got = torch.tensor([e[0] for e in out["meta_info"]["output_token_logprobs"]])
    want = forward_logprobs(engine, ids, out["output_ids"], 1.0, pixel_values=enc["pixel_values"],
                            image_grid_thw=enc["image_grid_thw"])
    assert torch.allclose(got, want, atol=1e-4)
    r = post(server, "/generate", {**body, "input_ids": ids})
    assert r.status_code == 400 and "expanded run of <|image_pad|>" in r.json()["error"]["message"]
    r = post(server, "/generate", {**body, "image_data": []})
    assert r.status_code == 400 and "1 image placeholder(s) for 0 image(s)" in r.json()["error"]["message"]


def test_prompt_logprobs_hidden_states_and_the_prefix_cache_as_sglang_returns_them(native):
    """logprob_start_len L: entry 0 is [None, ids[L]], entry k log p(ids[L + k] | ids[:L + k]) at
    temperature 1 even when sampling at 0.5; the prefix cache then reuses at most L tokens. Hidden
    states: the rows of the positions the prefill computed (final layer), none at max_new_tokens 0."""
    server, engine = native
    ids = prompt_ids(engine)
    L = len(ids) - 3
    body = {"input_ids": ids, "return_logprob": True, "logprob_start_len": L, "extra_key": "k1",
            "sampling_params": {"temperature": 0.5, "max_new_tokens": 0}}
    meta = post(server, "/generate", body).json()["meta_info"]
    entries = meta["input_token_logprobs"]
    assert [e[1] for e in entries] == ids[L:] and entries[0][0] is None and meta["cached_tokens"] == 0
    full = torch.tensor([ids])
    with torch.no_grad():
        out = engine.model(input_ids=full, output_hidden_states=True)
    ref = torch.log_softmax(out.logits[0].float(), -1)  # (P, V), temperature 1
    for k in (1, 2):
        assert entries[k][0] == pytest.approx(float(ref[L + k - 1, ids[L + k]]), abs=1e-4)
    # the same prompt again under the same key: the kept prefill is reused, at most L tokens
    again = post(server, "/generate", {**body, "logprob_start_len": L - 2}).json()["meta_info"]
    assert again["cached_tokens"] == L - 2
    other_key = post(server, "/generate", {**body, "extra_key": "k2"}).json()["meta_info"]
    assert other_key["cached_tokens"] == 0  # another namespace never matches
    hidden = {"input_ids": ids, "return_hidden_states": True, "extra_key": "h",
              "sampling_params": {"temperature": 0, "max_new_tokens": 1}}
    rows = post(server, "/generate", hidden).json()["meta_info"]["hidden_states"]
    assert len(rows) == 1 and torch.allclose(torch.tensor(rows[0]), out.hidden_states[-1][0].float(), atol=1e-4)
    reused = post(server, "/generate", {**hidden, "sampling_params": {"temperature": 0, "max_new_tokens": 2}})
    meta = reused.json()["meta_info"]
    assert meta["cached_tokens"] == len(ids) - 1 and len(meta["hidden_states"][0]) == 1  # only the computed row
    none = post(server, "/generate", {**hidden, "extra_key": "h2", "sampling_params": {"max_new_tokens": 0}})
    assert none.json()["meta_info"]["hidden_states"] == []


@pytest.mark.parametrize("change, message", [
    ({"input_ids": None}, "input_ids is required"),
    ({"text": "hi"}, "unsupported field(s) ['text']"),
    ({"input_ids": [1, "a"]}, "input_ids[1] must be an integer"),
    ({"sampling_params": {"top_k": 0}}, "top_k must be -1 (off) or >= 1"),
    ({"sampling_params": {"temperature": -1}}, "temperature must be >= 0"),
    ({"sampling_params": {"top_p": 0}}, "top_p must be in (0, 1]"),
    ({"sampling_params": {"max_new_tokens": 65}}, "max_new_tokens is 65; the limit is 64"),
    ({"sampling_params": {"min_p": 0.1}}, "unsupported field(s) ['min_p']"),
    ({"sampling_params": {"stop_token_ids": 7}}, "stop_token_ids must be a list"),
    ({"stream": True}, "stream must be one of [False]"),
    ({"logprob_start_len": 99, "return_logprob": True}, "logprob_start_len 99 is not below the"),
    ({"image_data": "http://example.com/a.png"}, "image_data[0]"),
    ({"webrl_image_pixels": {"min_pixels": 10}}, "unsupported field(s) ['webrl_image_pixels']"),
    ({"extra_key": 3}, "extra_key must be a string"),
    ({"input_ids": [1] * 1501}, "1501 tokens; the limit is 1500"),
])
def test_bad_requests_name_the_field(native, change, message):
    server, engine = native
    body = {"input_ids": prompt_ids(engine), "sampling_params": {"max_new_tokens": 2}}
    body.update(change)
    body = {k: v for k, v in body.items() if v is not None}
    r = post(server, "/generate", body)
    assert r.status_code == 400, r.text
    assert message in r.json()["error"]["message"]


def test_invalid_json_model_info_and_update_errors(native, tiny_qwen3vl_path):
    server, _ = native
    r = httpx.post(server.url + "/generate", content=b"{not json", timeout=10)
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    info = httpx.get(server.url + "/model_info").json()
    assert info["weight_version"] == "0" and info["is_generation"] is True
    r = post(server, "/update_weights_from_disk", {})
    assert r.status_code == 400 and "model_path is required" in r.json()["error"]["message"]
    r = post(server, "/update_weights_from_disk", {"model_path": tiny_qwen3vl_path})  # another architecture
    assert r.status_code == 400 and "does not fit the served model" in r.json()["error"]["message"]
    assert httpx.get(server.url + "/model_info").json()["weight_version"] == "0"  # nothing changed


def test_native_routes_need_the_key(tiny_engine, monkeypatch):
    monkeypatch.setenv("WEBRL_NATIVE_TEST_KEY", "s3cret")
    config = ServeConfig(**SMALL_LIMITS, api_key_env="WEBRL_NATIVE_TEST_KEY")
    with ServerThread(create_app(tiny_engine, config)) as server:
        body = {"input_ids": prompt_ids(tiny_engine), "sampling_params": {"max_new_tokens": 1}}
        assert post(server, "/generate", body).status_code == 401
        assert post(server, "/update_weights_from_disk", {"model_path": "/x"}).status_code == 401
        ok = post(server, "/generate", body, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and len(ok.json()["output_ids"]) == 1


def test_with_an_admin_key_only_it_opens_the_weight_routes(tiny_engine, monkeypatch, tmp_path):
    """As SGLang's --admin-api-key: the weight routes take the admin key and refuse the API key;
    /generate, /model_info and /server_info keep the API key."""
    monkeypatch.setenv("WEBRL_NATIVE_TEST_KEY", "user-key")
    monkeypatch.setenv("WEBRL_NATIVE_TEST_ADMIN", "admin-key")
    config = ServeConfig(**SMALL_LIMITS, api_key_env="WEBRL_NATIVE_TEST_KEY", admin_api_key_env="WEBRL_NATIVE_TEST_ADMIN")
    user, admin = {"Authorization": "Bearer user-key"}, {"Authorization": "Bearer admin-key"}
    with ServerThread(create_app(tiny_engine, config)) as server:
        missing = {"model_path": str(tmp_path / "nowhere")}
        assert post(server, "/update_weights_from_disk", missing, headers=user).status_code == 401
        assert post(server, "/init_weights_update_group", {}, headers=user).status_code == 401
        r = post(server, "/update_weights_from_disk", missing, headers=admin)  # past the key: the folder's error
        assert r.status_code == 400 and "is not a folder" in r.json()["error"]["message"]
        assert httpx.get(server.url + "/model_info", headers=user, timeout=10).status_code == 200
        assert httpx.get(server.url + "/model_info", timeout=10).status_code == 401
        info = httpx.get(server.url + "/server_info", headers=user, timeout=10).json()
        assert info["tp_size"] == 1
        body = {"input_ids": prompt_ids(tiny_engine), "sampling_params": {"max_new_tokens": 1}}
        assert post(server, "/generate", body, headers=user).status_code == 200

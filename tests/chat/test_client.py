"""`ChatClient` against a scripted HTTP server on 127.0.0.1: what is retried, how often, how long
it waits, which error category a failure gets, and what a request carries."""
import contextlib
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from webrl.chat import ChatClient, ChatClientError, ChatMessage, SamplingParams
from webrl.types import Image

COMPLETION = {"choices": [{"message": {"role": "assistant", "content": "Verdict: SUCCESS"}, "finish_reason": "length"}],
              "usage": {"prompt_tokens": 12, "completion_tokens": 3}}
HANG = "hang"
MESSAGES = [ChatMessage("system", ("You judge.",)), ChatMessage("user", ("Is the mug blue?",))]
SAMPLING = SamplingParams(max_tokens=8)


def reply(status=200, body=COMPLETION, headers=()):
    """One scripted answer: status, body (a dict is sent as JSON, bytes as they are), extra headers."""
    return status, body if isinstance(body, bytes) else json.dumps(body).encode(), dict(headers)


@contextlib.contextmanager
def scripted_server(script):
    """Answers request i with script[i] (the last entry repeats); HANG answers nothing until the
    test ends. Yields (base_url, requests) with each request's headers and JSON body."""
    requests, release = [], threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append((self.path, dict(self.headers), body))
            answer = script[min(len(requests), len(script)) - 1]
            if answer == HANG:
                release.wait(10)
                return
            status, data, headers = answer
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", requests
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def client(url, waits, **kw):
    return ChatClient(url, "m", **{"max_retries": 3, "backoff_s": 0.5, "sleep": waits.append, **kw})


def test_503_twice_then_a_completion():
    waits = []
    warming = reply(503, {"error": "warming up"})
    with scripted_server([warming, warming, reply()]) as (url, seen):
        c = client(url, waits)
        completion = c.chat(MESSAGES, SAMPLING)
    assert (completion.text, completion.finish_reason) == ("Verdict: SUCCESS", "length")
    assert (completion.prompt_tokens, completion.completion_tokens) == (12, 3)
    # 3 attempts: 503, 503, 200; waits before retry 0 and 1: 0.5 * 2**k times a jitter in [0.5, 1]
    assert len(seen) == 3 and c.stats == {"requests": 3, "retries": 2}
    assert 0.25 <= waits[0] <= 0.5 and 0.5 <= waits[1] <= 1.0
    assert seen[0][0] == "/v1/chat/completions"


def test_gives_up_after_max_retries_naming_the_attempts():
    waits = []
    with scripted_server([reply(502, b"bad gateway")]) as (url, seen):
        with pytest.raises(ChatClientError) as e:
            client(url, waits, max_retries=2).chat(MESSAGES, SAMPLING)
    assert len(seen) == 3 and len(waits) == 2  # 1 + max_retries attempts, a wait between each
    assert (e.value.category, e.value.status) == ("http_error", 502)
    assert "HTTP 502" in e.value.message and "bad gateway" in e.value.message
    assert e.value.message.endswith("(after 3 attempts)")


def test_400_is_not_retried():
    waits = []
    with scripted_server([reply(400, {"error": {"message": "unsupported image"}}), reply()]) as (url, seen):
        with pytest.raises(ChatClientError) as e:
            client(url, waits).chat(MESSAGES, SAMPLING)
    assert len(seen) == 1 and waits == []
    assert (e.value.category, e.value.status) == ("http_error", 400) and "unsupported image" in e.value.message
    assert "attempts" not in e.value.message


def test_429_waits_for_retry_after():
    waits = []
    with scripted_server([reply(429, {}, {"Retry-After": "2"}), reply()]) as (url, seen):
        assert client(url, waits, backoff_s=0.01).chat(MESSAGES, SAMPLING).text == "Verdict: SUCCESS"
    # backoff would wait at most 0.01 s; the server asked for 2 s (under backoff_max_s = 30)
    assert len(seen) == 2 and waits == [2.0]


def test_a_server_that_hangs_is_a_timeout():
    waits = []
    with scripted_server([HANG]) as (url, seen):
        with pytest.raises(ChatClientError) as e:
            client(url, waits, timeout_s=0.2, max_retries=1).chat(MESSAGES, SAMPLING)
    assert e.value.category == "timeout" and e.value.status is None
    assert len(seen) == 2 and len(waits) == 1 and "(after 2 attempts)" in e.value.message


def test_nothing_listening_is_a_connection_error():
    with socket.socket() as s:  # a port that was free a moment ago: connecting is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    waits = []
    c = client(f"http://127.0.0.1:{port}/v1", waits, max_retries=1)
    with pytest.raises(ChatClientError) as e:
        c.chat(MESSAGES, SAMPLING)
    assert e.value.category == "connection_error" and c.stats == {"requests": 2, "retries": 1}


@pytest.mark.parametrize("body", [b"{not json", json.dumps({"choices": []}).encode(),
                                  json.dumps({"choices": [{"message": {"content": None}}]}).encode()])
def test_a_200_that_is_not_a_completion_is_a_bad_response_and_not_retried(body):
    waits = []
    with scripted_server([reply(200, body), reply()]) as (url, seen):
        with pytest.raises(ChatClientError) as e:
            client(url, waits).chat(MESSAGES, SAMPLING)
    assert e.value.category == "bad_response" and len(seen) == 1 and waits == []


def test_log_probs_and_token_ids_as_the_server_reports_them():
    def with_tokens(*names):
        entries = [{"token": n, "logprob": -0.5 * (i + 1)} for i, n in enumerate(names)]
        return reply(200, {"choices": [{"message": {"content": "ab"}, "logprobs": {"content": entries}}]})

    with scripted_server([with_tokens("token_id:7", "token_id:9"), with_tokens("token_id:7", "b")]) as (url, seen):
        c = client(url, [])
        ids = c.chat(MESSAGES, SamplingParams(max_tokens=2, logprobs=True))
        mixed = c.chat(MESSAGES, SamplingParams(max_tokens=2, logprobs=True))
    assert ids.token_ids == [7, 9] and ids.logprobs == [-0.5, -1.0] and ids.tokens == ["token_id:7", "token_id:9"]
    assert mixed.token_ids == [] and mixed.logprobs == [-0.5, -1.0]  # ids only when every token has one
    assert ids.finish_reason == "stop" and ids.prompt_tokens is None  # no finish reason, no usage in the reply
    assert seen[0][2]["logprobs"] is True


def test_request_body_images_and_key(monkeypatch):
    from PIL import Image as PILImage

    png = Image.from_pil(PILImage.new("RGB", (8, 6), (200, 10, 10)), "png")
    jpeg = Image.from_pil(PILImage.new("RGB", (8, 6), (10, 200, 10)), "jpeg")
    messages = [ChatMessage("system", ("A", "B")), ChatMessage("user", ("Look:", png, jpeg))]
    monkeypatch.setenv("WEBRL_TEST_CHAT_KEY", "k1")
    with scripted_server([reply()]) as (url, seen):
        ChatClient(url, "m", api_key_env="WEBRL_TEST_CHAT_KEY").chat(
            messages, SamplingParams(max_tokens=5, temperature=0.7, top_p=0.9, top_k=20, seed=3, stop=["</x>"]))
        keyless = ChatClient(url, "m", api_key_env="WEBRL_NO_SUCH_VAR", jpeg_quality=80)
        keyless.chat(messages, SamplingParams(max_tokens=5))
        ChatClient(url, "m", api_key="given", api_key_env="WEBRL_TEST_CHAT_KEY").chat(messages, SAMPLING)
    (_, h1, first), (_, h2, second), (_, h3, _) = seen
    assert h1["Authorization"] == "Bearer k1" and "Authorization" not in h2 and h3["Authorization"] == "Bearer given"
    assert first == {"model": "m", "max_tokens": 5, "temperature": 0.7, "top_p": 0.9, "top_k": 20, "stop": ["</x>"],
                     "seed": 3, "messages": first["messages"]}
    assert second.keys() == {"model", "messages", "max_tokens", "temperature"}  # defaults are left out
    system, user = first["messages"]
    assert system == {"role": "system", "content": "AB"} and user["content"][0] == {"type": "text", "text": "Look:"}
    urls = [p["image_url"]["url"] for p in user["content"][1:]]
    assert urls[0].startswith("data:image/png;base64,") and urls[1].startswith("data:image/jpeg;base64,")
    converted = [p["image_url"]["url"] for p in second["messages"][1]["content"][1:]]
    assert all(u.startswith("data:image/jpeg;base64,") for u in converted)
    assert converted[1] == urls[1]  # JPEG bytes pass through unchanged


@pytest.mark.parametrize("kw, field", [({"base_url": "127.0.0.1:8000"}, "base_url"),
                                       ({"max_concurrency": 0}, "max_concurrency"),
                                       ({"jpeg_quality": 0}, "jpeg_quality")])
def test_bad_settings_name_what_was_wrong(kw, field):
    with pytest.raises(ValueError, match=field):
        ChatClient(**{"base_url": "http://127.0.0.1:8000/v1", **kw})

"""EndpointPolicy against a stub OpenAI-compatible server on 127.0.0.1."""
import pytest

from tests.chat_stub import chat_reply, chat_server
from tests.policy.helpers import episode, observation
from webrl.actions import Action, ParseError
from webrl.chat import ChatMessage
from webrl.policy import EndpointConfig, EndpointPolicy, PolicyRequest, PromptConfig, SamplingConfig
from webrl.policy.prompt import Message
from webrl.types import Image

REPLY = '<think>The search box is [1].</think><tool_call>{"name": "browser", "arguments": ' \
        '{"action": "type", "element": 1, "text": "mug"}}'  # stop string "</tool_call>" cut by the server


@pytest.fixture
def stub_server():
    seen = []

    def respond(path, body):
        seen.append((path, body))
        tokens = [{"token": f"token_id:{i}", "logprob": -0.5 * i} for i in range(1, 4)]
        return {**chat_reply(REPLY, logprobs={"content": tokens}),
                "usage": {"prompt_tokens": 321, "completion_tokens": 3}}

    with chat_server(respond) as url:
        yield url, seen


def test_endpoint_policy_round_trip(stub_server):
    url, seen = stub_server
    pol = EndpointPolicy(EndpointConfig(base_url=url, model="tiny", prompt=PromptConfig(num_screenshots=2),
                                        sampling=SamplingConfig(temperature=0.8, max_new_tokens=64)))
    turns, current = episode(2, pol.builder.format)
    decisions = pol.act([PolicyRequest(current, turns), PolicyRequest(observation(0))])
    assert len(seen) == 2
    for d in decisions:
        assert d.parsed == Action.type_text("mug", 1)
        assert d.response_text.endswith("</tool_call>")
        assert d.response_ids == [1, 2, 3] and d.logprobs == [-0.5, -1.0, -1.5]
        assert d.stats.prompt_tokens == 321 and d.stats.response_tokens == 3
    path, body = next(b for b in seen if len(b[1]["messages"]) > 3)
    assert path == "/v1/chat/completions"
    assert body["model"] == "tiny" and body["stop"] == ["</tool_call>"] and body["temperature"] == 0.8
    assert body["max_tokens"] == 64 and body["logprobs"] is True and "top_k" not in body
    roles = [m["role"] for m in body["messages"]]
    # system, task, (obs, assistant, tool) x 2, current obs; tool responses travel as user text
    assert roles == ["system", "user", "user", "assistant", "user", "user", "assistant", "user", "user"]
    images = [p for m in body["messages"] if isinstance(m["content"], list) for p in m["content"]
              if p["type"] == "image_url"]
    assert len(images) == 2 and all(p["image_url"]["url"].startswith("data:image/png;base64,") for p in images)
    assert body["messages"][4]["content"].startswith("<tool_response>\n")


def test_endpoint_errors_are_values():
    config = EndpointConfig(base_url="http://127.0.0.1:9/v1", timeout_s=2, max_retries=1, backoff_s=0.01)
    pol = EndpointPolicy(config)  # discard port: refused
    (d,) = pol.act([PolicyRequest(observation(0))])
    assert isinstance(d.parsed, ParseError) and "endpoint error: connection_error" in d.parsed.message
    assert "(after 2 attempts)" in d.parsed.message and pol.client.stats == {"requests": 2, "retries": 1}
    assert d.stats.finish_reason == "error"
    with pytest.raises(ValueError, match="base_url"):
        EndpointConfig(base_url="127.0.0.1:8000")
    with pytest.raises(ValueError, match="max_retries"):
        EndpointConfig(max_retries=-1)


def test_prompt_messages_as_sent_to_a_server():
    img = Image(b"\x89PNG", "png")
    assert Message("user", [img, "Step 0"]).to_chat_message() == ChatMessage("user", (img, "Step 0"))
    assert Message("assistant", ["<tool_call>x</tool_call>"]).to_chat_message().role == "assistant"
    # a tool turn has no OpenAI role without a tool call: user text, as render_chatml writes it
    tool = Message("tool", ["Succeed"]).to_chat_message()
    assert tool == ChatMessage("user", ("<tool_response>\nSucceed\n</tool_response>",))

"""A project checkpoint behind `webrl serve` used as a policy endpoint (`EndpointPolicy`)."""
from webrl.policy import EndpointConfig, EndpointPolicy, PolicyRequest, SamplingConfig
from webrl.serve import ServeConfig, ServerThread, create_app

from tests.policy.helpers import episode, observation
from tests.reward.helpers import RecordingEngine


def test_endpoint_policy_against_webrl_serve(tiny_engine):
    recorder = RecordingEngine(tiny_engine)
    config = ServeConfig(max_prompt_tokens=32768, max_new_tokens=64, default_max_tokens=8,
                         max_image_pixels=1280 * 1000)
    with ServerThread(create_app(recorder, config)) as server:
        policy = EndpointPolicy(EndpointConfig(base_url=server.url + "/v1", model="tiny-qwen25vl", family="qwen2.5-vl",
                                               sampling=SamplingConfig(temperature=0.8, max_new_tokens=6)))
        turns, current = episode(2, policy.builder.format)
        [first, later] = policy.act([PolicyRequest(observation(0)), PolicyRequest(current, turns)])
    for decision in (first, later):
        assert decision.stats.finish_reason in ("stop", "length"), decision.parsed  # not "error"
        assert 1 <= decision.stats.response_tokens <= 6 + 1  # + a restored "</tool_call>" never counts
        assert len(decision.logprobs) == decision.stats.response_tokens
        assert all(lp <= 0 for lp in decision.logprobs)
    # the server saw the policy's screenshot(s) and its tool turns folded into user messages
    assert len(recorder.seen) == 2 and any(m.images for m in recorder.seen[0])
    assert all(m.role in ("system", "user", "assistant") for msgs in recorder.seen for m in msgs)

"""LOCI: box/crop arithmetic, the Locator–Critic loop with scripted roles, strict parsing, the wrapper."""
import json

import pytest
from PIL import Image as PILImage

from tests.policy.helpers import policy
from webrl.actions import Action, ParseError
from webrl.policy.generator import SamplingConfig
from webrl.policy.loci.policy import (LociConfig, LociPolicy, gather_evidence, map_action, parse_critic, parse_locator)
from webrl.policy.loci.geometry import (box_to_pixels, clamp_box, composite_layout, crop_box_to_full, crop_to_full,
                                        full_to_crop, render_composite, upscaled_size)
from webrl.policy.loci.roles import ModelRole, loci_answer, loci_policy
from webrl.policy.loci.synthetic import SyntheticVqaConfig, is_correct, make_vqa_item
from webrl.policy.types import Decision, Observation, PolicyRequest
from webrl.types import Image

SMALL = dict(crop_min_pixels=4 * 28 * 28, crop_max_pixels=16 * 28 * 28)


# ---------------------------------------------------------------------------------------------
# geometry
# ---------------------------------------------------------------------------------------------
def test_box_to_pixels_and_clamping():
    # 0-1000 on a 1600x1200 image: x * 1.6, y * 1.2
    assert box_to_pixels((100, 200, 500, 1000), 1600, 1200, "normalized_1000") == (160, 240, 800, 1200)
    assert box_to_pixels((1, 2, 3, 4), 10, 10, "pixels") == (1, 2, 3, 4)
    # floor the low corner, ceil the high one, clip to [0, 25] x [0, 15]
    assert clamp_box((-5.5, 10.2, 30.1, 20), 25, 15) == (0, 10, 25, 15)
    assert clamp_box((20, 12, 10, 2), 25, 15) == (10, 2, 20, 12)  # corners sorted
    assert clamp_box((30, 1, 40, 5), 25, 15) is None  # fully right of the image
    assert clamp_box((3, 3, 5, 20), 25, 15, min_side=4) is None  # 2 px wide
    assert clamp_box((0, 0, 25, 15), 25, 15) == (0, 0, 25, 15)  # the whole image, edges included
    with pytest.raises(ValueError, match="box space"):
        box_to_pixels((0, 0, 1, 1), 5, 5, "relative")


def test_upscaled_size_is_smart_resize():
    # 56x28 crop, factor 28, min 3136: area 1568 < 3136 -> beta = sqrt(2);
    # h = ceil(28 * 1.414 / 28) * 28 = 56, w = ceil(56 * 1.414 / 28) * 28 = 84
    assert upscaled_size((10, 10, 66, 38), 28, 4 * 28 * 28, 100 * 28 * 28) == (84, 56)


def test_crop_point_mapping_hand_values_and_round_trip():
    box, size = (100, 200, 156, 228), (84, 56)  # 56x28 crop shown at 84x56 (x1.5, x2)
    assert crop_to_full((0, 0), box, size) == (100, 200)
    assert crop_to_full((84, 56), box, size) == (156, 228)  # far edges map to the box's far edges
    assert crop_to_full((42, 28), box, size) == (128, 214)  # 100 + 42/1.5, 200 + 28/2
    assert crop_box_to_full((0, 28, 42, 56), box, size) == (100, 214, 128, 228)
    for p in [(0.0, 0.0), (83.9, 55.9), (13.3, 41.7)]:
        back = full_to_crop(crop_to_full(p, box, size), box, size)
        assert back == pytest.approx(p, abs=1e-9)


def test_composite_layout_and_mapping():
    # W, H = 200, 100; one 50x25 box; panel 100; cell 100x100; s = min(100/50, 100/25) = 2
    layout = composite_layout(200, 100, [(10, 20, 60, 45)])
    (t,) = layout.tiles
    assert layout.canvas_size == (300, 100) and (t.ox, t.oy, t.width, t.height) == (200, 25, 100, 50)
    assert layout.to_full(100, 30) == (100, 30)  # on the original: unchanged
    assert layout.to_full(250, 50) == (35, 32.5)  # tile (50, 25) -> (10 + 50/2, 20 + 25/2)
    assert layout.to_full(200, 25) == (10, 20)  # tile corner -> box corner
    assert layout.to_full(250, 5) == (199, 5)  # panel background: clamped to the right edge
    # two boxes: cells of height 50, stacked; 100x50 box: s = min(1, 1) = 1; 10x10 box: s = min(10, 5) = 5
    two = composite_layout(200, 100, [(0, 0, 100, 50), (0, 0, 10, 10)])
    assert [(x.oy, x.width, x.height) for x in two.tiles] == [(0, 100, 50), (50, 50, 50)]
    assert two.tiles[1].ox == 200 + (100 - 50) // 2


def test_render_composite_pastes_the_full_resolution_crop():
    img = PILImage.new("RGB", (200, 100), (0, 0, 0))
    img.paste((255, 0, 0), (10, 20, 60, 45))  # the boxed region is red
    canvas = render_composite(img, composite_layout(200, 100, [(10, 20, 60, 45)]))
    assert canvas.size == (300, 100)
    assert canvas.getpixel((250, 50)) == (255, 0, 0) and canvas.getpixel((250, 10)) == (255, 255, 255)
    assert canvas.getpixel((5, 5)) == (0, 0, 0)


# ---------------------------------------------------------------------------------------------
# parsing and the loop with scripted roles
# ---------------------------------------------------------------------------------------------
class Scripted:
    """A role replying from a list (the last reply repeats); records (system, user, images)."""

    def __init__(self, *replies):
        self.replies, self.calls = list(replies), []

    def __call__(self, system, user, images):
        self.calls.append((system, user, list(images)))
        reply = self.replies[min(len(self.calls), len(self.replies)) - 1]
        if isinstance(reply, Exception):
            raise reply
        return reply if isinstance(reply, str) else json.dumps(reply)


def _image(w=400, h=300):
    return Image.from_pil(PILImage.new("RGB", (w, h), (90, 120, 150)))


def critic_says(n=1, sufficient=False, missing=""):
    return {"relevant": [True] * n, "sufficient": sufficient, "missing": missing}


def test_parse_locator_and_critic_are_strict():
    assert parse_locator('thinking... {"boxes": [[1, 2, 3, 4], [5, 6, 7, 8]]}', 1) == [(1, 2, 3, 4)]
    assert parse_locator('{"boxes": []}', 3) == []
    for bad in ['{"boxes": [[1, 2, 3]]}', '{"boxes": [[1, 2, 3, true]]}', '{"boxes": [], "x": 1}', "no json",
                '{"boxes": [[1,2,3,4]]', '[1, 2]']:
        assert isinstance(parse_locator(bad, 3), ParseError), bad
    assert parse_critic(json.dumps(critic_says(2, True, " a ")), 2).missing == "a"
    assert isinstance(parse_critic(json.dumps(critic_says(1)), 2), ParseError)  # wrong length
    assert isinstance(parse_critic('{"relevant": [1], "sufficient": false, "missing": ""}', 1), ParseError)


def test_loop_stops_at_the_round_limit():
    loc, cri = Scripted({"boxes": [[0, 0, 500, 500]]}), Scripted(critic_says(missing="more"))
    ev = gather_evidence(_image(), "q", loc, cri, LociConfig(max_rounds=3, **SMALL))
    s = ev.stats
    assert (s.rounds, s.locator_calls, s.critic_calls, s.sufficient) == (3, 3, 3, False)
    assert s.parse_failures == 0 and len(ev.crops) == 1  # the same box each round is accepted once
    assert ev.crops[0].box == (0, 0, 200, 150)  # 0-500 of 1000 on 400x300


def test_loop_stops_when_sufficient():
    loc = Scripted({"boxes": [[0, 0, 100, 100]]}, {"boxes": [[500, 500, 600, 700], [900, 900, 950, 950]]})
    cri = Scripted(critic_says(1), {"relevant": [True, False], "sufficient": True, "missing": ""})
    ev = gather_evidence(_image(), "q", loc, cri, LociConfig(max_rounds=5, **SMALL))
    assert (ev.stats.rounds, ev.stats.calls, ev.stats.sufficient) == (2, 4, True)
    assert [c.box for c in ev.crops] == [(0, 0, 40, 30), (200, 150, 240, 210)]  # the irrelevant one dropped
    assert len(cri.calls[1][2]) == 2 and cri.calls[1][2][0].size == upscaled_size((200, 150, 240, 210), 28,
                                                                                   **{"min_pixels": SMALL["crop_min_pixels"], "max_pixels": SMALL["crop_max_pixels"]})


def test_critic_missing_text_reaches_the_next_locator_prompt():
    loc = Scripted({"boxes": [[0, 0, 100, 100]]})
    cri = Scripted(critic_says(missing="the price tag near the bottom"), critic_says(sufficient=True))
    ev = gather_evidence(_image(), "What is the price?", loc, cri, LociConfig(max_rounds=3, **SMALL))
    assert "the price tag near the bottom" not in loc.calls[0][1]
    assert "the price tag near the bottom" in loc.calls[1][1] and "What is the price?" in loc.calls[1][1]
    assert "[0, 0, 100, 100]" in loc.calls[1][1]  # the boxes already tried, in the Locator's space
    assert ev.locator_feedback[1] in loc.calls[1][1]


def test_malformed_outputs_retry_once_then_proceed():
    # round 1: locator garbage twice -> no evidence, no critic call; round 2: garbage then valid;
    # critic: garbage then valid (sufficient)
    loc = Scripted("garbage", "still garbage", "{bad", {"boxes": [[0, 0, 500, 500]]})
    cri = Scripted("nope", critic_says(sufficient=True))
    ev = gather_evidence(_image(), "q", loc, cri, LociConfig(max_rounds=3, **SMALL))
    s = ev.stats
    assert (s.rounds, s.locator_calls, s.locator_parse_failures) == (2, 4, 3)
    assert (s.critic_calls, s.critic_parse_failures, s.sufficient, len(ev.crops)) == (2, 1, True, 1)
    # a critic that never parses and a role that raises: nothing escapes, nothing accepted
    ev = gather_evidence(_image(), "q", Scripted({"boxes": [[0, 0, 100, 100]]}), Scripted(RuntimeError("down")),
                         LociConfig(max_rounds=2, retries=1, **SMALL))
    assert (ev.stats.critic_calls, ev.stats.critic_parse_failures, ev.crops) == (4, 4, [])


def test_config_validation_names_the_field():
    for kw, field in [({"max_rounds": 0}, "max_rounds"), ({"box_space": "rel"}, "box_space"),
                      ({"locator": "gpt"}, "locator"), ({"critic": "ftp://x"}, "critic"),
                      ({"retries": -1}, "retries"), ({"crop_min_pixels": 10, "crop_max_pixels": 5}, "crop_min_pixels"),
                      ({"prompt_version": "v9"}, "prompt_version")]:
        with pytest.raises(ValueError, match=field):
            LociConfig(**kw)


# ---------------------------------------------------------------------------------------------
# the wrapper
# ---------------------------------------------------------------------------------------------
class Inner:
    """Clicks at a fixed composite point (or an element); records the requests it saw."""

    def __init__(self, action):
        self.action, self.seen = action, []

    def act(self, requests):
        self.seen.extend(requests)
        return [Decision(self.action, "text") for _ in requests]


def test_wrapper_maps_crop_coordinates_back():
    obs = Observation(goal="find it", screenshot=_image(200, 100))
    loc, cri = Scripted({"boxes": [[10, 20, 60, 45]]}), Scripted(critic_says(sufficient=True))
    inner = Inner(Action.click_at(250, 50))
    cfg = LociConfig(box_space="pixels", **SMALL)
    (d,) = LociPolicy(inner, cfg, loc, cri).act([PolicyRequest(obs)])
    assert inner.seen[0].observation.screenshot.size == (300, 100)  # original + 100 px panel
    assert (d.action.x, d.action.y) == (35, 32.5)  # see test_composite_layout_and_mapping
    assert d.loci.calls == 2 and d.loci.crops_accepted == 1
    assert map_action(Action.click(3), lambda x, y: (0, 0)) == Action.click(3)
    # no accepted crop, or no screenshot: the inner policy gets the request unchanged
    rej = LociPolicy(Inner(Action.click_at(5, 5)), cfg, loc, Scripted({"relevant": [False], "sufficient": False,
                                                                       "missing": ""}))
    req = PolicyRequest(obs)
    (d,) = rej.act([req])
    assert rej.inner.seen[0] is req and (d.action.x, d.action.y) == (5, 5)
    (d,) = rej.act([PolicyRequest(Observation(goal="g"))])
    assert d.loci.calls == 0


def test_synthetic_vqa_items():
    a, b = make_vqa_item(3), make_vqa_item(3)
    assert a.image.data == b.image.data and a.answer == b.answer and a.image.size == (1600, 1200)
    x0, y0, x1, y1 = a.target_box
    assert 0 <= x0 < x1 <= 1600 and 0 <= y0 < y1 <= 1200 and len(a.answer) == 5
    assert is_correct(f'"{a.answer.lower()}".', a.answer) and not is_correct("", a.answer)


@pytest.fixture(scope="module")
def tiny_generator(tiny_qwen25vl_path):
    return policy(tiny_qwen25vl_path, sampling=SamplingConfig(greedy=True, max_new_tokens=6))


def test_end_to_end_tiny_model_roles_on_a_vqa_item(tiny_generator):
    """Random weights: every role reply is malformed, yet a decision and an answer come back."""
    item = make_vqa_item(0, SyntheticVqaConfig(width=400, height=300, clutter=20))
    role = ModelRole.from_generator(tiny_generator, max_new_tokens=8)
    cfg = LociConfig(max_rounds=2, **SMALL)
    pol = loci_policy(tiny_generator, cfg, max_new_tokens=8)  # role source "policy": the generator's model
    assert isinstance(pol.locator, ModelRole) and pol.locator.model is tiny_generator.model
    (d,) = pol.act([PolicyRequest(Observation(goal=item.question, screenshot=item.image))])
    assert isinstance(d, Decision) and d.response_ids and d.loci.rounds == 2
    assert d.loci.locator_calls == 4 and d.loci.locator_parse_failures == 4 and d.loci.error == ""
    res = loci_answer(item.image, item.question, role, role, role, cfg)
    assert isinstance(res.answer, str) and res.calls == 5 and res.answer_error == ""
    assert loci_answer(item.image, item.question, role, use_loci=False).calls == 1


def test_composes_with_the_cascade(tiny_qwen25vl_path):
    """LociPolicy(CascadePolicy(...)): element boxes stay valid on the composite (original at scale 1)."""
    from webrl.policy.cascade.policy import CascadeConfig, CascadeDecision, CascadePolicy
    from webrl.policy.cascade.heads import DecisionHeads, HeadsConfig
    from webrl.policy.cascade.synthetic import make_steps

    gen = policy(tiny_qwen25vl_path, sampling=SamplingConfig(greedy=True, max_new_tokens=6), action_format="som",
                 think=False)
    heads = DecisionHeads(gen.model.config.text_config.hidden_size, HeadsConfig())
    cascade = CascadePolicy(gen, heads, CascadeConfig(threshold=0.0))
    req = make_steps(1, seed=2)[0].request
    loc, cri = Scripted({"boxes": [[0, 0, 300, 300]]}), Scripted(critic_says(sufficient=True))
    (d,) = LociPolicy(cascade, LociConfig(**SMALL), loc, cri).act([req])
    assert isinstance(d, CascadeDecision) and d.decided_by in ("heads", "heads+write")
    assert d.loci.crops_accepted == 1 and d.images[-1].size[0] > req.observation.screenshot.size[0]
    # the heads' proposal is executed as is (element ids need no mapping)
    assert d.action is not None and (d.action.kind, d.action.element) == (d.proposal.kind, d.proposal.element)
    assert d.action.element is None or d.action.element in {e.id for e in req.observation.elements}


def test_endpoint_roles_against_a_local_server():
    """All three roles over one OpenAI-compatible server on 127.0.0.1; replies chosen by the system prompt."""
    from tests.chat_stub import chat_reply, chat_server
    from webrl.policy.loci.roles import make_roles

    seen = []

    def respond(path, body):
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        seen.append(sum(p["type"] == "image_url" for p in user))
        reply = ({"boxes": [[0, 0, 500, 500]]} if system.startswith("You are the Locator")
                 else critic_says(sufficient=True) if system.startswith("You are the Critic") else "ABCDE")
        return chat_reply(reply if isinstance(reply, str) else json.dumps(reply))

    with chat_server(respond) as url:
        cfg = LociConfig(locator=url, critic=url, **SMALL)
        locator, critic = make_roles(cfg)
        res = loci_answer(_image(), "q?", locator, locator, critic, cfg)
        assert res.answer == "ABCDE" and res.calls == 3 and len(res.evidence.crops) == 1
        assert seen == [1, 1, 2]  # Locator: whole image; Critic: one crop; answerer: whole image + crop


def test_model_role_prompt_is_the_prompt_builders_chatml():
    """The local role's prompt text, written out by hand: system turn, then images before the user text."""
    from webrl.policy.loci.roles import role_prompt

    img = _image()
    assert role_prompt("You are the Locator.", "Find the sign.", [img, img]) == (
        "<|im_start|>system\nYou are the Locator.<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|><|vision_start|><|image_pad|><|vision_end|>"
        "Find the sign.<|im_end|>\n<|im_start|>assistant\n")
    assert role_prompt("S", "U", []) == ("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
                                         "<|im_start|>assistant\n")


def test_endpoint_role_failures_raise_with_the_category():
    from webrl.chat import ChatClientError
    from webrl.policy.loci.roles import EndpointRole

    role = EndpointRole("http://127.0.0.1:9/v1", timeout_s=2, max_retries=0)  # discard port: refused
    with pytest.raises(ChatClientError) as e:
        role("S", "U", [])
    assert e.value.category == "connection_error" and role.client.stats == {"requests": 1, "retries": 0}


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.timeout(600)
def test_sandbox_episode_through_webenv(tiny_qwen25vl_path, browser_session):
    """LociPolicy(CascadePolicy) steps a sandbox task in WebEnv: scripted roles accept a crop, then tiny-model roles."""
    import numpy as np

    from webrl.envs import WebEnv, WebEnvConfig
    from webrl.envs.sites.source import SandboxTaskSource
    from webrl.policy.cascade.policy import CascadeConfig, CascadePolicy
    from webrl.policy.types import MarkedObservation
    from webrl.policy.cascade.heads import DecisionHeads, HeadsConfig

    gen = policy(tiny_qwen25vl_path, sampling=SamplingConfig(greedy=True, max_new_tokens=6), action_format="som",
                 think=False)
    cascade = CascadePolicy(gen, DecisionHeads(gen.model.config.text_config.hidden_size, HeadsConfig()),
                            CascadeConfig(threshold=0.0))
    tiny_role = ModelRole.from_generator(gen, max_new_tokens=8)
    wrappers = [LociPolicy(cascade, LociConfig(**SMALL), Scripted({"boxes": [[0, 0, 500, 300]]}),
                           Scripted(critic_says(sufficient=True))),
                LociPolicy(cascade, LociConfig(max_rounds=1, **SMALL), tiny_role, tiny_role)]
    task = SandboxTaskSource(sites=("shop",), levels=(1,), split="test").sample(np.random.default_rng(0))
    env = WebEnv(WebEnvConfig.from_dict({"browser": {"viewport": "small"}}), session=browser_session)
    try:
        obs, info = env.reset(options={"task": task})
        history = []
        for wrapper in wrappers:
            observation = MarkedObservation.from_env(obs, info)
            d = wrapper.act([PolicyRequest(observation, list(history))])[0]
            assert d.action is not None and d.loci.error == ""
            history.append(d.to_turn(observation))
            obs, reward, terminated, truncated, info = env.step(d.action)
            if terminated or truncated:
                break
        assert wrappers[0].last_stats[0].crops_accepted == 1
        assert history[0].images[-1].size[0] > observation.screenshot.size[0]  # the composite was seen
    finally:
        env.close()


def test_nothing_escapes_the_wrapper_or_the_vqa_mode():
    """An unreadable screenshot: the search fails, the error is recorded, the inner policy still decides."""
    broken = Observation(goal="g", screenshot=Image(b"not a png"))
    inner = Inner(Action.click_at(1, 2))
    (d,) = LociPolicy(inner, LociConfig(**SMALL), Scripted({"boxes": []}), Scripted(critic_says())).act(
        [PolicyRequest(broken)])
    assert d.loci.error and (d.action.x, d.action.y) == (1, 2) and inner.seen[0].observation is broken
    res = loci_answer(_image(), "q", Scripted(RuntimeError("down")), Scripted({"boxes": []}), Scripted(critic_says()),
                      LociConfig(max_rounds=2, **SMALL))
    # an empty box list parses: 2 rounds x 1 Locator call, no Critic call; the answerer error is recorded
    assert res.answer == "" and "down" in res.answer_error and res.evidence.stats.calls == 2

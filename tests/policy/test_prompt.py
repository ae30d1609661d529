"""Prompt rendering: golden renders, context modes, K screenshots, token budget, exact token counts."""
import pytest

from tests.policy.helpers import episode, observation, policy
from webrl.actions import Action
from webrl.policy import Decision, PolicyRequest, PromptBuilder, PromptConfig, make_format, render_chatml

FAMILIES = ["qwen2.5-vl", "qwen3-vl"]

GOLDEN_AFTER_SYSTEM = """<|im_start|>user
Task: Buy a blue mug<|im_end|>
<|im_start|>user
<|vision_start|><|image_pad|><|vision_end|>Step 0
URL: http://127.0.0.1:8000/page/0
Title: Page 0<|im_end|>
<|im_start|>assistant
<think>Search first.</think><tool_call>{"name": "browser", "arguments": {"action": "type", "element": 1, "text": "blue mug"}}</tool_call><|im_end|>
<|im_start|>user
<tool_response>
Succeed: action 0 done
</tool_response><|im_end|>
<|im_start|>user
<|vision_start|><|image_pad|><|vision_end|>Step 1
URL: http://127.0.0.1:8000/page/1
Title: Page 1
Elements:
[0] link "Blue mug 1"
[1] textbox "Search"<|im_end|>
<|im_start|>assistant
"""


@pytest.fixture(scope="module", params=FAMILIES)
def family_policy(request, tiny_model_paths):
    return request.param, policy(tiny_model_paths[request.param], num_screenshots=2)


def golden_request(fmt):
    first = observation(0)
    turn = Decision(Action.type_text("blue mug", 1), "<think>Search first.</think>" +
                    fmt.render(Action.type_text("blue mug", 1)), images=[first.screenshot]).to_turn(first)
    return PolicyRequest(observation(1), [turn])


def test_golden_render_and_token_ids(family_policy):
    family, pol = family_policy
    prompt = pol.builder.render(golden_request(pol.builder.format))
    system = f"<|im_start|>system\n{pol.builder.system_prompt}<|im_end|>\n"
    assert prompt.text == system + GOLDEN_AFTER_SYSTEM
    ids = pol.prompt_ids(prompt)
    # 320x200 screenshots, max 50176 px: qwen2.5-vl (factor 28) -> 168x280 = 6*10 = 60 tokens;
    # qwen3-vl (factor 32): 192x320 = 61440 > 50176, beta = 1.129 -> 160x256 = 5*8 = 40 tokens.
    per_image = {"qwen2.5-vl": 60, "qwen3-vl": 40}[family]
    pad = pol.processor.image_token_id
    assert ids.count(pad) == 2 * per_image
    assert prompt.num_tokens == len(ids)  # the budget counts exactly what the model reads
    collapsed = pol.tokenizer.decode([t for i, t in enumerate(ids) if t != pad or ids[i - 1] != pad])
    assert collapsed == prompt.text


def test_chatml_render_equals_the_tokenizer_chat_template(family_policy):
    _, pol = family_policy
    msgs = pol.builder.render(golden_request(pol.builder.format)).messages
    as_dicts = [{"role": m.role, "content": [{"type": "text", "text": p} if isinstance(p, str) else {"type": "image"}
                                             for p in m.parts]} for m in msgs]
    expected = pol.tokenizer.apply_chat_template(as_dicts, tokenize=False, add_generation_prompt=True)
    assert render_chatml(msgs)[0] == expected


@pytest.mark.parametrize("mode, n, expect_think", [
    ("full", 0, [True, True, True, True]), ("hide_thinking", 0, [False] * 4),
    ("action_only", 0, [False] * 4), ("last_n_reasoning", 2, [False, False, True, True]),
])
def test_context_modes_keep_thinking_where_the_mode_says(mode, n, expect_think):
    builder = PromptBuilder(PromptConfig(context_mode=mode, reasoning_turns=n))
    turns, current = episode(4, builder.format)
    msgs = builder.messages(PolicyRequest(current, turns))
    assistant = ["".join(m.parts) for m in msgs if m.role == "assistant"]
    assert [a.startswith("<think>") for a in assistant] == expect_think
    for a, t in zip(assistant, turns):
        assert a.endswith(builder.format.render(t.action))  # the call itself is always kept
        if mode == "action_only":
            assert a == builder.format.render(t.action)


@pytest.mark.parametrize("k", [0, 1, 3])
def test_last_k_screenshots(k):
    builder = PromptBuilder(PromptConfig(num_screenshots=k))
    turns, current = episode(5, builder.format)
    prompt = builder.render(PolicyRequest(current, turns))
    expected = [t.images[-1] for t in turns[5 - (k - 1):]] + [current.screenshot] if k else []
    assert prompt.images == expected
    assert prompt.text.count("<|image_pad|>") == k


def test_parse_errors_and_feedback_become_tool_responses():
    builder = PromptBuilder(PromptConfig())
    obs0 = observation(0)
    bad = Decision(builder.format.parse("click it"), "click it", images=[obs0.screenshot]).to_turn(obs0)
    obs1 = observation(1, last_action_error="element 9 is hidden")
    ok = Decision(Action.click(0), builder.format.render(Action.click(0)), images=[obs1.screenshot]).to_turn(obs1)
    current = observation(2, feedback="Succeed: clicked", last_action_error="")
    tools = ["".join(m.parts) for m in builder.messages(PolicyRequest(current, [bad, ok])) if m.role == "tool"]
    assert tools == ["Invalid action: no <tool_call>...</tool_call> found", "Succeed: clicked"]


@pytest.mark.parametrize("family", FAMILIES)
def test_budget_at_turn_30_drops_oldest_history_first(family, tiny_model_paths):
    pol = policy(tiny_model_paths[family], num_screenshots=1, context_mode="full")
    turns, _ = episode(30, pol.builder.format)
    at = {t: pol.builder.render(PolicyRequest(observation(t), turns[:t])) for t in (5, 6)}
    per_turn = at[6].num_tokens - at[5].num_tokens  # one more past turn costs this much
    budget = at[5].num_tokens + per_turn // 2  # turn 5 fits, turn 6 does not
    pol.builder.config.max_prompt_tokens = budget
    p5, p30 = (pol.builder.render(PolicyRequest(observation(t), turns[:t])) for t in (5, 30))
    assert p5.history_dropped == 0 and p5.num_tokens == at[5].num_tokens
    assert p30.num_tokens <= budget and not p30.over_budget
    assert abs(p30.num_tokens - p5.num_tokens) <= 2 * per_turn  # about the same length as turn 5
    assert len(pol.prompt_ids(p30)) == p30.num_tokens
    # the most recent turns are kept, the oldest dropped: steps 30 - kept .. 29 appear, earlier ones not
    kept = 30 - p30.history_dropped
    assert 0 < kept < 30
    assert f"Step {p30.history_dropped}\n" in p30.text and f"Step {p30.history_dropped - 1}\n" not in p30.text
    assert f"(Steps before step {p30.history_dropped} are omitted" in p30.text
    assert p30.text.count("<|image_pad|>") == 1


@pytest.mark.parametrize("size", [(320, 200), (640, 480), (57, 1000), (1280, 1000)])
def test_prompt_ids_without_pixels_equal_the_processor(family_policy, size):
    """`prompt_ids` expands placeholders from image headers only; the processor decodes and
    resizes the pixels. Both must give the same ids (odd sizes exercise smart_resize's rounding)."""
    import numpy as np

    from webrl.types import Image

    _, pol = family_policy
    import dataclasses

    request = golden_request(pol.builder.format)
    shot = Image.from_array(np.full((size[1], size[0], 3), 200, dtype=np.uint8))
    for turn in request.history:
        turn.images = [shot]
    request = dataclasses.replace(request, observation=dataclasses.replace(request.observation, screenshot=shot))
    prompt = pol.builder.render(request)
    assert len(prompt.images) == 2
    assert pol.prompt_ids(prompt) == pol.encode([prompt])["input_ids"][0].tolist()

"""Action formats: round trips, tolerant-but-strict parsing, fuzzing with zero exceptions."""
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.policy.strategies import H, W, actions, json_values
from webrl.actions import Action, ParseError
from webrl.policy.computer_use import _ARGS
from webrl.policy.formats import extract_call, make_format, strip_thinking
from webrl.policy.images import FAMILY_FACTOR, ImageGeometry

FAMILIES = ["qwen2.5-vl", "qwen3-vl"]


def geometry(family, width=W, height=H, max_pixels=28 * 28 * 1280):
    return ImageGeometry.of(width, height, FAMILY_FACTOR[family], 56 * 56, max_pixels)


@pytest.mark.parametrize("name", ["som", "compact"])
@given(action=actions)
@settings(max_examples=150, deadline=None)
def test_element_formats_round_trip_exactly(name, action):
    fmt = make_format(name)
    text = fmt.render(action)
    assert text.startswith("<tool_call>") and text.endswith("</tool_call>")
    assert fmt.parse(text) == action
    assert fmt.parse(f"<think>I should do it.\n</think>\n  {text}  \n") == action


@pytest.mark.parametrize("family", FAMILIES)
@given(action=actions)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
def test_computer_use_round_trip_through_smart_resize(family, action):
    fmt, g = make_format("computer_use", family), geometry(family)
    if not fmt.can_render(action):
        with pytest.raises(ValueError, match="not expressible"):
            fmt.render(action, g)
        return
    text = fmt.render(action, g)
    back = fmt.parse(text, g)
    assert isinstance(back, Action), back
    assert fmt.render(back, g) == text  # model coordinates survive exactly
    # screenshot points come back within half a model unit: W / (2 W') px, or W / 2000 px
    sx, sy = g.model_extent(fmt.space)
    tol_x, tol_y = W / (2 * sx) + 1e-9, H / (2 * sy) + 1e-9
    for fx, fy in (("x", "y"), ("to_x", "to_y")):
        if getattr(action, fx) is not None:
            assert abs(getattr(back, fx) - getattr(action, fx)) <= tol_x
            assert abs(getattr(back, fy) - getattr(action, fy)) <= tol_y
    same = {k: v for k, v in action.to_dict().items() if k not in ("x", "y", "to_x", "to_y")}
    assert {k: v for k, v in back.to_dict().items() if k not in ("x", "y", "to_x", "to_y")} == same


def test_coordinate_mapping_by_hand():
    # 1280x720, factor 28, max 1280*28*28 = 1003520 px: round(720/28)=26 -> 728, round(1280/28)=46 -> 1288;
    # 728*1288 = 937664 <= 1003520, kept. Model x 644 -> 644 * 1280 / 1288 = 640.0 px.
    g25 = geometry("qwen2.5-vl")
    assert (g25.resized_width, g25.resized_height) == (1288, 728)
    cu25 = make_format("computer_use", "qwen2.5-vl")
    a = cu25.parse('<tool_call>{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [644, 364]}}'
                   '</tool_call>', g25)
    assert (a.x, a.y) == (640.0, 360.0)
    # Qwen3-VL: 0..1000 of the screenshot: [500, 500] -> (640, 360); [1000, 1000] -> (1280, 720)
    cu3 = make_format("computer_use", "qwen3-vl")
    g3 = geometry("qwen3-vl")
    a = cu3.parse('<tool_call>{"name": "computer_use", "arguments": {"action": "double_click", '
                  '"coordinate": [500, 500]}}</tool_call>', g3)
    assert (a.x, a.y, a.clicks) == (640.0, 360.0, 2)
    assert cu3.render(Action.click_at(1280, 720), g3).count("[1000, 1000]") == 1
    # outside the image is an error: 1289 > W' = 1288
    bad = cu25.parse('<tool_call>{"name": "computer_use", "arguments": {"action": "left_click", '
                     '"coordinate": [1289, 10]}}</tool_call>', g25)
    assert isinstance(bad, ParseError) and "outside" in bad.message


@pytest.mark.parametrize("text, expect", [
    # tolerant: whitespace, reasoning, fences, a closing tag cut by the stop string
    ('<think>x</think><tool_call>\n {"name": "browser", "arguments": {"action": "click", "element": 3}} \n'
     '</tool_call>', Action.click(3)),
    ('I will click.\n<tool_call>```json\n{"name": "browser", "arguments": {"action": "stop"}}\n```</tool_call>',
     Action.stop()),
    ('<tool_call>{"name": "browser", "arguments": {"action": "click", "element": 3.0}}', Action.click(3)),
    # strict: errors with a message
    ('<tool_call>{"name": "browser", "arguments": {"action": "click", "element": 3.5}}</tool_call>', "element"),
    ('<tool_call>{"name": "browser", "arguments": {"action": "click", "id": 3}}</tool_call>', "invalid click"),
    ('<tool_call>{"name": "browser", "arguments": {"action": "fly"}}</tool_call>', "unknown action"),
    ('<tool_call>{"name": "search", "arguments": {"action": "stop"}}</tool_call>', "unknown tool"),
    ('<tool_call>{"name": "browser", "arguments": {"action": "click", "element": 3}</tool_call>', "not valid JSON"),
    ('click(3)', "no <tool_call>"),
    ('<tool_call>{"name": "browser", "arguments": {"action": "stop"}}</tool_call>'
     '<tool_call>{"name": "browser", "arguments": {"action": "stop"}}</tool_call>', "one <tool_call>"),
    ('<think><tool_call>{"name": "browser", "arguments": {"action": "stop"}}</tool_call></think>', "no <tool_call>"),
])
def test_som_parser_tolerant_of_form_strict_on_meaning(text, expect):
    got = make_format("som").parse(text)
    if isinstance(expect, Action):
        assert got == expect
    else:
        assert isinstance(got, ParseError) and expect in got.message, got


def test_compact_and_computer_use_errors_are_values():
    assert isinstance(make_format("compact").parse("<tool_call>click(</tool_call>"), ParseError)
    assert make_format("compact").parse("<tool_call> type(5, \"a b\") </tool_call>") == Action.type_text("a b", 5)
    cu = make_format("computer_use", "qwen2.5-vl")
    no_geometry = cu.parse('<tool_call>{"name": "computer_use", "arguments": {"action": "left_click", '
                           '"coordinate": [1, 2]}}</tool_call>', None)
    assert isinstance(no_geometry, ParseError) and "screenshot" in no_geometry.message
    extra = cu.parse('<tool_call>{"name": "computer_use", "arguments": {"action": "go_back", "x": 1}}</tool_call>')
    assert isinstance(extra, ParseError) and "go_back takes" in extra.message
    assert not cu.can_render(Action.click(3)) and not cu.can_render(Action.select(1, "a"))


def test_strip_thinking_and_extract_call():
    assert strip_thinking("<think>a\nb</think>\n<tool_call>x</tool_call>") == "<tool_call>x</tool_call>"
    assert strip_thinking("<think>unclosed <tool_call>x</tool_call>") == "<tool_call>x</tool_call>"
    assert extract_call("blah <tool_call> x </tool_call> tail") == "x"


@st.composite
def tool_call_texts(draw):
    verb = draw(st.sampled_from(sorted(_ARGS) + ["click", "type", "scroll", "fly", ""]))
    keys = draw(st.lists(st.sampled_from(["coordinate", "start_coordinate", "text", "keys", "direction", "amount",
                                          "element", "tab", "time", "url", "status", "clear", "button", "clicks"]),
                         max_size=4))
    args = {k: draw(json_values | st.lists(st.integers(-5, 2000), min_size=2, max_size=2)) for k in keys}
    name = draw(st.sampled_from(["browser", "computer_use", "x"]))
    body = json.dumps({"name": name, "arguments": {"action": verb, **args}})
    cut = draw(st.integers(0, len(body)))
    tail = draw(st.sampled_from(["</tool_call>", "", "</tool_call><tool_call>{}</tool_call>"]))
    return draw(st.sampled_from(["", "<think>hm</think>"])) + "<tool_call>" + draw(
        st.sampled_from([body, body[:cut]])) + tail


@given(text=st.one_of(st.text(max_size=200), tool_call_texts()),
       family=st.sampled_from(FAMILIES), with_geometry=st.booleans())
@settings(max_examples=500, deadline=None)
def test_fuzz_parsers_never_raise(text, family, with_geometry):
    g = geometry(family) if with_geometry else None
    for name in ("som", "computer_use", "compact"):
        out = make_format(name, family).parse(text, g)
        assert isinstance(out, (Action, ParseError))

"""The `skill` action in every action format: exact grammar, round trips, malformed calls."""
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.policy.strategies import H, W
from webrl.actions import Action, ParseError
from webrl.policy.formats import FORMAT_NAMES, make_format
from webrl.policy.images import FAMILY_FACTOR, ImageGeometry

names = st.sampled_from(["s", "search_products", "_open2", "Query", "item_name"])
skill_actions = st.builds(Action.skill, names, st.dictionaries(names, st.text(max_size=12), max_size=3))
SEARCH = Action.skill("search_products", {"query": "blue mug"})
FORMATS = [("som", "qwen2.5-vl"), ("compact", "qwen2.5-vl"), ("pointer", "qwen2.5-vl"),
           ("computer_use", "qwen2.5-vl"), ("computer_use", "qwen3-vl")]


def geometry(family):
    return ImageGeometry.of(W, H, FAMILY_FACTOR[family], 56 * 56, 28 * 28 * 1280)


def test_every_format_is_covered():
    assert {name for name, _ in FORMATS} == set(FORMAT_NAMES)


@pytest.mark.parametrize("name, expected", [
    ("compact", '<tool_call>skill("search_products", query="blue mug")</tool_call>'),
    ("pointer", '<tool_call>skill("search_products", query="blue mug")</tool_call>'),
    ("som", '<tool_call>{"name": "browser", "arguments": {"action": "skill", "skill": "search_products", '
            '"args": {"query": "blue mug"}}}</tool_call>'),
    ("computer_use", '<tool_call>{"name": "computer_use", "arguments": {"action": "skill", '
                     '"skill": "search_products", "args": {"query": "blue mug"}}}</tool_call>'),
])
def test_exact_grammar(name, expected):
    fmt = make_format(name)
    assert fmt.can_render(SEARCH)
    assert fmt.render(SEARCH, geometry("qwen2.5-vl")) == expected
    assert fmt.parse(expected, geometry("qwen2.5-vl")) == SEARCH


@pytest.mark.parametrize("name, family", FORMATS)
@given(action=skill_actions)
@settings(max_examples=40, deadline=None)
def test_round_trip_in_every_format(name, family, action):
    fmt, g = make_format(name, family), geometry(family)
    text = fmt.render(action, g)
    assert fmt.parse(text, g) == action
    assert fmt.parse(f"<think>Use the skill.</think>\n{text}", g) == action


@pytest.mark.parametrize("tool", ["browser", "computer_use"])
def test_json_skill_call_without_args_means_no_arguments(tool):
    fmt = make_format("som" if tool == "browser" else "computer_use")
    call = {"name": tool, "arguments": {"action": "skill", "skill": "open_cart"}}
    assert fmt.parse(f"<tool_call>{json.dumps(call)}</tool_call>", geometry("qwen2.5-vl")) == Action.skill("open_cart")


@pytest.mark.parametrize("arguments, message", [
    ({"action": "skill"}, "skill"),  # som: 'needs "skill"'; computer_use: "required ['skill']"
    ({"action": "skill", "skill": ""}, 'needs "skill"'),
    ({"action": "skill", "skill": 3}, 'needs "skill"'),
    ({"action": "skill", "skill": "s", "args": ["a"]}, '"args" must be an object'),
    ({"action": "skill", "skill": "s", "args": {"query": 3}}, "'query' must be a string"),
    ({"action": "skill", "skill": "s", "args": {"query": None}}, "'query' must be a string"),
    ({"action": "skill", "skill": "bad name"}, "must be an identifier"),
    ({"action": "skill", "skill": "s", "text": "s"}, "text"),
])
@pytest.mark.parametrize("tool", ["browser", "computer_use"])
def test_malformed_json_skill_calls_are_parse_errors(tool, arguments, message):
    fmt = make_format("som" if tool == "browser" else "computer_use")
    parsed = fmt.parse("<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>",
                       geometry("qwen2.5-vl"))
    assert isinstance(parsed, ParseError), parsed
    assert message in parsed.message


@pytest.mark.parametrize("name", ["compact", "pointer"])
@pytest.mark.parametrize("body, message", [
    ("skill()", "one positional argument"),
    ('skill("search_products", query=3)', "argument 'query' must be a string"),
    ("skill(<e3>)", ("cannot read the arguments", "one positional argument")),  # pointer reads <e3> as 3
])
def test_malformed_compact_skill_calls_are_parse_errors(name, body, message):
    parsed = make_format(name).parse(f"<tool_call>{body}</tool_call>")
    if isinstance(message, tuple):
        message = message[name == "pointer"]
    assert isinstance(parsed, ParseError) and message in parsed.message, parsed

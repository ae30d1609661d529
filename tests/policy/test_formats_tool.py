"""The `tool` action in every action format: exact grammar, round trips, malformed calls."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.policy.strategies import H, W
from webrl.actions import Action, ParseError
from webrl.policy.formats import FORMAT_NAMES, make_format
from webrl.policy.images import FAMILY_FACTOR, ImageGeometry

names = st.sampled_from(["t", "search_catalog", "_find2", "Query"])
tool_actions = st.builds(Action.tool, names, st.dictionaries(names, st.text(max_size=12), max_size=3))
SEARCH = Action.tool("search_catalog", {"query": "blue mug"})
FORMATS = [("som", "qwen2.5-vl"), ("compact", "qwen2.5-vl"), ("pointer", "qwen2.5-vl"),
           ("computer_use", "qwen2.5-vl"), ("computer_use", "qwen3-vl")]


def geometry(family):
    return ImageGeometry.of(W, H, FAMILY_FACTOR[family], 56 * 56, 28 * 28 * 1280)


def test_every_format_is_covered():
    assert {name for name, _ in FORMATS} == set(FORMAT_NAMES)


@pytest.mark.parametrize("name, expected", [
    ("compact", '<tool_call>tool("search_catalog", query="blue mug")</tool_call>'),
    ("pointer", '<tool_call>tool("search_catalog", query="blue mug")</tool_call>'),
    ("som", '<tool_call>{"name": "browser", "arguments": {"action": "tool", "tool": "search_catalog", '
            '"args": {"query": "blue mug"}}}</tool_call>'),
    ("computer_use", '<tool_call>{"name": "computer_use", "arguments": {"action": "tool", '
                     '"tool": "search_catalog", "args": {"query": "blue mug"}}}</tool_call>'),
])
def test_exact_grammar(name, expected):
    fmt = make_format(name)
    assert fmt.can_render(SEARCH) and fmt.render(SEARCH, geometry("qwen2.5-vl")) == expected
    assert fmt.parse(expected, geometry("qwen2.5-vl")) == SEARCH


@settings(max_examples=60, deadline=None)
@given(tool_actions)
def test_round_trip_in_every_format(action):
    for name, family in FORMATS:
        fmt, g = make_format(name, family), geometry(family)
        assert fmt.parse(fmt.render(action, g), g) == action


@pytest.mark.parametrize("name", ["som", "computer_use"])
@pytest.mark.parametrize("arguments, message", [
    ('{"action": "tool"}', ('needs "tool"', "(required ['tool'])")),
    ('{"action": "tool", "tool": "t", "args": [1]}', '"args" must be an object'),
    ('{"action": "tool", "tool": "t", "skill": "s"}', ("a tool call takes", "tool takes ['args', 'tool']")),
    ('{"action": "tool", "tool": "bad name"}', "must be an identifier"),
])
def test_malformed_json_calls(name, arguments, message):
    tool = "browser" if name == "som" else "computer_use"
    parsed = make_format(name).parse(f'<tool_call>{{"name": "{tool}", "arguments": {arguments}}}</tool_call>',
                                     geometry("qwen2.5-vl"))
    if isinstance(message, tuple):  # som checks the call's fields itself; computer_use's verb table first
        message = message[name == "computer_use"]
    assert isinstance(parsed, ParseError) and message in parsed.message

"""The `tool` action kind: a skill call's shape (name + string keyword arguments) under another kind."""
import pytest

from webrl.actions import ACTION_KINDS, CALL_KINDS, Action, ActionError, ParseError, format_compact, parse_compact


def test_kind_order_keeps_the_atomic_kinds_indices():
    assert ACTION_KINDS.index("stop") == 18 and ACTION_KINDS[19:] == ("tool", "skill") and CALL_KINDS == ("skill", "tool")


def test_compact_round_trip_sorts_arguments_and_escapes():
    a = Action.tool("find_flights", {"origin": "Lisbon", "date": 'say "hi"\\'})
    text = format_compact(a)
    assert text == 'tool("find_flights", date="say \\"hi\\"\\\\", origin="Lisbon")'
    assert parse_compact(text) == a and parse_compact('tool("find_flights", origin="Lisbon", date="say \\"hi\\"\\\\")') == a
    assert Action.from_dict(a.to_dict()) == a and a.to_dict() == {"kind": "tool", "text": "find_flights",
                                                                   "args": {"date": 'say "hi"\\', "origin": "Lisbon"}}
    assert parse_compact('tool("open_cart")') == Action("tool", text="open_cart")
    assert Action.tool("x") != Action.skill("x")


@pytest.mark.parametrize("fields, message", [
    ({"text": "bad name"}, "a tool's name must be an identifier"),
    ({"text": "t", "args": {"q": 1}}, "argument 'q' must be a string"),
    ({"text": "t", "element": 3}, "tool takes no 'element'"),
])
def test_invalid_tool_actions(fields, message):
    with pytest.raises(ActionError, match=message):
        Action("tool", **fields)


@pytest.mark.parametrize("text, message", [
    ("tool()", "tool() takes the tool's name as its one positional argument"),
    ('tool("a", "b")', "one positional argument"),
    ('tool("a", q=3)', "argument 'q' must be a string in double quotes"),
    ('tool("bad name")', "must be an identifier"),
])
def test_malformed_calls_are_parse_errors(text, message):
    parsed = parse_compact(text)
    assert isinstance(parsed, ParseError) and message in parsed.message

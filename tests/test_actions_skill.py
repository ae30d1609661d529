"""The `skill` action kind: a skill's name in `text`, its arguments in `args`, and its compact grammar."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webrl.actions import ACTION_KINDS, Action, ActionError, ParseError, format_compact, parse_compact

names = st.builds(lambda head, tail: head + tail, st.sampled_from("aZ_"), st.text("abcXYZ019_", max_size=12))
skill_actions = st.builds(Action.skill, names, st.dictionaries(names, st.text(max_size=20), max_size=4))


def test_skill_is_the_last_kind_so_older_kind_indices_stay():
    # benchmarks/sft_alternatives.py indexes kinds by position: appending keeps click = 0 etc.
    assert ACTION_KINDS[-1] == "skill" and ACTION_KINDS.index("click") == 0 and ACTION_KINDS.index("stop") == 18


def test_args_are_sorted_pairs_and_hashable():
    a = Action.skill("search_products", {"query": "blue mug", "category": "mugs"})
    assert a.text == "search_products"
    assert a.args == (("category", "mugs"), ("query", "blue mug"))  # sorted by name
    assert a.args_dict == {"category": "mugs", "query": "blue mug"}
    # order of the keywords does not matter; the action is hashable (a dict key, a set member)
    b = Action("skill", text="search_products", args=[("query", "blue mug"), ("category", "mugs")])
    assert a == b and len({a, b}) == 1
    assert Action.skill("open_cart").args == () and not Action.click(3).args_dict
    assert not a.is_terminal


def test_dict_round_trip_writes_args_as_an_object():
    a = Action.skill("search_products", {"query": "blue mug"})
    assert a.to_dict() == {"kind": "skill", "text": "search_products", "args": {"query": "blue mug"}}
    assert Action.from_dict(a.to_dict()) == a
    assert Action.skill("open_cart").to_dict() == {"kind": "skill", "text": "open_cart"}


@pytest.mark.parametrize("fields, message", [
    ({}, "skill needs 'text'"),
    ({"text": ""}, "must be an identifier"),
    ({"text": "search products"}, "must be an identifier"),
    ({"text": "s", "args": {"query": 3}}, "'query' must be a string"),
    ({"text": "s", "args": {"2x": "a"}}, "must be an identifier"),
    ({"text": "s", "args": [("q", "a"), ("q", "b")]}, "'q' given twice"),
    ({"text": "s", "args": "query=a"}, "args must be a dict or (name, value) pairs"),
    ({"text": "s", "args": [("q",)]}, "(name, value) pairs"),
    ({"text": "s", "element": 3}, "skill takes no 'element'"),
    ({"text": "open_cart\n"}, "must be an identifier"),   # no trailing newline slips through
    ({"text": "from"}, "must be an identifier"),          # the grammar cannot write a keyword call...
    ({"text": "s", "args": {"from": "Paris"}}, "no Python keyword"),  # ...nor a keyword argument
    ({"text": "s", "args": {"true": "x"}}, "no Python keyword"),
])
def test_invalid_skill_actions_name_the_problem(fields, message):
    with pytest.raises(ActionError) as e:
        Action("skill", **fields)
    assert message in str(e.value)


def test_other_kinds_take_no_args():
    with pytest.raises(ActionError, match="click takes no 'args'"):
        Action("click", element=1, args={"q": "a"})


def test_compact_grammar_by_hand():
    a = parse_compact('skill("search_products", query="blue mug")')
    assert a == Action.skill("search_products", {"query": "blue mug"})
    assert format_compact(a) == 'skill("search_products", query="blue mug")'
    # keywords render sorted; quotes and non-ASCII are escaped as in every compact string
    b = Action.skill("s", {"b": 'say "hi"', "a": "café"})
    assert format_compact(b) == 'skill("s", a="café", b="say \\"hi\\"")'
    assert parse_compact(format_compact(b)) == b
    assert format_compact(Action.skill("open_cart")) == 'skill("open_cart")'
    assert parse_compact('  skill( "open_cart" )  ') == Action.skill("open_cart")


@pytest.mark.parametrize("text, message", [
    ("skill()", "one positional argument"),
    ('skill(name="search")', "one positional argument"),
    ('skill("a", "b")', "one positional argument"),
    ("skill(3)", "one positional argument"),
    ('skill("search", query=3)', "argument 'query' must be a string"),
    ('skill("search", query=["a"])', "argument 'query' must be a string"),
    ('skill("search", query=null)', "argument 'query' must be a string"),
    ('skill("bad name")', "must be an identifier"),
    ('skill("s", q="a", q="b")', "cannot read the arguments"),
    ('skill("s", **{"q": "a"})', "cannot read the arguments"),
])
def test_malformed_skill_calls_are_parse_errors(text, message):
    parsed = parse_compact(text)
    assert isinstance(parsed, ParseError), parsed
    assert message in parsed.message


@given(action=skill_actions)
@settings(max_examples=100, deadline=None)
def test_compact_round_trip(action):
    assert parse_compact(format_compact(action)) == action
    assert Action.from_dict(action.to_dict()) == action


@given(args=st.text(max_size=40))
@settings(max_examples=200, deadline=None)
def test_parsing_any_skill_call_never_raises(args):
    out = parse_compact(f"skill({args})")
    assert isinstance(out, (Action, ParseError))
    if isinstance(out, Action):
        assert out.kind == "skill" and all(isinstance(v, str) for _, v in out.args)

"""The typed Action and the compact grammar: construction rules, exact round trips, no exceptions."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webrl.actions import ACTION_KINDS, Action, ActionError, ParseError, format_compact, parse_compact


@pytest.mark.parametrize("text, expected", [
    ("click(12)", Action.click(12)),
    ("  click( 12 )  ", Action.click(12)),
    ('click(3, button="right")', Action.click(3, button="right")),
    ("click(3, clicks=2)", Action.click(3, clicks=2)),
    ("click_at(340, 220)", Action.click_at(340, 220)),
    ('type(5, "blue mug")', Action.type_text("blue mug", element=5)),
    ('type("blue mug")', Action.type_text("blue mug")),
    ('type(5, "x", clear=false)', Action.type_text("x", element=5, clear=False)),
    ('select(7, "Large")', Action.select(7, "Large")),
    ('scroll("down")', Action.scroll("down")),
    ('scroll("up", 0.5, 12)', Action.scroll("up", 0.5, element=12)),
    ('scroll_at("down", 0.5, 10, 20)', Action("scroll_at", direction="down", amount=0.5, x=10, y=20)),
    ('scroll_at("down", 10, 20)', Action("scroll_at", direction="down", x=10, y=20)),
    ('press("Control+A")', Action("press", text="Control+A")),
    ('goto("http://127.0.0.1:8000/a?b=1")', Action("goto", text="http://127.0.0.1:8000/a?b=1")),
    ("back()", Action("back")),
    ("new_tab()", Action("new_tab")),
    ("switch_tab(1)", Action("switch_tab", tab=1)),
    ("close_tab()", Action("close_tab")),
    ("drag(1, 2, 3, 4)", Action("drag", x=1, y=2, to_x=3, to_y=4)),
    ("wait(1.5)", Action("wait", amount=1.5)),
    ('answer("42 \\"euros\\"")', Action.answer('42 "euros"')),
    ("stop()", Action.stop()),
])
def test_parse_known_forms(text, expected):
    assert parse_compact(text) == expected


@pytest.mark.parametrize("text, fragment", [
    ("", "expected one call"),
    ("click", "expected one call"),
    ("jump(3)", "unknown action 'jump'"),
    ("click()", "click needs 'element'"),
    ("click(-1)", "non-negative"),
    ("click(1.5)", "non-negative integer"),
    ('click("12")', "non-negative integer"),
    ("click(1, 2)", "positional"),
    ("click(1, element=2)", "twice"),
    ('scroll("sideways")', "direction must be one of"),
    ("type(5)", "text must be a string"),  # one argument = the text
    ('click(1, button="top")', "button must be one of"),
    ("click(1, clicks=9)", "clicks must be"),
    ('stop("now")', "positional"),
    ("click(__import__('os'))", "cannot read the arguments"),
    ("click(1, **{'a': 1})", "cannot read the arguments"),
])
def test_parse_errors_are_values_with_a_message(text, fragment):
    out = parse_compact(text)
    assert isinstance(out, ParseError) and not out
    assert fragment in out.message


def test_constructor_rejects_fields_the_kind_does_not_take():
    with pytest.raises(ActionError, match="stop takes no 'text'"):
        Action("stop", text="x")
    with pytest.raises(ActionError, match="unknown action kind"):
        Action("fly")


def test_terminal_kinds():
    assert Action.answer("x").is_terminal and Action.stop().is_terminal
    assert not Action.click(1).is_terminal


def test_dict_round_trip_keeps_only_non_defaults():
    a = Action.type_text("hi", element=3, clear=False)
    assert a.to_dict() == {"kind": "type", "element": 3, "text": "hi", "clear": False}
    assert Action.from_dict(a.to_dict()) == a
    with pytest.raises(ActionError, match="unknown Action fields"):
        Action.from_dict({"kind": "stop", "colour": "red"})


_text = st.text(max_size=30)
_id = st.integers(0, 500)
_num = st.one_of(st.integers(-2000, 2000), st.floats(-2000, 2000, allow_nan=False, allow_infinity=False))
_actions = st.one_of(
    st.builds(Action.click, _id, st.sampled_from(["left", "right", "middle"]), st.integers(1, 3)),
    st.builds(Action.click_at, _num, _num, st.sampled_from(["left", "right"]), st.integers(1, 3)),
    st.builds(lambda e: Action("hover", element=e), _id),
    st.builds(lambda x, y: Action("hover_at", x=x, y=y), _num, _num),
    st.builds(Action.type_text, _text, st.one_of(st.none(), _id), st.booleans()),
    st.builds(Action.select, _id, _text),
    st.builds(Action.scroll, st.sampled_from(["up", "down", "left", "right"]),
              st.one_of(st.none(), _num), st.one_of(st.none(), _id)),
    st.builds(lambda d, a, x, y: Action("scroll_at", direction=d, amount=a, x=x, y=y),
              st.sampled_from(["up", "down"]), st.one_of(st.none(), _num), _num, _num),
    st.builds(lambda t: Action("press", text=t), _text),
    st.builds(lambda t: Action("goto", text=t), _text),
    st.builds(lambda t: Action("new_tab", text=t), st.one_of(st.none(), _text)),
    st.builds(lambda t: Action("switch_tab", tab=t), _id),
    st.builds(lambda t: Action("close_tab", tab=t), st.one_of(st.none(), _id)),
    st.builds(lambda a, b, c, d: Action("drag", x=a, y=b, to_x=c, to_y=d), _num, _num, _num, _num),
    st.builds(lambda a: Action("wait", amount=a), st.one_of(st.none(), _num)),
    st.builds(Action.answer, _text),
    st.just(Action("back")), st.just(Action("forward")), st.just(Action.stop()),
)


@settings(max_examples=400, deadline=None)
@given(_actions)
def test_format_then_parse_is_identity(action):
    text = format_compact(action)
    assert parse_compact(text) == action, text


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=60),
                 st.builds(lambda k, a: f"{k}({a})", st.sampled_from(ACTION_KINDS), st.text(max_size=40))))
def test_parse_never_raises(text):
    out = parse_compact(text)
    assert isinstance(out, (Action, ParseError))

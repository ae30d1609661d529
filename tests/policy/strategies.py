"""Hypothesis strategies for valid `Action`s (shared by the policy tests)."""
from hypothesis import strategies as st

from webrl.actions import Action

W, H = 1280, 720  # screenshot size used with these actions

ids = st.integers(0, 300)
xs = st.floats(0, W, allow_nan=False)
ys = st.floats(0, H, allow_nan=False)
texts = st.text(max_size=30)
buttons = st.sampled_from(["left", "right", "middle"])
clicks = st.integers(1, 3)
directions = st.sampled_from(["up", "down", "left", "right"])
amounts = st.one_of(st.none(), st.floats(0, 5, allow_nan=False))
keys = st.lists(st.sampled_from(["Control", "Shift", "Alt", "a", "A", "Enter", "Tab", "F5", "ArrowDown"]),
                min_size=1, max_size=3).map("+".join)


def _build(kind, **fields):
    return Action(kind, **{k: v for k, v in fields.items() if v is not None})


actions = st.one_of(
    st.builds(lambda e, b, c: Action.click(e, b, c), ids, buttons, clicks),
    st.builds(lambda x, y, b, c: Action.click_at(x, y, b, c), xs, ys, buttons, clicks),
    st.builds(lambda e: Action("hover", element=e), ids),
    st.builds(lambda x, y: Action("hover_at", x=x, y=y), xs, ys),
    st.builds(lambda t, e, c: Action.type_text(t, e, c), texts, st.one_of(st.none(), ids), st.booleans()),
    st.builds(lambda e, t: Action.select(e, t), ids, texts),
    st.builds(lambda d, a, e: _build("scroll", direction=d, amount=a, element=e), directions, amounts,
              st.one_of(st.none(), ids)),
    st.builds(lambda d, a, x, y: _build("scroll_at", direction=d, amount=a, x=x, y=y), directions, amounts, xs, ys),
    st.builds(lambda k: Action("press", text=k), keys),
    st.builds(lambda t: Action("goto", text=t), texts),
    st.sampled_from([Action("back"), Action("forward"), Action("stop"), Action("new_tab"), Action("close_tab")]),
    st.builds(lambda t: Action("new_tab", text=t), texts),
    st.builds(lambda t: Action("switch_tab", tab=t), st.integers(0, 9)),
    st.builds(lambda t: Action("close_tab", tab=t), st.integers(0, 9)),
    st.builds(lambda x, y, a, b: Action("drag", x=x, y=y, to_x=a, to_y=b), xs, ys, xs, ys),
    st.builds(lambda a: _build("wait", amount=a), amounts),
    st.builds(Action.answer, texts),
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 2000) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8)

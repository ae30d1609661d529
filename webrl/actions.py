"""The typed browser `Action` and its canonical compact grammar.

Every policy output format (Set-of-Mark tool calls, Qwen computer-use coordinates, this compact
grammar) is parsed into one `Action`; environments execute only `Action`s. A parse failure is a
value (`ParseError`), never an exception that ends a rollout.

Compact grammar (one call per action, Python-like literals, strings in double quotes with
backslash escapes)::

    click(12)                 click(12, button="right")   click(12, clicks=2)
    click_at(340, 220)        click_at(340, 220, button="right", clicks=2)
    hover(12)                 hover_at(340, 220)
    type(5, "blue mug")       type("blue mug")            type(5, "blue mug", clear=false)
    select(7, "Large")        scroll("down")              scroll("down", 0.5)
    scroll("up", 0.5, 12)     scroll_at("down", 0.5, 340, 220)
    press("Control+A")        goto("http://127.0.0.1:8000/")   back()   forward()
    new_tab()  new_tab("http://...")  switch_tab(1)  close_tab()  close_tab(1)
    drag(10, 20, 300, 40)     wait(1.0)   answer("42 euros")   stop()
    skill("search_products", query="blue mug")   skill("open_cart")
    tool("search_catalog", query="mug")

`type` without an element types into the focused field; `scroll` amounts are fractions of the
viewport (OpenWebRL convention); points are pixels of the observation screenshot.

`skill` (WebXSkill grounded mode) runs a skill of the env's library as one step: the skill's
name is `text` (positional, an identifier), its arguments are keywords with string values and
live in `args`, a tuple of (name, value) pairs sorted by name (so `Action` stays hashable and
argument order does not matter: `skill("s", a="1", b="2") == skill("s", b="2", a="1")`);
`args_dict` gives them as a dict, `to_dict` writes them as a JSON object. The env expands the
call into the skill's steps (`webrl.envs.skill_run`).

`tool` (The Tool Illusion: tools as higher-level actions) calls a tool the site exposes (a site
API, a search URL, a macro) as one step; it has exactly `skill`'s shape: the tool's name in
`text`, its arguments as string keywords in `args` (`webrl.envs.tool_run` runs it). `CALL_KINDS`
names the two kinds of this shape.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import keyword
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional

ACTION_KINDS = (
    "click", "click_at", "hover", "hover_at", "type", "select", "scroll", "scroll_at", "press",
    "goto", "back", "forward", "new_tab", "switch_tab", "close_tab", "drag", "wait", "answer",
    "stop", "tool", "skill",
)
CALL_KINDS = ("skill", "tool")
"""Kinds written `kind("name", arg="value", ...)`: a name in `text`, string arguments in `args`.
("tool" sits before "skill" so the indices 0..18 of the atomic kinds and "skill" last stay as
they were when skills landed, except skill's own index, 19 -> 20.)"""
SCROLL_DIRECTIONS = ("up", "down", "left", "right")
MOUSE_BUTTONS = ("left", "right", "middle")

# Which fields each kind requires / allows besides `kind`. Everything else must stay at default.
_REQUIRED = {
    "click": ("element",), "click_at": ("x", "y"), "hover": ("element",), "hover_at": ("x", "y"),
    "type": ("text",), "select": ("element", "text"), "scroll": ("direction",),
    "scroll_at": ("direction", "x", "y"), "press": ("text",), "goto": ("text",), "back": (),
    "forward": (), "new_tab": (), "switch_tab": ("tab",), "close_tab": (),
    "drag": ("x", "y", "to_x", "to_y"), "wait": (), "answer": ("text",), "stop": (), "skill": ("text",),
    "tool": ("text",),
}
_OPTIONAL = {
    "click": ("button", "clicks"), "click_at": ("button", "clicks"), "type": ("element", "clear"),
    "scroll": ("amount", "element"), "scroll_at": ("amount",), "new_tab": ("text",),
    "close_tab": ("tab",), "wait": ("amount",), "skill": ("args",), "tool": ("args",),
}
# Positional argument order of each kind in the compact grammar.
_POSITIONAL = {
    "click": ("element",), "click_at": ("x", "y"), "hover": ("element",), "hover_at": ("x", "y"),
    "type": ("element", "text"), "select": ("element", "text"),
    "scroll": ("direction", "amount", "element"), "scroll_at": ("direction", "amount", "x", "y"),
    "press": ("text",), "goto": ("text",), "back": (), "forward": (), "new_tab": ("text",),
    "switch_tab": ("tab",), "close_tab": ("tab",), "drag": ("x", "y", "to_x", "to_y"),
    "wait": ("amount",), "answer": ("text",), "stop": (), "skill": ("text",),
    "tool": ("text",),
}
_DEFAULTS = {"button": "left", "clicks": 1, "clear": True, "args": ()}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")  # skill and argument names (as webrl.skills)
_RESERVED = frozenset(keyword.kwlist) | {"true", "false", "null"}  # the grammar could not write them as keywords


def is_call_name(name: Any) -> bool:
    """A skill / tool name or argument name: an identifier of at most 64 characters that the
    compact grammar can write as a keyword argument (no Python keyword, none of true/false/null).
    The one rule for webrl.skills and webrl.envs.tools as well."""
    return isinstance(name, str) and bool(_IDENTIFIER.fullmatch(name)) and name not in _RESERVED


class ActionError(ValueError):
    """An `Action` that cannot exist (missing or conflicting fields)."""


def _normalise_args(args: Any) -> tuple[tuple[str, str], ...]:
    """A skill's arguments (dict or pairs) -> ((name, value), ...) sorted by name; ActionError if
    a name is not an identifier, a value not a string, or a name repeats."""
    if isinstance(args, Mapping):
        pairs = list(args.items())
    elif isinstance(args, (list, tuple)):
        pairs = list(args)
    else:
        raise ActionError(f"args must be a dict or (name, value) pairs, got {type(args).__name__}")
    out: dict[str, str] = {}
    for pair in pairs:
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
            raise ActionError(f"args must be (name, value) pairs, got {pair!r}")
        name, value = pair
        if not is_call_name(name):
            raise ActionError(f"an argument's name must be an identifier that is no Python keyword, got {name!r}")
        if not isinstance(value, str):
            raise ActionError(f"argument {name!r} must be a string, got {value!r}")
        if name in out:
            raise ActionError(f"argument {name!r} given twice")
        out[name] = value
    return tuple(sorted(out.items()))


@dataclass(frozen=True)
class Action:
    """One browser action. Construct through the kind-named classmethods or `Action(kind=...)`.

    Fields (unused ones stay None / default):
      kind: one of ACTION_KINDS.
      element: Set-of-Mark id of the target element.
      x, y / to_x, to_y: points in observation-screenshot pixels.
      text: typed text, select option label, key chord, URL or final answer.
      button, clicks: mouse button and click count (2 = double click).
      direction, amount: scroll direction and amount as a viewport fraction; wait seconds.
      clear: `type` replaces the field's content (select-all + delete) before typing.
      tab: tab index for switch_tab / close_tab.
      args: a skill's or tool's arguments, ((name, value), ...) sorted by name, values strings; a
        dict or a list of pairs is accepted and normalised (text holds the skill's / tool's name).
    """

    kind: str
    element: Optional[int] = None
    x: Optional[float] = None
    y: Optional[float] = None
    to_x: Optional[float] = None
    to_y: Optional[float] = None
    text: Optional[str] = None
    button: str = "left"
    clicks: int = 1
    direction: Optional[str] = None
    amount: Optional[float] = None
    clear: bool = True
    tab: Optional[int] = None
    args: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ACTION_KINDS:
            raise ActionError(f"unknown action kind {self.kind!r}; allowed: {', '.join(ACTION_KINDS)}")
        allowed = set(_REQUIRED[self.kind]) | set(_OPTIONAL.get(self.kind, ()))
        for f in dataclasses.fields(self):
            if f.name == "kind":
                continue
            value = getattr(self, f.name)
            is_default = value == _DEFAULTS.get(f.name) if f.name in _DEFAULTS else value is None
            if f.name in _REQUIRED[self.kind] and value is None:
                raise ActionError(f"{self.kind} needs {f.name!r}")
            if not is_default and f.name not in allowed:
                raise ActionError(f"{self.kind} takes no {f.name!r} (takes {sorted(allowed) or 'nothing'})")
        object.__setattr__(self, "args", _normalise_args(self.args))
        if self.button not in MOUSE_BUTTONS:
            raise ActionError(f"button must be one of {MOUSE_BUTTONS}, got {self.button!r}")
        if not (isinstance(self.clicks, int) and 1 <= self.clicks <= 3):
            raise ActionError(f"clicks must be 1, 2 or 3, got {self.clicks!r}")
        if self.direction is not None and self.direction not in SCROLL_DIRECTIONS:
            raise ActionError(f"direction must be one of {SCROLL_DIRECTIONS}, got {self.direction!r}")
        for name in ("element", "tab"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise ActionError(f"{name} must be a non-negative integer, got {v!r}")
        for name in ("x", "y", "to_x", "to_y", "amount"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v != v):
                raise ActionError(f"{name} must be a number, got {v!r}")
        if self.text is not None and not isinstance(self.text, str):
            raise ActionError(f"text must be a string, got {self.text!r}")
        if self.kind in CALL_KINDS and not is_call_name(self.text):
            raise ActionError(f"a {self.kind}'s name must be an identifier (letters, digits, _), got {self.text!r}")

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def click(cls, element: int, button: str = "left", clicks: int = 1) -> "Action":
        return cls("click", element=element, button=button, clicks=clicks)

    @classmethod
    def click_at(cls, x: float, y: float, button: str = "left", clicks: int = 1) -> "Action":
        return cls("click_at", x=x, y=y, button=button, clicks=clicks)

    @classmethod
    def type_text(cls, text: str, element: Optional[int] = None, clear: bool = True) -> "Action":
        return cls("type", element=element, text=text, clear=clear)

    @classmethod
    def select(cls, element: int, option: str) -> "Action":
        return cls("select", element=element, text=option)

    @classmethod
    def scroll(cls, direction: str, amount: Optional[float] = None,
               element: Optional[int] = None) -> "Action":
        return cls("scroll", direction=direction, amount=amount, element=element)

    @classmethod
    def answer(cls, text: str) -> "Action":
        return cls("answer", text=text)

    @classmethod
    def stop(cls) -> "Action":
        return cls("stop")

    @classmethod
    def skill(cls, name: str, args: Optional[Mapping[str, str]] = None) -> "Action":
        return cls("skill", text=name, args=args or ())

    @classmethod
    def tool(cls, name: str, args: Optional[Mapping[str, str]] = None) -> "Action":
        return cls("tool", text=name, args=args or ())

    @property
    def args_dict(self) -> dict[str, str]:
        """A skill's or tool's arguments as a dict (empty for every other kind)."""
        return dict(self.args)

    # -- serialisation ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Only the fields that differ from their defaults (plus `kind`)."""
        out: dict[str, Any] = {"kind": self.kind}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name != "kind" and v != (_DEFAULTS.get(f.name) if f.name in _DEFAULTS else None):
                out[f.name] = dict(v) if f.name == "args" else v
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Action":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ActionError(f"unknown Action fields {sorted(unknown)}")
        return cls(**d)

    def to_compact(self) -> str:
        return format_compact(self)

    @property
    def is_terminal(self) -> bool:
        """`answer` and `stop` end the episode."""
        return self.kind in ("answer", "stop")


@dataclass(frozen=True)
class ParseError:
    """A model output that is not a valid action. `message` is fed back to the model."""

    message: str
    text: str = ""

    def __bool__(self) -> bool:  # `if parsed:` reads as "a valid action came out"
        return False


# ---------------------------------------------------------------------------------------------
# compact grammar
# ---------------------------------------------------------------------------------------------
def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) < 1e15 else repr(value)
    return repr(value)


def format_compact(action: Action) -> str:
    """Render `action` in the compact grammar; `parse_compact` inverts it exactly."""
    d = action.to_dict()
    kind = d.pop("kind")
    if kind in CALL_KINDS:  # skill("name", arg="value", ...): the arguments are the skill's / tool's
        return f"{kind}({', '.join([_literal(action.text)] + [f'{k}={_literal(v)}' for k, v in action.args])})"
    positional: list[str] = []
    for name in _POSITIONAL[kind]:
        if name in d:
            positional.append(_literal(d.pop(name)))
        elif any(later in d for later in _POSITIONAL[kind][_POSITIONAL[kind].index(name) + 1:]):
            break  # a gap: the rest goes as keywords
    keywords = [f"{k}={_literal(v)}" for k, v in d.items()]
    return f"{kind}({', '.join(positional + keywords)})"


_CALL = re.compile(r"([a-z_]+)\s*\((.*)\)\s*$", re.S)


def _to_python_literals(args: str) -> str:
    # true/false outside strings -> True/False, so ast.literal_eval can read them.
    out, i, in_str = [], 0, False
    while i < len(args):
        c = args[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < len(args):
                out.append(args[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        else:
            m = re.match(r"\b(true|false|null)\b", args[i:])
            if m and (i == 0 or not (args[i - 1].isalnum() or args[i - 1] == "_")):
                out.append({"true": "True", "false": "False", "null": "None"}[m.group(1)])
                i += len(m.group(1))
                continue
            out.append(c)
        i += 1
    return "".join(out)


def parse_compact(text: str) -> Action | ParseError:
    """Parse one compact-grammar call, e.g. ``type(5, "blue mug")``. Never raises."""
    if not isinstance(text, str):
        return ParseError(f"expected a string, got {type(text).__name__}")
    src = text.strip()
    m = _CALL.match(src)
    if not m:
        return ParseError("expected one call like click(12) or type(5, \"text\")", text)
    kind, args = m.group(1), m.group(2)
    if kind not in ACTION_KINDS:
        return ParseError(f"unknown action {kind!r}; allowed: {', '.join(ACTION_KINDS)}", text)
    try:
        call = ast.parse(f"f({_to_python_literals(args)})", mode="eval").body
        assert isinstance(call, ast.Call)
        values = [ast.literal_eval(a) for a in call.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
        if len(kwargs) != len(call.keywords):
            raise ValueError("**kwargs are not allowed")
    except (SyntaxError, ValueError, TypeError, AssertionError, MemoryError, RecursionError) as e:
        return ParseError(f"cannot read the arguments of {kind}(): {type(e).__name__}: {e}", text)
    if kind in CALL_KINDS:
        return _named_call(kind, values, kwargs, text)
    order = list(_POSITIONAL[kind])
    if kind == "type" and len(values) == 1:
        order = ["text"]  # type("text") types into the focused field
    if kind == "scroll_at" and len(values) == 3:
        order = ["direction", "x", "y"]
    if len(values) > len(order):
        return ParseError(f"{kind}() takes at most {len(order)} positional arguments", text)
    fields = dict(zip(order, values))
    for k, v in kwargs.items():
        if k in fields:
            return ParseError(f"{kind}() got {k!r} twice", text)
        fields[k] = v
    for k in ("element", "tab", "clicks"):  # 12.0 -> 12 is harmless; 12.5 is not
        v = fields.get(k)
        if isinstance(v, float) and v.is_integer():
            fields[k] = int(v)
    try:
        return Action(kind=kind, **fields)
    except (ActionError, TypeError) as e:
        return ParseError(f"invalid {kind}(): {e}", text)


_CALL_EXAMPLES = {"skill": 'skill("search_products", query="blue mug")', "tool": 'tool("search_catalog", query="mug")'}


def _named_call(kind: str, values: list, kwargs: dict[str, Any], text: str) -> Action | ParseError:
    """`skill("name", arg="value", ...)` / `tool(...)`: one positional name, every keyword an argument."""
    if len(values) != 1 or not isinstance(values[0], str) or not values[0]:
        return ParseError(f"{kind}() takes the {kind}'s name as its one positional argument and the {kind}'s "
                          f"arguments as keywords, e.g. {_CALL_EXAMPLES[kind]}", text)
    for name, value in kwargs.items():
        if not isinstance(value, str):
            return ParseError(f"{kind}() argument {name!r} must be a string in double quotes, got {value!r}", text)
    try:
        return Action(kind, text=values[0], args=kwargs)
    except ActionError as e:
        return ParseError(f"invalid {kind}(): {e}", text)

"""Action formats: how an `Action` is written in a model response and read back.

Every format puts exactly one call inside `<tool_call>...</tool_call>`, so generation stops
at one token (`</tool_call>`) whatever the format. Formats (`make_format(name, family)`):

- "som": Set-of-Mark tool call, JSON with element ids::
      <tool_call>{"name": "browser", "arguments": {"action": "click", "element": 12}}</tool_call>
  `arguments` holds `Action` fields by name (`action` = kind); every kind is expressible. A skill
  call (grounded mode) names the skill in "skill" and its arguments in "args" (an object of
  string values, may be left out when the skill takes none)::
      {"name": "browser", "arguments": {"action": "skill", "skill": "search_products", "args": {"query": "blue mug"}}}
- "computer_use": Qwen computer-use JSON with coordinates in the model's image space::
      <tool_call>{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [x, y]}}</tool_call>
  Qwen2.5-VL ("resized"): absolute pixels of the smart-resized image; Qwen3-VL
  ("normalized_1000"): 0-1000 on both axes. Parsed points are mapped back to screenshot
  pixels. Element-addressed actions (click(12), select) are not expressible in this format.
  Browser verbs (goto_url, go_back, tabs, answer) extend Qwen's desktop action list, as in
  OpenWebRL; scroll takes a direction and a viewport fraction instead of Qwen's wheel pixels
  (webrl's `Action` convention). A skill call has the "som" shape:
  `{"action": "skill", "skill": "search_products", "args": {"query": "blue mug"}}`.
- "compact": the env's compact grammar (`webrl.actions`), e.g. `<tool_call>click(12)</tool_call>`;
  a skill call is `<tool_call>skill("search_products", query="blue mug")</tool_call>`.
- A tool call (a tool the site exposes, `webrl.envs.tools`) has a skill call's shape in every
  format: `tool("search_catalog", query="mug")` in "compact" / "pointer", and
  `{"action": "tool", "tool": "search_catalog", "args": {"query": "mug"}}` in "som" / "computer_use".
- "pointer": compact with element tokens: the prompt lists `<e12> link "Blog"` and the model
  answers `<tool_call>click(<e12>)</tool_call>`; the model's element pointer scores the listed
  lines for the `<e..>` token (`webrl.models.pointer`). Ids >= POINTER_ELEMENTS stay `[n]` in the
  list (not choosable by the pointer); `click(12)` with digits still parses. A skill call is the
  compact one (it names no element).

Parsing is tolerant of form (whitespace, `<think>` reasoning before the call, a missing
closing tag when generation stopped there, ```json fences) and strict on meaning (unknown
verbs, unknown or missing arguments, wrong types, points outside the image, more than one call
are all `ParseError`s). Parsers never raise.
"""
from __future__ import annotations

import json
import re
from typing import Any, Optional, Protocol

from webrl.actions import ACTION_KINDS, CALL_KINDS, Action, ActionError, ParseError, format_compact, parse_compact
from webrl.policy.images import ImageGeometry

TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)
THINK_RE = re.compile(r"<think>.*?</think>", re.S)
FORMAT_NAMES = ("som", "computer_use", "compact", "pointer")
POINTER_ELEMENTS = 128
_LIST_ID_RE = re.compile(r"^\[(\d+)\] ", re.M)
_FIRST_INT_RE = re.compile(r"^(\w+)\((\d+)")
_ELEMENT_TOKEN_RE = re.compile(r"^(\w+)\(\s*<e(\d+)>")


def strip_thinking(text: str) -> str:
    """Drop `<think>...</think>` blocks (and an unclosed one's opening up to the first tool call)."""
    text = THINK_RE.sub("", text)
    if "<think>" in text:  # unclosed: keep from the tool call on, if any
        head, _, tail = text.partition("<think>")
        text = head + (tail[tail.index("<tool_call>"):] if "<tool_call>" in tail else "")
    return text.strip()


def extract_call(text: str) -> str | ParseError:
    """The body of the one `<tool_call>` in `text` (reasoning around it ignored)."""
    body = THINK_RE.sub("", text)
    calls = TOOL_CALL_RE.findall(body)
    if len(calls) > 1:
        return ParseError(f"expected one <tool_call> per turn, found {len(calls)}", text)
    if not calls:
        return ParseError("no <tool_call>...</tool_call> found", text)
    call = calls[0].strip()
    fence = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", call, re.S)
    return fence.group(1) if fence else call


def _json_call(text: str, expected_name: str) -> tuple[dict[str, Any], str] | ParseError:
    """Parse `{"name": expected_name, "arguments": {"action": verb, ...}}` -> (arguments, verb)."""
    body = extract_call(text)
    if isinstance(body, ParseError):
        return body
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as e:
        return ParseError(f"tool call is not valid JSON: {e}", text)
    if not isinstance(obj, dict) or set(obj) != {"name", "arguments"}:
        return ParseError('tool call must be {"name": ..., "arguments": {...}}', text)
    if obj["name"] != expected_name:
        return ParseError(f"unknown tool {obj['name']!r}; use {expected_name!r}", text)
    args = obj["arguments"]
    if not isinstance(args, dict) or not isinstance(args.get("action"), str):
        return ParseError('"arguments" must be an object with a string "action"', text)
    args = dict(args)
    return args, args.pop("action")


def _tool_call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "</tool_call>"


def _integral(fields: dict[str, Any], names: tuple[str, ...]) -> None:
    for k in names:  # 12.0 -> 12 is harmless; 12.5 stays and fails validation
        v = fields.get(k)
        if isinstance(v, float) and v.is_integer():
            fields[k] = int(v)


SKILL_FIELDS = ("skill", "args")
"""The JSON formats' fields of a skill call besides "action": the skill's name, its arguments."""
TOOL_FIELDS = ("tool", "args")
"""The same for a tool call: {"action": "tool", "tool": name, "args": {...}}."""
_CALL_FIELDS = {"skill": SKILL_FIELDS, "tool": TOOL_FIELDS}


def call_arguments(action: Action) -> dict[str, Any]:
    """A skill or tool `Action` as JSON tool-call arguments (the "som" and "computer_use" shape):
    {"action": kind, kind: name, "args": {...}}."""
    return {"action": action.kind, action.kind: action.text, "args": action.args_dict}


def call_from_arguments(kind: str, fields: dict[str, Any]) -> Action:
    """The skill / tool `Action` of JSON arguments {kind: name, "args": {...}} ("action" removed).
    Raises ActionError naming what is wrong."""
    unknown = sorted(set(fields) - set(_CALL_FIELDS[kind]))
    if unknown:
        raise ActionError(f'a {kind} call takes "{kind}" (the {kind}\'s name) and "args" (an object of '
                          f"string values), got {unknown}")
    name, args = fields.get(kind), fields.get("args", {})
    if not isinstance(name, str) or not name:
        raise ActionError(f'a {kind} call needs "{kind}": the {kind}\'s name as a string')
    if not isinstance(args, dict):
        raise ActionError('"args" must be an object of string values like {"query": "blue mug"}, '
                          f"got {json.dumps(args)}")
    return Action(kind, text=name, args=args)


class ActionFormat(Protocol):
    """One way of writing actions. `geometry` is needed by coordinate formats only."""

    name: str

    def render(self, action: Action, geometry: Optional[ImageGeometry] = None) -> str: ...

    def parse(self, text: str, geometry: Optional[ImageGeometry] = None) -> Action | ParseError: ...

    def can_render(self, action: Action) -> bool: ...


class SetOfMarkFormat:
    """Tool call JSON with Set-of-Mark element ids; arguments are `Action` fields."""

    name = "som"
    tool = "browser"

    def render(self, action: Action, geometry: Optional[ImageGeometry] = None) -> str:
        if action.kind in CALL_KINDS:
            return _tool_call(self.tool, call_arguments(action))
        d = action.to_dict()
        return _tool_call(self.tool, {"action": d.pop("kind"), **d})

    def can_render(self, action: Action) -> bool:
        return True

    def parse(self, text: str, geometry: Optional[ImageGeometry] = None) -> Action | ParseError:
        parsed = _json_call(text, self.tool)
        if isinstance(parsed, ParseError):
            return parsed
        fields, kind = parsed
        if kind not in ACTION_KINDS:
            return ParseError(f"unknown action {kind!r}; allowed: {', '.join(ACTION_KINDS)}", text)
        _integral(fields, ("element", "tab", "clicks"))
        try:
            if kind in CALL_KINDS:
                return call_from_arguments(kind, fields)
            return Action(kind=kind, **fields)
        except (ActionError, TypeError) as e:
            return ParseError(f"invalid {kind}: {e}", text)


class CompactFormat:
    """The compact grammar of `webrl.actions` inside a tool call."""

    name = "compact"

    def render(self, action: Action, geometry: Optional[ImageGeometry] = None) -> str:
        return f"<tool_call>{format_compact(action)}</tool_call>"

    def can_render(self, action: Action) -> bool:
        return True

    def parse(self, text: str, geometry: Optional[ImageGeometry] = None) -> Action | ParseError:
        body = extract_call(text)
        if isinstance(body, ParseError):
            return body
        parsed = parse_compact(self._to_compact(body))
        return ParseError(parsed.message, text) if isinstance(parsed, ParseError) else parsed

    def _to_compact(self, body: str) -> str:
        """The call's body in the compact grammar (here: as it is)."""
        return body


class PointerFormat(CompactFormat):
    """Compact actions whose element is an element token (`click(<e3>)`), for pointer models."""

    name = "pointer"

    def render(self, action: Action, geometry: Optional[ImageGeometry] = None) -> str:
        body = format_compact(action)
        if action.element is not None and action.element < POINTER_ELEMENTS:
            body = _FIRST_INT_RE.sub(lambda m: f"{m[1]}(<e{m[2]}>", body, count=1)
        return f"<tool_call>{body}</tool_call>"

    def _to_compact(self, body: str) -> str:
        """`click(<e3>)` -> `click(3)`: the first element token becomes the id it points at."""
        return _ELEMENT_TOKEN_RE.sub(lambda m: f"{m[1]}({m[2]}", body.strip(), count=1)

    @staticmethod
    def render_elements(elements_text: str) -> str:
        """`[7] link "Blog"` lines -> `<e7> link "Blog"` (ids below POINTER_ELEMENTS)."""
        return _LIST_ID_RE.sub(lambda m: f"<e{m[1]}> " if int(m[1]) < POINTER_ELEMENTS else m[0], elements_text)


def make_format(name: str, family: str = "qwen2.5-vl") -> ActionFormat:
    """The action format `name` for a model `family` (which fixes computer-use coordinates)."""
    from webrl.policy.computer_use import ComputerUseFormat

    if name == "som":
        return SetOfMarkFormat()
    if name == "compact":
        return CompactFormat()
    if name == "pointer":
        return PointerFormat()
    if name == "computer_use":
        if family not in ("qwen2.5-vl", "qwen3-vl"):
            raise ValueError(f"family must be 'qwen2.5-vl' or 'qwen3-vl', got {family!r}")
        return ComputerUseFormat("resized" if family == "qwen2.5-vl" else "normalized_1000")
    raise ValueError(f"action format must be one of {FORMAT_NAMES}, got {name!r}")

"""Qwen computer-use action format (coordinates), mapped to and from screenshot pixels.

Notation: (W, H) screenshot pixels; (W', H') smart-resized size; a model point (x_m, y_m) is
in "resized" space (0..W', 0..H'; Qwen2.5-VL) or "normalized_1000" space (0..1000; Qwen3-VL).
  screenshot -> model: x_m = round(x * W' / W)   or  round(x * 1000 / W)
  model -> screenshot: x = x_m * W / W'          or  x_m * W / 1000
A model point survives model -> screenshot -> model exactly; a screenshot point comes back
within half a model unit (W / (2 W') pixels).

Verb table (Action <-> arguments):
  click_at(left, 1|2|3 clicks)  left_click / double_click / triple_click {coordinate}
  click_at(right|middle, 1)     right_click / middle_click {coordinate}
  hover_at                      mouse_move {coordinate}
  drag                          left_click_drag {start_coordinate, coordinate}
  type(text) (focused field)    type {text, clear?}
  press("Control+A")            key {keys: ["Control", "A"]}
  scroll / scroll_at            scroll {direction, amount?, coordinate?}
  wait                          wait {time?}
  answer / stop                 answer {text} / terminate {status}
  goto / back / forward         goto_url {url} / go_back / go_forward
  new_tab / switch_tab / close_tab   new_tab {url?} / switch_tab {tab} / close_tab {tab?}
  skill(name, args)             skill {skill, args?}  (args: an object of string values)
  tool(name, args)              tool {tool, args?}    (the same shape)
Element-addressed actions (click(12), hover(12), select, type into element 12, scroll of an
element) are not expressible: `can_render` says so and `render` raises ValueError.
"""
from __future__ import annotations

import json
from typing import Any, Optional

from webrl.actions import Action, ActionError, ParseError
from webrl.policy.formats import (SKILL_FIELDS, TOOL_FIELDS, _integral, _json_call, _tool_call, call_arguments,
                                  call_from_arguments)
from webrl.policy.images import ImageGeometry

_CLICKS = {("left", 1): "left_click", ("left", 2): "double_click", ("left", 3): "triple_click",
           ("right", 1): "right_click", ("middle", 1): "middle_click"}
_CLICK_VERBS = {v: k for k, v in _CLICKS.items()}
# verb -> (allowed argument names, required argument names)
_ARGS = {
    **{v: ({"coordinate"}, {"coordinate"}) for v in _CLICK_VERBS},
    "mouse_move": ({"coordinate"}, {"coordinate"}),
    "left_click_drag": ({"start_coordinate", "coordinate"}, {"start_coordinate", "coordinate"}),
    "type": ({"text", "clear"}, {"text"}), "key": ({"keys"}, {"keys"}),
    "scroll": ({"direction", "amount", "coordinate"}, {"direction"}), "wait": ({"time"}, set()),
    "answer": ({"text"}, {"text"}), "terminate": ({"status"}, set()), "goto_url": ({"url"}, {"url"}),
    "go_back": (set(), set()), "go_forward": (set(), set()), "new_tab": ({"url"}, set()),
    "switch_tab": ({"tab"}, {"tab"}), "close_tab": ({"tab"}, set()), "skill": (set(SKILL_FIELDS), {"skill"}),
    "tool": (set(TOOL_FIELDS), {"tool"}),
}


class ComputerUseFormat:
    """Qwen computer-use JSON; `space` is "resized" (Qwen2.5-VL) or "normalized_1000" (Qwen3-VL)."""

    name = "computer_use"
    tool = "computer_use"

    def __init__(self, space: str = "resized"):
        if space not in ("resized", "normalized_1000"):
            raise ValueError(f"space must be 'resized' or 'normalized_1000', got {space!r}")
        self.space = space

    # -- Action -> text ---------------------------------------------------------------------
    def can_render(self, action: Action) -> bool:
        k = action.kind
        if k in ("click", "hover", "select") or (k in ("type", "scroll") and action.element is not None):
            return False
        if k == "click_at":
            return (action.button, action.clicks) in _CLICKS
        if k == "press":
            return all(action.text.split("+"))
        return True

    def render(self, action: Action, geometry: Optional[ImageGeometry] = None) -> str:
        if not self.can_render(action):
            raise ValueError(f"{action.to_compact()} is not expressible in computer_use coordinates")
        return _tool_call(self.tool, self._arguments(action, geometry))

    def _point(self, geometry: Optional[ImageGeometry], x: float, y: float) -> list[int]:
        if geometry is None:
            raise ValueError("computer_use needs the screenshot geometry to write a point")
        return list(geometry.to_model(x, y, self.space))

    def _arguments(self, a: Action, g: Optional[ImageGeometry]) -> dict[str, Any]:
        k = a.kind
        if k in ("skill", "tool"):
            return call_arguments(a)
        if k == "click_at":
            return {"action": _CLICKS[(a.button, a.clicks)], "coordinate": self._point(g, a.x, a.y)}
        if k == "hover_at":
            return {"action": "mouse_move", "coordinate": self._point(g, a.x, a.y)}
        if k == "drag":
            return {"action": "left_click_drag", "start_coordinate": self._point(g, a.x, a.y),
                    "coordinate": self._point(g, a.to_x, a.to_y)}
        if k == "type":
            return {"action": "type", "text": a.text, **({} if a.clear else {"clear": False})}
        if k == "press":
            return {"action": "key", "keys": a.text.split("+")}
        if k in ("scroll", "scroll_at"):
            out: dict[str, Any] = {"action": "scroll", "direction": a.direction}
            if a.amount is not None:
                out["amount"] = a.amount
            if k == "scroll_at":
                out["coordinate"] = self._point(g, a.x, a.y)
            return out
        simple = {"wait": ("wait", "time", a.amount), "answer": ("answer", "text", a.text),
                  "stop": ("terminate", "status", "success"), "goto": ("goto_url", "url", a.text),
                  "back": ("go_back", None, None), "forward": ("go_forward", None, None),
                  "new_tab": ("new_tab", "url", a.text), "switch_tab": ("switch_tab", "tab", a.tab),
                  "close_tab": ("close_tab", "tab", a.tab)}
        verb, key, value = simple[k]
        return {"action": verb, **({key: value} if key and value is not None else {})}

    # -- text -> Action ---------------------------------------------------------------------
    def parse(self, text: str, geometry: Optional[ImageGeometry] = None) -> Action | ParseError:
        parsed = _json_call(text, self.tool)
        if isinstance(parsed, ParseError):
            return parsed
        args, verb = parsed
        if verb not in _ARGS:
            return ParseError(f"unknown action {verb!r}; allowed: {', '.join(_ARGS)}", text)
        allowed, required = _ARGS[verb]
        if set(args) - allowed or required - set(args):
            return ParseError(f"{verb} takes {sorted(allowed) or 'no arguments'} "
                              f"(required {sorted(required) or 'none'}), got {sorted(args)}", text)
        try:
            return self._action(verb, args, geometry)
        except (ActionError, ValueError, TypeError) as e:
            return ParseError(f"invalid {verb}: {e}", text)

    def _screen(self, geometry: Optional[ImageGeometry], point: Any) -> tuple[float, float]:
        if geometry is None:
            raise ValueError("no screenshot to map the coordinate onto")
        ok = isinstance(point, list) and len(point) == 2 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v == v for v in point)
        if not ok:
            raise ValueError(f"a coordinate is [x, y] with two numbers, got {json.dumps(point)}")
        mx, my = geometry.model_extent(self.space)
        if not (0 <= point[0] <= mx and 0 <= point[1] <= my):
            raise ValueError(f"coordinate {point} is outside the image (0..{mx}, 0..{my})")
        return geometry.to_screen(point[0], point[1], self.space)

    def _action(self, verb: str, args: dict[str, Any], g: Optional[ImageGeometry]) -> Action:
        if verb in ("skill", "tool"):
            return call_from_arguments(verb, args)
        if verb in _CLICK_VERBS:
            button, clicks = _CLICK_VERBS[verb]
            return Action.click_at(*self._screen(g, args["coordinate"]), button=button, clicks=clicks)
        if verb == "mouse_move":
            x, y = self._screen(g, args["coordinate"])
            return Action("hover_at", x=x, y=y)
        if verb == "left_click_drag":
            (x, y), (tx, ty) = self._screen(g, args["start_coordinate"]), self._screen(g, args["coordinate"])
            return Action("drag", x=x, y=y, to_x=tx, to_y=ty)
        if verb == "type":
            if not isinstance(args.get("clear", True), bool):
                raise ValueError('"clear" must be true or false')
            return Action("type", text=args["text"], clear=args.get("clear", True))
        if verb == "key":
            keys = args["keys"]
            if not (isinstance(keys, list) and keys and all(isinstance(k, str) and k and "+" not in k for k in keys)):
                raise ValueError('"keys" must be a non-empty list of key names like ["Control", "a"]')
            return Action("press", text="+".join(keys))
        if verb == "scroll":
            fields = {"direction": args["direction"], "amount": args.get("amount")}
            if "coordinate" in args:
                x, y = self._screen(g, args["coordinate"])
                return Action("scroll_at", x=x, y=y, **fields)
            return Action("scroll", **fields)
        if verb == "terminate":
            if args.get("status", "success") not in ("success", "failure"):
                raise ValueError('"status" must be "success" or "failure"')
            return Action("stop")
        kind, key = {"wait": ("wait", "amount"), "answer": ("answer", "text"), "goto_url": ("goto", "text"),
                     "go_back": ("back", None), "go_forward": ("forward", None), "new_tab": ("new_tab", "text"),
                     "switch_tab": ("switch_tab", "tab"), "close_tab": ("close_tab", "tab")}[verb]
        fields = {key: next(iter(args.values()))} if args else {}
        _integral(fields, ("tab",))
        return Action(kind, **fields)

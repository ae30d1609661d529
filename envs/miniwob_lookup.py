"""Element lookup for the scripted MiniWoB++ solvers (`webrl.envs.miniwob_oracles`).

Finds a solver's targets in the observation's `elements` by accessible name, role, tag, input
type or DOM id (never by a fixed Set-of-Mark id), reads the quoted strings of a goal, and builds
the click / type actions on what it found; a lookup that finds nothing gives None, and so does
the action built on it.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Optional

from webrl.actions import Action

Observation = dict[str, Any]
Element = dict[str, Any]


def quoted(goal: str) -> list[str]:
    """The double-quoted strings of a goal, in order: 'Enter "ab" and "cd"' -> ["ab", "cd"]."""
    return re.findall(r'"([^"]*)"', goal)


def find(elements: Iterable[Element], *, name: Optional[str] = None, role: Optional[str] = None,
         tag: Optional[str] = None, type: Optional[str] = None,
         dom_id: Optional[str] = None) -> Optional[Element]:
    """First element matching every given field; `name` matches exactly, then case-folded."""
    candidates = [e for e in elements
                  if (role is None or e.get("role") == role) and (tag is None or e.get("tag") == tag)
                  and (type is None or e.get("type") == type)
                  and (dom_id is None or e.get("dom_id") == dom_id)]
    if name is None:
        return candidates[0] if candidates else None
    for match in (lambda e: e.get("name") == name,
                  lambda e: (e.get("name") or "").strip().casefold() == name.strip().casefold()):
        hits = [e for e in candidates if match(e)]
        if hits:
            return hits[0]
    return None


def text_inputs(elements: Iterable[Element]) -> list[Element]:
    """Single-line text fields (input of a text-like type), in DOM order."""
    return [e for e in elements if e.get("tag") == "input"
            and e.get("type") in ("text", "password", "email", "search", "tel", "url", "")]


def click(element: Optional[Element]) -> Optional[Action]:
    return None if element is None else Action.click(int(element["id"]))


def fill(element: Optional[Element], text: str) -> Optional[Action]:
    return None if element is None else Action.type_text(text, element=int(element["id"]))


def submit_button(elements: Iterable[Element], name: str = "Submit") -> Optional[Element]:
    return find(elements, name=name, role="button")


def fill_then_submit(elements: list[Element], fields: list[tuple[Optional[Element], str]],
                     button: Optional[Element]) -> Optional[Action]:
    """Type into the first field whose value differs from its target, then click `button`.

    Password values come back masked as '*' * len; they count as filled at the right length.
    """
    for field, target in fields:
        if field is None:
            return None
        shown = "*" * len(target) if field.get("type") == "password" else target
        if field.get("value", "") != shown:
            return fill(field, target)
    return click(button)


def named_button(elements: list[Element], name: str) -> Optional[Element]:
    """A button by name; "x" also finds a dialog's close button (jQuery UI names it Close)."""
    button = find(elements, name=name, role="button")
    if button is None and name.strip() in ("x", "X", "\u00d7"):
        button = find(elements, name="Close", role="button") or find(elements, name="\u00d7", role="button")
    return button

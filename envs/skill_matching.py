"""Matching skills to pages: where a skill applies (`url_matches`) and which element of the
page a step's `Target` names (`resolve_target`). The skill data model is `webrl.envs.skills`.

Resolution against a page (`resolve_target`) prefers an exact (case- and space-insensitive) name
match, then a name that starts with the wanted one, then one that contains it; role must match when
given. Elements in the viewport win ties, then document order. Resolution failing is a value (None),
never an exception: the grounded executor reports it as the failing step.

URL patterns are shell-style globs (`fnmatch`) matched against the URL's path, and against its query
when the pattern has a "?" (the first "?" separates the two globs; it is no wildcard), so a skill
keeps applying when the sandbox binds another port; a pattern that starts with "http" is matched
against the whole URL.
"""
from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence
from urllib.parse import urlparse

if TYPE_CHECKING:  # skills.py imports this module: no import cycle at run time
    from webrl.envs.skills import Target


def url_matches(pattern: str, url: str) -> bool:
    """Glob `pattern` against `url`'s path (+ "?query" if the pattern has "?"), or the whole URL
    when the pattern starts with "http"."""
    if pattern.startswith(("http://", "https://")):
        return fnmatch.fnmatchcase(url, pattern)
    parsed = urlparse(url)
    path_pattern, has_query, query_pattern = pattern.partition("?")  # "?" separates path and query
    if not fnmatch.fnmatchcase(parsed.path or "/", path_pattern):
        return False
    return not has_query or fnmatch.fnmatchcase(parsed.query, query_pattern)


def _norm(text: Any) -> str:
    return " ".join(str(text or "").split()).casefold()


def _role_of(element: Mapping[str, Any]) -> set[str]:
    return {_norm(element.get("role")), _norm(element.get("tag"))} - {""}


EDITABLE_ROLES = ("textbox", "searchbox", "spinbutton", "combobox", "input", "textarea")
"""Roles (and tags) a `type` step can type into."""


def resolve_target(target: Target, elements: Sequence[Mapping[str, Any]], kind: str = "") -> Optional[int]:
    """The Set-of-Mark id of the element `target` describes, or None.

    elements: the env's element dicts (`info["elements"]` or `turn.observation.elements`: id, role,
    tag, name, in_viewport). Rank: exact name > prefix > substring (a target without a name takes
    the first element of its role); in-viewport first, then document order. kind: the step's
    action kind; a `type` step whose target names no role looks among EDITABLE_ROLES first (a
    field's <label> carries the same name as the field).
    """
    if kind == "type" and not target.role:
        editable = [e for e in elements if _role_of(e) & set(EDITABLE_ROLES)]
        found = resolve_target(target, editable)
        if found is not None:
            return found
    role, name = _norm(target.role), _norm(target.name)
    best: Optional[tuple[int, int, int]] = None
    for order, e in enumerate(elements):
        if role and role not in _role_of(e):
            continue
        have = _norm(e.get("name"))
        if not name:
            rank = 0
        elif have == name:
            rank = 0
        elif have.startswith(name):
            rank = 1
        elif name in have:
            rank = 2
        else:
            continue
        key = (rank, 0 if e.get("in_viewport", True) else 1, order)
        if best is None or key < best:
            best = key
    return None if best is None else int(elements[best[2]]["id"])

"""Categorised exploration of a site: breadth-first over its same-origin pages in a real `WebEnv`,
each Set-of-Mark element sorted into a category by rules on role, tag, name and href.

Shapes: `ExplorationMap.pages` is a list of `PageRecord` (url, title, depth, how it was reached,
its `CategorisedElement`s); `to_json` / `from_json` round-trip it.

Category rules (`categorise`, first match wins):
  external       a link off the start URL's origin
  search         role searchbox, or a text field whose name / placeholder / DOM id says "search"
  filter         a select (role combobox / listbox with tag select) with at least 2 options
  form_field     any other text field, spinbutton, checkbox, radio or slider
  search_submit  a button named "search", "find" or "go" (or "search ...")
  action         a button whose name holds a state-changing verb (ACTION_WORDS: add, buy, book, ...)
  submit         any other button
  item           a same-origin link whose path's last segment holds a digit (an entity page:
                 /p/12, /book/LX123), unless it is a pager link (name a number, next/previous,
                 or a `page=` query)
  navigation     any other same-origin link
  other          the rest (generic widgets)

Departure from SynthAgent: the paper asks an LLM to group each page's elements into task
categories; here fixed rules do it, so exploration runs on CPU without an endpoint and the
categories are the same on every run. Only same-origin pages under the start URL's folder are
visited (a user's site may live under a path), at most `max_pages`, to depth `max_depth`.
"""
from __future__ import annotations

import json
import re
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urldefrag, urlparse

from webrl.actions import Action
from webrl.envs.task import BaseTask, TaskSpec, origin
from webrl.rollout.agents import action_decision
from webrl.rollout.episode import Decided, EndEpisode, EpisodeInfraError, EpisodeSpec, run_episode
from webrl.rollout.slots import GymSlot

ELEMENT_CATEGORIES = ("navigation", "item", "search", "search_submit", "form_field", "filter", "submit",
                      "action", "external", "other")
ACTION_WORDS = ("add", "buy", "book", "cart", "order", "checkout", "confirm", "reserve", "subscribe", "remove",
                "delete", "save", "send", "post")
_TEXT_ROLES = ("textbox", "combobox", "searchbox", "spinbutton", "checkbox", "radio", "slider")
_PAGER = re.compile(r"^(\d+|next|previous|prev|older|newer|[‹›«»<>]+.*|.*[‹›«»]+)$", re.I)


@dataclass
class CategorisedElement:
    category: str
    role: str
    tag: str
    name: str
    href: str = ""
    type: str = ""
    placeholder: str = ""
    options: list[str] = field(default_factory=list)


@dataclass
class PageRecord:
    url: str
    title: str
    depth: int
    reached_via: str = "start"
    """Category of the link followed to get here ("start" for the start page)."""
    via_name: str = ""
    """Accessible name of that link."""
    elements: list[CategorisedElement] = field(default_factory=list)

    def of(self, category: str) -> list[CategorisedElement]:
        return [e for e in self.elements if e.category == category]


@dataclass
class ExplorationMap:
    start_url: str
    pages: list[PageRecord] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Elements per category over all pages."""
        out = {c: 0 for c in ELEMENT_CATEGORIES}
        for page in self.pages:
            for e in page.elements:
                out[e.category] += 1
        return out

    def summary(self, max_names: int = 6) -> str:
        """A few lines per page for an LLM prompt: url, title, element names per category."""
        lines = []
        for page in self.pages:
            lines.append(f"Page {page.url} (title {page.title!r})")
            for category in ELEMENT_CATEGORIES:
                names = list(dict.fromkeys(e.name for e in page.of(category) if e.name))[:max_names]
                if names and category not in ("external", "other"):
                    lines.append(f"  {category}: " + "; ".join(repr(n) for n in names))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ExplorationMap":
        pages = [PageRecord(**{**p, "elements": [CategorisedElement(**e) for e in p["elements"]]}) for p in d["pages"]]
        return cls(d["start_url"], pages)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1, ensure_ascii=False))


def _has_digit_segment(path: str) -> bool:
    last = [s for s in path.split("/") if s]
    return bool(last) and any(ch.isdigit() for ch in last[-1])


def categorise(element: dict, site_origin: str) -> str:
    """The category of one `info["elements"]` dict (rules in the module docstring)."""
    role, tag = element.get("role", ""), element.get("tag", "")
    name = (element.get("name") or "").strip().lower()
    hint = " ".join(str(element.get(k) or "") for k in ("name", "placeholder", "dom_id")).lower()
    href = element.get("href") or ""
    if role == "link" and href:
        if origin(href) != site_origin:
            return "external"
        parts = urlparse(href)
        pager = bool(_PAGER.match(name)) or "page" in parse_qs(parts.query)
        return "item" if _has_digit_segment(parts.path) and not pager else "navigation"
    if role == "searchbox" or (tag in ("input", "textarea") and role in ("textbox", "combobox") and "search" in hint):
        return "search"
    if tag == "select" and len(element.get("options") or []) >= 2:
        return "filter"
    if tag in ("input", "textarea") or role in _TEXT_ROLES:
        return "form_field"
    if role == "button":
        words = re.findall(r"[a-z]+", name)
        if words and words[0] in ("search", "find", "go"):
            return "search_submit"
        if any(w in ACTION_WORDS for w in words):
            return "action"
        return "submit"
    return "other"


def short_name(element: CategorisedElement) -> str:
    """A select's label without its options' text ("Brand All brands Altura" -> "Brand")."""
    name = element.name
    if element.options and f" {element.options[0]}" in name:  # the name may be clipped: cut at the first option
        return name[:name.index(f" {element.options[0]}")].strip() or name
    return name


def categorised(element: dict, site_origin: str) -> CategorisedElement:
    return CategorisedElement(categorise(element, site_origin), element.get("role", ""), element.get("tag", ""),
                              (element.get("name") or "").strip(), urldefrag(element.get("href") or "")[0],
                              element.get("type") or "", element.get("placeholder") or "",
                              list(element.get("options") or []))


def _in_scope(url: str, start_url: str) -> bool:
    start = urlparse(start_url)
    folder = start.path if start.path.endswith("/") else start.path.rsplit("/", 1)[0] + "/"
    return origin(url) == origin(start_url) and urlparse(url).path.startswith(folder)


class ExploreAgent:
    """Breadth-first exploration as the episode runner's agent: records each page it is shown (in
    scope, not seen before, no action error), queues its navigation and item links, then opens
    the next queued link with `goto`, the two queues taken in turn; ends the episode ("explored")
    when nothing is queued or `max_pages` pages are recorded."""

    def __init__(self, start_url: str, max_pages: int, max_depth: int):
        self.start_url, self.max_pages, self.max_depth = start_url, max_pages, max_depth
        self.site_origin = origin(start_url)
        self.map = ExplorationMap(start_url)
        self.seen: set[str] = {urldefrag(start_url)[0]}
        self.queues: dict[str, deque] = {"navigation": deque(), "item": deque()}
        self.turn = -1  # navigation first, then items, in turn
        self.current = (0, "start", "")  # depth, how and via which link the shown page was reached

    def __call__(self, request: Any, result: Any) -> Decided | EndEpisode:
        self._record(result.observation, result.info)
        waiting = [q for q in self.queues.values() if q]
        if not waiting or len(self.map.pages) >= self.max_pages:
            return EndEpisode("explored")
        self.turn += 1
        href, depth, via, via_name = waiting[self.turn % len(waiting)].popleft()
        self.current = (depth, via, via_name)
        return Decided(action_decision(Action("goto", text=href), request.observation), -1, "explore")

    def _record(self, obs: dict, info: dict) -> None:
        depth, via, via_name = self.current
        url = urldefrag(obs["url"])[0]
        self.seen.add(url)
        if obs["last_action_error"] or not _in_scope(url, self.start_url) or any(p.url == url for p in self.map.pages):
            return
        page = PageRecord(url, obs["title"], depth, via, via_name,
                          [categorised(e, self.site_origin) for e in info["elements"]])
        self.map.pages.append(page)
        for e in page.elements:
            if e.category in ("navigation", "item") and e.href not in self.seen and _in_scope(e.href, self.start_url) \
                    and depth + 1 <= self.max_depth:
                self.seen.add(e.href)
                self.queues[e.category].append((e.href, depth + 1, e.category, e.name))


def explore(env: Any, start_url: str, max_pages: int = 12, max_depth: int = 2) -> ExplorationMap:
    """Visit up to `max_pages` pages breadth-first from `start_url` in `env` (a `WebEnv`): one
    episode of the episode runner whose agent (`ExploreAgent`) opens each page with `goto`. Links
    are queued in DOM order, navigation and item links in two queues taken in turn, so that a
    small page budget sees listings and item pages. An infrastructure failure ends the
    exploration with the pages recorded so far."""
    spec = TaskSpec(id="synth/explore", goal="Explore the site", start_url=start_url, max_steps=max_pages + 2)
    agent = ExploreAgent(start_url, max_pages, max_depth)
    try:
        run_episode(EpisodeSpec(BaseTask(spec), max_turns=env.config.max_steps or spec.max_steps, screenshot="none"),
                    GymSlot(env), agent)
    except EpisodeInfraError:
        pass  # as when the env ends the episode: the map holds what was reached
    return agent.map

"""Server-side state of every browser session, keyed by the `webrl_sid` cookie.

One `SessionStore` per process holds one `SessionState` per episode. `Task.setup` creates the
state in-process (the sites' server runs in the same process as the env) and sends the browser
to `/__session?sid=...`, which sets the cookie; from then on every request of that
BrowserContext reads and writes only its own state, so parallel episodes never collide.
Checkers read the same objects, under the store's lock, to score an episode.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Optional

COOKIE_NAME = "webrl_sid"
SITES = ("shop", "travel", "wiki", "widgets")


@dataclass
class ShopState:
    """cart: (product_id, size, colour) -> quantity, in insertion order ("" = no variant).
    orders: placed orders, each {"id", "lines": [(pid, size, colour, qty)], "fields": {...}}.
    viewed: product ids in the order their pages were opened.
    listings: every listing visited, as {"category", "q", "brand", "sort", ...} query dicts."""

    cart: dict[tuple[int, str, str], int] = field(default_factory=dict)
    orders: list[dict[str, Any]] = field(default_factory=list)
    viewed: list[int] = field(default_factory=list)
    listings: list[dict[str, str]] = field(default_factory=list)


@dataclass
class TravelState:
    """searches: query dicts of result pages seen; selected: flight ids whose booking page
    was opened, in order; bookings: {"ref", "flight_id", "passengers", "cabin", "first_name",
    "last_name", "email"}."""

    searches: list[dict[str, str]] = field(default_factory=list)
    selected: list[str] = field(default_factory=list)
    bookings: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class WikiState:
    """visited: article slugs in visit order; searches: queries submitted."""

    visited: list[str] = field(default_factory=list)
    searches: list[str] = field(default_factory=list)


@dataclass
class WidgetsState:
    """values: control id -> current value (str; "true"/"false" for checkboxes);
    clicks: ids of buttons/tabs clicked, in order; links: link slugs followed;
    submissions: snapshots of all values taken when a submit button was clicked."""

    values: dict[str, str] = field(default_factory=dict)
    clicks: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    submissions: list[dict[str, str]] = field(default_factory=list)


SITE_STATES = {"shop": ShopState, "travel": TravelState, "wiki": WikiState, "widgets": WidgetsState}


@dataclass
class SessionState:
    """One episode's server state. `seed` varies the pages (layouts, featured items);
    `params` are the task's generator parameters (the widgets page is built from them)."""

    sid: str
    site: str = ""
    seed: int = 0
    level: int = 0
    split: str = "train"
    params: dict[str, Any] = field(default_factory=dict)
    shop: ShopState = field(default_factory=ShopState)
    travel: TravelState = field(default_factory=TravelState)
    wiki: WikiState = field(default_factory=WikiState)
    widgets: WidgetsState = field(default_factory=WidgetsState)

    def __post_init__(self) -> None:
        if self.site and self.site not in SITES:
            raise ValueError(f"SessionState.site must be one of {SITES} or '', got {self.site!r}")


class SessionStore:
    """Thread-safe sid -> SessionState map; the least recently used entries beyond
    `capacity` are dropped so a long run does not grow without bound."""

    def __init__(self, capacity: int = 4096):
        self.capacity = capacity
        self.lock = threading.RLock()
        self._states: "OrderedDict[str, SessionState]" = OrderedDict()

    def put(self, state: SessionState) -> SessionState:
        with self.lock:
            self._states[state.sid] = state
            self._states.move_to_end(state.sid)
            while len(self._states) > self.capacity:
                self._states.popitem(last=False)
            return state

    def get(self, sid: Optional[str]) -> Optional[SessionState]:
        with self.lock:
            state = self._states.get(sid or "")
            if state is not None:
                self._states.move_to_end(sid)
            return state

    def get_or_create(self, sid: str) -> SessionState:
        with self.lock:
            return self.get(sid) or self.put(SessionState(sid=sid))

    def drop(self, sid: str) -> None:
        with self.lock:
            self._states.pop(sid, None)

    def __len__(self) -> int:
        return len(self._states)


STORE = SessionStore()

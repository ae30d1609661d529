"""One `WebEnv` episode's browser state (its `Tabs`), and how its tabs settle after an action.

After every action (and after the first page opens) the shell settles the episode before it
observes: tabs the page opened are followed (the newest becomes active), closed ones are
dropped, tabs a dialog flood blocked are closed, the active page is waited on until ready, a
tab that may still be coming (a target=_blank click, `window.open`) gets a short wait, and
every tab is checked against the allowlist. What happened comes back as feedback notes.
`resolve_alias` sends an action's URL on the task's shown origin to the real one.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from webrl.actions import Action
from webrl.envs.browser import BrowserConfig, EpisodeEvents
from webrl.envs.execute import PageUnresponsive
from webrl.envs.observation import ObservationConfig, wait_ready_and_collect
from webrl.envs.readiness import (POPUP_WAIT_S, READY_TIMEOUT_S, RESPONSIVE_PROBE_S, arm_and_stamp, is_responsive,
                                  wait_until_ready)
from webrl.envs.recording import EpisodeRecording
from webrl.envs.safety import Deadline, DomainAllowlist, close_page_quietly, guard_tab_urls
from webrl.envs.task import OriginAlias, Task


class Tabs:
    """An episode's open tabs in opening order; `active` indexes the observed tab."""

    def __init__(self, context: Any):
        self.context = context
        self.pages: list[Any] = []
        self.active = 0
        self.titles: dict[int, str] = {}  # id(page) -> last title read

    @property
    def page(self) -> Any:
        return self.pages[self.active]

    def add(self, page: Any, follow: bool = True) -> int:
        if page not in self.pages:
            self.pages.append(page)
        if follow:
            self.active = self.pages.index(page)
        return self.pages.index(page)

    def prune(self) -> list[str]:
        """Forget closed tabs; keep `active` on the same tab, or the previous one if it closed."""
        notes, kept = [], []
        for index, page in enumerate(self.pages):
            if page.is_closed():
                notes.append(f"Tab {index} was closed")
                if index < self.active or (index == self.active and self.active > 0):
                    self.active -= 1
            else:
                kept.append(page)
        self.pages = kept
        self.active = min(max(self.active, 0), max(len(kept) - 1, 0))
        return notes


@dataclass
class Episode:
    """The running episode of one env.

    generation: the `BrowserSession.generation` its context was opened in (a relaunch makes
        it stale). elements / screenshot_size: of the last observation (actions address them).
    alias: the task's stable origin for a local server's real one (None: real URLs shown).
    recording: the HAR it records to or replays from (None: recording off).
    pooled: its context is the env slot's reusable one (`webrl.envs.context_pool`), kept after
        the episode instead of closed.
    """

    task: Task
    context: Any
    tabs: Tabs
    events: EpisodeEvents
    allowlist: DomainAllowlist
    generation: int
    max_steps: int
    steps: int = 0
    env_time_s: float = 0.0
    elements: list = field(default_factory=list)
    screenshot_size: tuple = (0, 0)
    top_frames: int = 1  # iframe/frame elements of the observed top document (0: actions skip the frame search)
    done: bool = False
    alias: Optional[OriginAlias] = None
    recording: Optional[EpisodeRecording] = None
    pooled: bool = False
    prefetched: Optional[tuple] = None
    """(page, url, collected, png or None): the element list the last readiness wait collected
    with it, and the screenshot taken during that wait when the page did not change after it."""
    early_misses: int = 0
    """Early screenshots this episode that the page outdated (a restless page stops them)."""


def resolve_alias(episode: Episode, action: Action) -> Action:
    """`goto`/`new_tab` URLs on the task's shown origin go to the real one."""
    if episode.alias is not None and action.kind in ("goto", "new_tab") and action.text:
        return dataclasses.replace(action, text=episode.alias.resolve(action.text))
    return action


def settle(episode: Episode, browser: BrowserConfig, deadline: Deadline, before: tuple[Any, str],
           description: str = "", observation: Optional[ObservationConfig] = None,
           early_screenshot: bool = False) -> list[str]:
    """Follow new tabs, drop closed ones, close flooded ones, wait for readiness; the notes.

    before: (active page, its URL) before the action, to report a navigation the action's
    `description` does not already mention. observation: also collect the active tab's elements
    in the readiness wait's round trip (`episode.prefetched`). early_screenshot: also take the
    screenshot inside the DOM-quiet window (`_early_screenshot`), kept when the page did not change.
    """
    events, tabs = episode.events, episode.tabs
    episode.prefetched = None
    for page in events.flooded_pages:
        if page is tabs.page:
            raise PageUnresponsive("the page opened dialogs in a loop")
        close_page_quietly(page)
    events.flooded_pages.clear()
    notes, new_pages = events.drain()
    notes += tabs.prune()
    opened = _follow_new_tabs(episode, new_pages, notes)
    ready = _wait_ready(episode, browser, deadline, observation, early_screenshot)
    if ready is not None and ready.get("blockedPopups"):
        notes.append(f"Blocked {ready['blockedPopups']} popup(s) opened without a user action")
    if ready is not None and ready.get("popup") and not opened:
        try:  # a link with target=_blank or window.open: its tab arrives a little later
            episode.context.wait_for_event("page", timeout=deadline.timeout_ms(POPUP_WAIT_S))
        except PlaywrightTimeout:
            pass
        more_notes, more_pages = events.drain()
        notes += more_notes
        if _follow_new_tabs(episode, more_pages, notes):
            _wait_ready(episode, browser, deadline, observation)
    guard_tab_urls(tabs.pages, episode.allowlist, notes.append)
    if tabs.page is before[0] and tabs.page.url != before[1] and tabs.page.url not in description:
        notes.append(f"Page navigated to {tabs.page.url}")
    final_notes, _ = events.drain()  # dialogs / blocks that happened while waiting
    return notes + final_notes


def _follow_new_tabs(episode: Episode, pages: list, notes: list[str]) -> bool:
    """Add tabs the page opened and make the newest one active; True if there was one."""
    opened = False
    for page in pages:
        if not page.is_closed():
            index = episode.tabs.add(page, follow=True)
            notes.append(f"New tab opened (tab {index}): {page.url}")
            opened = True
    if not episode.tabs.pages:
        raise PageUnresponsive("every tab of the episode was closed")
    return opened


def _wait_ready(episode: Episode, browser: BrowserConfig, deadline: Deadline,
                observation: Optional[ObservationConfig] = None, early_screenshot: bool = False) -> Optional[dict]:
    page = episode.tabs.page
    # the first observation of an episode waits for the page load like a navigation does
    cap = READY_TIMEOUT_S if episode.steps else max(READY_TIMEOUT_S, browser.load_timeout_s)
    if observation is None:
        ready = wait_until_ready(page, deadline.timeout_s(cap), token=episode.steps)
    else:
        early = _early_screenshot(episode, page, deadline) if early_screenshot else None
        ready, collected = wait_ready_and_collect(page, observation, deadline.timeout_s(cap),
                                                  token=episode.steps)
        png = None
        if early is not None:
            kept = ready is not None and ready.get("stamp") == early[0] and not ready.get("popup")
            # the reset's miss (a page still settling after its load) is not held against the steps
            png, episode.early_misses = (early[1], 0) if kept else (None, episode.early_misses + bool(episode.steps))
        episode.prefetched = (page, page.url, collected, png) if collected is not None else None
    if ready is None and not is_responsive(page, min(RESPONSIVE_PROBE_S, max(deadline.remaining(), 0.1))):
        raise PageUnresponsive("the page stopped responding (a script may be looping)")
    return ready


EARLY_MISS_LIMIT = 2
"""After this many early screenshots in a row that the page outdated, an episode stops taking them."""


def _early_screenshot(episode: Episode, page: Any, deadline: Deadline) -> Optional[tuple[list, bytes]]:
    """(stamp, png) of a screenshot taken at the start of the readiness wait, or None.

    The DOM-quiet window is time the page is watched for changes; a screenshot taken inside it
    is the observation when nothing changed after it: the stamp (`PAGE_STAMP`: document, DOM
    mutations seen, last network answer) read before the screenshot equals the one the ready
    answer carries. Otherwise the caller takes the screenshot again after the wait, as without
    this. Taken only when the page is calm (loaded, nothing in flight, no navigation or tab
    coming) and the episode's steps have not outdated the last `EARLY_MISS_LIMIT` ones (a miss at
    the reset, where a page may still be settling after its load, does not count). The arm
    call also starts the quiet window, so the screenshot's time counts toward it. A page that
    fails to answer here is left to the readiness wait that follows, which reports it."""
    if episode.early_misses >= EARLY_MISS_LIMIT:
        return None
    try:
        armed = arm_and_stamp(page, deadline.timeout_s(EARLY_TIMEOUT_S), token=episode.steps)
        if not armed or not armed.get("calm") or armed.get("stamp") is None:
            return None
        return armed["stamp"], page.screenshot(type="png", scale="css", timeout=deadline.timeout_ms(EARLY_TIMEOUT_S))
    except PlaywrightError:
        return None


EARLY_TIMEOUT_S = 1.0
"""Cap for the early screenshot and its arm call; past it the wait goes on as without them."""


def count_repeats(notes: list[str]) -> list[str]:
    """Identical notes once, in first-seen order, with "(xN)" when repeated (blocked trackers)."""
    counts: dict[str, int] = {}
    for note in notes:
        counts[note] = counts.get(note, 0) + 1
    return [note if n == 1 else f"{note} (x{n})" for note, n in counts.items()]

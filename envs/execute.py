"""Execute a typed `Action` in the episode's browser tabs.

`execute_action` returns a short description of what was done ("Clicked <button> 'Search'");
the env appends the effects (navigation, new tab, dialogs, blocked requests). Agent mistakes
raise `ActionFailed` (the message becomes `last_action_error`, the episode continues); a tab
that stops answering raises `PageUnresponsive` (the env closes it).

Every call into the page carries a timeout from the step's `Deadline`. That is why this module
never uses `page.mouse` / `page.keyboard` / `page.evaluate`: those wait forever on a page whose
main thread is stuck in a script (measured: `keyboard.press` never returned on a `while(true)`
page). Point actions instead find the element under the point with a time-bounded script and
act through a locator at that position; keys go through a locator on the focused element;
scrolling is `scrollBy` on the scrollable ancestor under the point (no wheel events). The
scripts live in `webrl.envs.page_scripts`.

Element ids resolve to som.js's `data-webrl-id` marks; a mark inside a same-origin iframe is
found by a time-bounded lookup that returns the frame path, and the action goes through frame
locators (typing into a frame's focused field works the same way). `scroll(id)` still scrolls
in the top document only.

Coordinates: actions carry observation-screenshot pixels; they are scaled to viewport CSS
pixels by (viewport size / screenshot size), which is 1 unless a caller resizes screenshots.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from webrl.actions import Action
from webrl.envs.browser import BrowserConfig, launched_with_proxy
from webrl.envs.page_scripts import FOCUS_JS, FRAME_PATH_JS, POINT_JS, SCROLL_JS
from webrl.envs.readiness import RESPONSIVE_PROBE_S, evaluate_with_timeout, is_responsive
from webrl.envs import safety as limits  # ACTION_TIMEOUT_S, MAX_TABS read at call time (tests patch them)
from webrl.envs.safety import PROXY_BLOCK_ERROR, Deadline, DomainAllowlist, SafetyConfig

if TYPE_CHECKING:  # episode.py imports this module: no import cycle at run time
    from webrl.envs.episode import Tabs

DEFAULT_SCROLL_AMOUNT = 0.5  # viewport fraction when scroll() gives no amount
DEFAULT_WAIT_S = 1.0
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://|^(about|data|javascript|blob|file|chrome|view-source):", re.I)
_KEY_ALIASES = {k.lower(): k for k in (
    "Enter", "Tab", "Escape", "Backspace", "Delete", "ArrowUp", "ArrowDown", "ArrowLeft",
    "ArrowRight", "PageUp", "PageDown", "Home", "End", "Space", "Control", "Shift", "Alt", "Meta",
    "Insert", "ControlOrMeta")}
_KEY_ALIASES.update({"ctrl": "Control", "cmd": "Meta", "esc": "Escape", "return": "Enter",
                     "up": "ArrowUp", "down": "ArrowDown", "left": "ArrowLeft", "right": "ArrowRight",
                     "del": "Delete", "pgup": "PageUp", "pgdn": "PageDown"})


class ActionFailed(Exception):
    """The agent's action could not be carried out; the message is shown to the agent."""


class PageUnresponsive(Exception):
    """The tab stopped answering (a script loops, a dialog flood): it must be closed."""


@dataclass
class ActionContext:
    """Everything an action needs besides itself."""

    tabs: Tabs
    elements: Sequence[dict[str, Any]]
    screenshot_size: tuple[int, int]  # (width, height) of the last observation's screenshot
    viewport: tuple[int, int]  # (width, height) in CSS pixels
    deadline: Deadline
    browser: BrowserConfig
    safety: SafetyConfig
    allowlist: DomainAllowlist
    on_new_page: Callable[[Any], None] = field(default=lambda page: None)
    top_frames: int = 1
    """iframe/frame elements in the observed top document; 0 means every marked element is in it,
    so `_locator` skips the frame search (a round trip trio per element action)."""

    def timeout_ms(self) -> float:
        return self.deadline.timeout_ms(limits.ACTION_TIMEOUT_S)


def execute_action(action: Action, ctx: ActionContext) -> str:
    """Run `action` in the active tab; returns what was done. Raises ActionFailed / PageUnresponsive."""
    handler = _HANDLERS[action.kind]
    page = ctx.tabs.page
    try:
        return handler(action, ctx)
    except PlaywrightTimeout as error:
        if not page.is_closed() and not is_responsive(page, min(RESPONSIVE_PROBE_S, max(ctx.deadline.remaining(), 0.1))):
            raise PageUnresponsive(f"the page stopped responding during {action.kind}") from error
        raise ActionFailed(f"{action.kind} timed out: {_summarize(error)}") from error
    except PlaywrightError as error:
        if page.is_closed() or "Target crashed" in str(error) or "has been closed" in str(error):
            raise
        raise ActionFailed(f"{action.kind} failed: {_summarize(error)}") from error


def _summarize(error: Exception) -> str:
    """First line of a Playwright error plus the last call-log line (why it waited)."""
    lines = [line.strip(" -") for line in str(error).splitlines() if line.strip()]
    head = lines[0].split(": ", 1)[-1] if lines else type(error).__name__
    detail = lines[-1] if len(lines) > 2 else ""
    return f"{head} ({detail})" if detail and detail != head else head


def describe(element: dict[str, Any]) -> str:
    return f"<{element['tag']}> {element['name']!r}"


def _element(action: Action, ctx: ActionContext) -> dict[str, Any]:
    n = len(ctx.elements)
    if action.element is None or not 0 <= action.element < n:
        valid = f"ids are 0..{n - 1}" if n else "the page has no marked elements"
        raise ActionFailed(f"no element with id {action.element} ({valid})")
    return ctx.elements[action.element]


def _in_frames(ctx: ActionContext, frames: Sequence[str] | None) -> Any:
    """The active page, or the same-origin frame reached through these data-webrl-frame marks."""
    scope = ctx.tabs.page
    for mark in frames or ():
        scope = scope.frame_locator(f'[data-webrl-frame="{mark}"]')
    return scope


def _locator(ctx: ActionContext, element_id: int) -> Any:
    selector = f'[data-webrl-id="{element_id}"]'
    if ctx.top_frames == 0:  # som.js marked no element inside a frame: the top document holds it
        return ctx.tabs.page.locator(selector)
    frames = evaluate_with_timeout(ctx.tabs.page, FRAME_PATH_JS, selector,
                                   ctx.deadline.timeout_s(limits.ACTION_TIMEOUT_S))
    return _in_frames(ctx, frames).locator(selector)


def _to_viewport(ctx: ActionContext, x: float, y: float) -> tuple[float, float]:
    width, height = ctx.screenshot_size
    if not (0 <= x < width and 0 <= y < height):
        raise ActionFailed(f"point ({x:g}, {y:g}) is outside the {width}x{height} screenshot")
    return x * ctx.viewport[0] / width, y * ctx.viewport[1] / height


def _point_target(ctx: ActionContext, x: float, y: float, mark: str) -> tuple[Any, dict[str, Any]]:
    vx, vy = _to_viewport(ctx, x, y)
    hit = evaluate_with_timeout(ctx.tabs.page, POINT_JS, {"x": vx, "y": vy, "mark": mark},
                                ctx.deadline.timeout_s(limits.ACTION_TIMEOUT_S))
    if not hit:
        raise ActionFailed(f"nothing is under the point ({x:g}, {y:g})")
    return ctx.tabs.page.locator(f'[data-webrl-point="{mark}"]').first, hit


def _click(action: Action, ctx: ActionContext) -> str:
    element = _element(action, ctx)
    _locator(ctx, element["id"]).click(button=action.button, click_count=action.clicks,
                                      timeout=ctx.timeout_ms())
    return f"{_verb(action)} {describe(element)}"


def _verb(action: Action) -> str:
    prefix = {1: "", 2: "Double-", 3: "Triple-"}[action.clicks]
    verb = "clicked" if prefix else "Clicked"
    return f"{prefix}{verb}" + ("" if action.button == "left" else f" ({action.button} button)")


def _click_at(action: Action, ctx: ActionContext) -> str:
    target, hit = _point_target(ctx, action.x, action.y, "click")
    target.click(button=action.button, click_count=action.clicks, force=True,
                 position={"x": hit["dx"], "y": hit["dy"]}, timeout=ctx.timeout_ms())
    return f"{_verb(action)} at ({action.x:g}, {action.y:g}) on <{hit['tag']}> {hit['name']!r}"


def _hover(action: Action, ctx: ActionContext) -> str:
    element = _element(action, ctx)
    _locator(ctx, element["id"]).hover(timeout=ctx.timeout_ms())
    return f"Hovered over {describe(element)}"


def _hover_at(action: Action, ctx: ActionContext) -> str:
    target, hit = _point_target(ctx, action.x, action.y, "hover")
    target.hover(force=True, position={"x": hit["dx"], "y": hit["dy"]}, timeout=ctx.timeout_ms())
    return f"Hovered at ({action.x:g}, {action.y:g}) over <{hit['tag']}> {hit['name']!r}"


def _type(action: Action, ctx: ActionContext) -> str:
    element_id = None if action.element is None else _element(action, ctx)["id"]
    found = evaluate_with_timeout(ctx.tabs.page, FOCUS_JS, {"id": element_id, "needEditable": True},
                                  ctx.deadline.timeout_s(limits.ACTION_TIMEOUT_S))
    if not found["ok"]:
        if found["why"] == "nofocus":
            raise ActionFailed("no text field has focus: click a text field first or pass its element id")
        if found["why"] == "missing":
            raise ActionFailed(f"element {element_id} is no longer on the page")
        where = f"element {element_id}" if element_id is not None else "the focused element"
        raise ActionFailed(f"{where} (<{found['tag']}>) is not an editable text field")
    target = _in_frames(ctx, found.get("frames")).locator("[data-webrl-focus]").first
    if action.clear and found["hasText"]:
        target.press("Control+a", timeout=ctx.timeout_ms())
        target.press("Backspace", timeout=ctx.timeout_ms())
    # typing takes a few ms a key: allow the whole remaining step for long texts
    target.press_sequentially(action.text, timeout=ctx.deadline.timeout_ms())
    where = describe(ctx.elements[element_id]) if element_id is not None else f"the focused <{found['tag']}>"
    return f"Typed {action.text!r} into {where}" + (" (cleared first)" if action.clear and found["hasText"] else "")


def _select(action: Action, ctx: ActionContext) -> str:
    element = _element(action, ctx)
    if element["tag"] != "select":
        raise ActionFailed(f"element {element['id']} is a <{element['tag']}>, not a <select>: "
                           "click it, then click the option")
    options = element["options"]
    wanted = action.text.strip()
    match = next((o for o in options if o == wanted), None) or \
        next((o for o in options if o.strip().lower() == wanted.lower()), None)
    if match is None:
        raise ActionFailed(f"{describe(element)} has no option {action.text!r}; options: {options}")
    _locator(ctx, element["id"]).select_option(label=match, timeout=ctx.timeout_ms())
    return f"Selected {match!r} in {describe(element)}"


def _scroll(action: Action, ctx: ActionContext) -> str:
    amount = DEFAULT_SCROLL_AMOUNT if action.amount is None else float(action.amount)
    if not 0 < amount <= 10:
        raise ActionFailed(f"scroll amount must be a viewport fraction in (0, 10], got {amount:g}")
    vertical = action.direction in ("up", "down")
    pixels = round(amount * (ctx.viewport[1] if vertical else ctx.viewport[0]))
    sign = -1 if action.direction in ("up", "left") else 1
    arg = {"id": None, "x": None, "y": None, "dx": 0 if vertical else sign * pixels,
           "dy": sign * pixels if vertical else 0}
    where = ""
    if action.element is not None:
        element = _element(action, ctx)
        arg["id"], where = element["id"], f" in {describe(element)}"
    elif action.x is not None:
        arg["x"], arg["y"] = _to_viewport(ctx, action.x, action.y)
        where = f" at ({action.x:g}, {action.y:g})"
    result = evaluate_with_timeout(ctx.tabs.page, SCROLL_JS, arg,
                                   ctx.deadline.timeout_s(limits.ACTION_TIMEOUT_S))
    if not result["moved"]:
        return f"Scrolled {action.direction}{where}: already at the end, nothing moved"
    return (f"Scrolled {action.direction} {pixels} px{where} "
            f"(now at {result['top']} of {result['height']} px)")


def _press(action: Action, ctx: ActionContext) -> str:
    keys = [_normalize_key(k) for k in (action.text.split() or [" "])]
    found = evaluate_with_timeout(ctx.tabs.page, FOCUS_JS, {"id": None, "needEditable": False},
                                  ctx.deadline.timeout_s(limits.ACTION_TIMEOUT_S))
    target = _in_frames(ctx, found.get("frames")).locator("[data-webrl-focus]").first if found and found["ok"] \
        else ctx.tabs.page.locator("body")
    for key in keys:
        try:
            target.press(key, timeout=ctx.timeout_ms())
        except PlaywrightError as error:
            if "Unknown key" in str(error):
                raise ActionFailed(f"unknown key {key!r} (use names like Enter, Tab, Control+A)") from error
            raise
    return f"Pressed {' '.join(keys)}"


def _normalize_key(chord: str) -> str:
    parts = chord.split("+") if chord not in ("+", " ") else [chord]
    return "+".join(_KEY_ALIASES.get(p.lower(), p) for p in parts)


def normalize_url(url: str) -> str:
    """Add http:// to scheme-less URLs ("example.com/x"); leave everything else alone."""
    url = url.strip()
    return url if _SCHEME.match(url) else "http://" + url


def _goto(action: Action, ctx: ActionContext) -> str:
    url = normalize_url(action.text)
    reason = ctx.allowlist.check_navigation(url)
    if reason:
        raise ActionFailed(f"navigation to {url} blocked: {reason}")
    _navigate(ctx, lambda timeout: ctx.tabs.page.goto(url, wait_until="domcontentloaded", timeout=timeout), url)
    return f"Went to {url}"


def _navigate(ctx: ActionContext, go: Callable[[float], Any], what: str) -> Any:
    try:
        return go(ctx.deadline.timeout_ms(ctx.browser.load_timeout_s))
    except PlaywrightTimeout:
        raise
    except PlaywrightError as error:
        message = str(error).splitlines()[0]
        if "net::" in message:
            code = message.split("net::", 1)[1].split()[0]
            if (f"net::{code}" == PROXY_BLOCK_ERROR and ctx.safety.subresource_policy == "allowlist"
                    and not launched_with_proxy(ctx.browser)):
                code = "ERR_BLOCKED_BY_CLIENT (outside the allowed domains)"  # the guard's proxy refused it
            raise ActionFailed(f"could not load {what}: {code}") from error
        raise


def _history(action: Action, ctx: ActionContext) -> str:
    page = ctx.tabs.page
    before = page.url
    method = page.go_back if action.kind == "back" else page.go_forward
    response = _navigate(ctx, lambda timeout: method(wait_until="domcontentloaded", timeout=timeout), action.kind)
    if response is None and page.url == before:
        raise ActionFailed(f"no {'previous' if action.kind == 'back' else 'next'} page in this tab's history")
    return f"Went {action.kind} to {page.url}"


def _new_tab(action: Action, ctx: ActionContext) -> str:
    if len(ctx.tabs.pages) >= limits.MAX_TABS:
        raise ActionFailed(f"cannot open more than {limits.MAX_TABS} tabs; close one first")
    url = normalize_url(action.text) if action.text else None
    reason = ctx.allowlist.check_navigation(url) if url else None
    if reason:
        raise ActionFailed(f"new tab to {url} blocked: {reason}")
    page = ctx.tabs.context.new_page()
    ctx.on_new_page(page)
    index = ctx.tabs.add(page, follow=True)
    if url:
        _navigate(ctx, lambda timeout: page.goto(url, wait_until="domcontentloaded", timeout=timeout), url)
    return f"Opened tab {index}" + (f" at {url}" if url else "")


def _switch_tab(action: Action, ctx: ActionContext) -> str:
    if not 0 <= action.tab < len(ctx.tabs.pages):
        raise ActionFailed(f"no tab {action.tab} (tabs are 0..{len(ctx.tabs.pages) - 1})")
    ctx.tabs.active = action.tab
    return f"Switched to tab {action.tab}"


def _close_tab(action: Action, ctx: ActionContext) -> str:
    index = ctx.tabs.active if action.tab is None else action.tab
    if not 0 <= index < len(ctx.tabs.pages):
        raise ActionFailed(f"no tab {index} (tabs are 0..{len(ctx.tabs.pages) - 1})")
    if len(ctx.tabs.pages) == 1:
        raise ActionFailed("cannot close the last tab")
    ctx.tabs.pages[index].close(run_before_unload=False)
    ctx.tabs.prune()
    return f"Closed tab {index}; now on tab {ctx.tabs.active}"


def _drag(action: Action, ctx: ActionContext) -> str:
    source, hit = _point_target(ctx, action.x, action.y, "from")
    target, to_hit = _point_target(ctx, action.to_x, action.to_y, "to")
    source.drag_to(target, force=True, source_position={"x": hit["dx"], "y": hit["dy"]},
                   target_position={"x": to_hit["dx"], "y": to_hit["dy"]}, timeout=ctx.timeout_ms())
    return f"Dragged from ({action.x:g}, {action.y:g}) to ({action.to_x:g}, {action.to_y:g})"


def _wait(action: Action, ctx: ActionContext) -> str:
    seconds = DEFAULT_WAIT_S if action.amount is None else float(action.amount)
    if not 0 <= seconds <= 60:
        raise ActionFailed(f"wait takes 0..60 seconds, got {seconds:g}")
    seconds = min(seconds, max(ctx.deadline.remaining() - 1.0, 0.0))  # keep time to observe
    ctx.tabs.page.wait_for_timeout(seconds * 1000)  # pumps events (dialogs) unlike time.sleep
    return f"Waited {seconds:g} s"


def _answer(action: Action, ctx: ActionContext) -> str:
    return f"Answered {action.text!r}"


def _stop(action: Action, ctx: ActionContext) -> str:
    return "Stopped"


_HANDLERS: dict[str, Callable[[Action, ActionContext], str]] = {
    "click": _click, "click_at": _click_at, "hover": _hover, "hover_at": _hover_at, "type": _type,
    "select": _select, "scroll": _scroll, "scroll_at": _scroll, "press": _press, "goto": _goto,
    "back": _history, "forward": _history, "new_tab": _new_tab, "switch_tab": _switch_tab,
    "close_tab": _close_tab, "drag": _drag, "wait": _wait, "answer": _answer, "stop": _stop,
}

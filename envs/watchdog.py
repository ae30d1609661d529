"""A step watchdog: closes an episode's browser context from a timer thread when a step (or reset,
or teardown) overruns, and kills the browser if that is not enough.

Every Playwright call of a step is given a timeout from the step's `Deadline`, but Playwright's
own timeouts do not fire in every state of a hung page. Seen with Playwright 1.65: a
`wait_for_function` whose in-page poll has started when the page's main thread gets stuck in a
script times out, and then awaits an un-timed in-page `abort()` on that stuck page, so the call
never returns (the readiness wait and `evaluate_with_timeout` both use it; a page that starts a
busy loop while the env waits for it to settle hangs the env worker for good).

The watchdog does not depend on the page: `limit_s` after it is armed it schedules
`BrowserContext.close()` on Playwright's event loop from its own thread
(`loop.call_soon_threadsafe`). Closing a context is done by the browser process, which a stuck
renderer does not block; every pending call on the context's pages then fails with a
`TargetClosedError`, and the env ends the episode as an infra error. `fired` tells the env
why the context went away.

Closing the context is itself a request that the browser and the driver must answer. Seen
(issue 54): right after a page that opened 50 pop-ups, a page reloading itself forever
(`<meta http-equiv="refresh" content="0;url=...">`) kept a reset waiting in Playwright's event
loop for good. So a watchdog given the `BrowserSession` escalates: `KILL_AFTER_S` after the
close, if the block still has not returned, it kills the browser process (SIGKILL, which no page
can block); the driver then rejects every pending call, and the env relaunches the browser. A
watchdog armed before the block has a context (a reset: scrub, new context) kills at its limit.

This reaches into two private attributes of Playwright's sync API objects (`_loop`, the asyncio
loop the sync API runs on, and `_impl_obj`, the async object behind the sync one), checked
against Playwright 1.65's `_impl/_sync_base.py` and `_impl/browser_context.py`; a Playwright
without them fails `BrowserWatchdog`'s constructor with a clear error rather than running
without a watchdog.
"""
from __future__ import annotations

import threading
from typing import Any, Optional

WATCHDOG_REASON = "webrl step watchdog: the step overran its time limit"
WATCHDOG_GRACE_S = 5.0
"""Seconds past a step's (or reset's) time limit after which a browser call that has not
returned is ended by closing the episode's context from the watchdog's thread."""

KILL_AFTER_S = 3.0
"""Seconds after the context close (stage 1) after which a call that still has not returned is
ended by killing the browser process (stage 2); the session relaunches it."""


class BrowserWatchdog:
    """`with BrowserWatchdog(context, limit_s, session=...):` ends a block of browser calls that
    outlives `limit_s`: first by closing `context`, then, `KILL_AFTER_S` later, by killing the
    session's browser (`BrowserSession.kill_browser`).

    The block itself is not interrupted: it returns (usually by raising Playwright's
    `TargetClosedError` from the call that was stuck) once the context or browser is gone.
    `context` may be None (a block that opens the context, a browser-wide call): the first stage
    is then the kill. `watch(context)` names the context once the block has opened it.
    Why two stages: closing the context is cheap and keeps the browser for the other slots, but
    it is itself a request to the browser and the driver. Seen (issue 54): after a page had opened
    50 pop-ups, a self-refreshing page kept a reset waiting in Playwright's event loop with the
    context close never completing; only the browser process going away makes the driver reject
    every pending call. The kill is a signal to a process, which nothing in the page can block.
    """

    def __init__(self, context: Any, limit_s: float, session: Any = None):
        if limit_s <= 0:
            raise ValueError(f"BrowserWatchdog limit_s must be > 0, got {limit_s!r}")
        if context is None and session is None:
            raise TypeError("BrowserWatchdog needs a Playwright sync BrowserContext or a BrowserSession")
        self.limit_s = limit_s
        self.session = session
        self.fired = False
        """The block overran `limit_s` (its context was closed, or its browser killed)."""
        self.killed = False
        """The browser was killed (stage 2): the caller relaunches it."""
        self._context: Any = None
        self._loop: Any = None
        self._impl: Any = None
        if context is not None:
            self.watch(context)
        self._timer: Optional[threading.Timer] = None
        self._active = False
        self._lock = threading.Lock()

    def watch(self, context: Any) -> None:
        """Close `context` at stage 1 (the block opened it after the watchdog was armed)."""
        loop = getattr(context, "_loop", None)
        impl = getattr(context, "_impl_obj", None)
        if loop is None or impl is None or not hasattr(impl, "close"):
            raise TypeError(f"BrowserWatchdog needs a Playwright sync BrowserContext, got {type(context).__name__} "
                            "(this Playwright's sync objects lack _loop/_impl_obj)")
        self._context, self._loop, self._impl = context, loop, impl

    def __enter__(self) -> "BrowserWatchdog":
        self._active = True
        self._arm(self.limit_s, self._fire)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        with self._lock:  # a timer already past cancel() finds the block over and does nothing
            self._active = False
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _arm(self, seconds: float, action: Any) -> None:
        self._timer = threading.Timer(seconds, action)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if not self._active:
                return
            if self._impl is None:  # nothing cheaper to close: the browser goes
                self._kill_locked()
                return
            self._arm(KILL_AFTER_S, self._kill)
        try:
            self._loop.call_soon_threadsafe(self._close_on_loop)
        except RuntimeError:  # the loop is closed: Playwright was stopped, nothing is waiting on it
            pass

    def _kill(self) -> None:
        with self._lock:
            if self._active:
                self._kill_locked()

    def _kill_locked(self) -> None:
        self.fired = True
        if self.session is not None:
            self.killed = self.session.kill_browser()

    def _close_on_loop(self) -> None:
        """On the loop's thread, which is the block's own (the sync API runs its loop there): the
        block is still inside a Playwright call when `_active`."""
        if not self._active:
            return
        self.fired = True
        task = self._loop.create_task(self._impl.close(reason=WATCHDOG_REASON))
        task.add_done_callback(_consume_result)


def close_on_loop(sync_object: Any) -> bool:
    """Schedule `close()` of a Playwright sync object (a Browser) on its event loop, from any
    thread; False if it has no loop (not Playwright's, or already dropped) or the loop is closed."""
    loop, impl = getattr(sync_object, "_loop", None), getattr(sync_object, "_impl_obj", None)
    if loop is None or impl is None:
        return False
    try:
        loop.call_soon_threadsafe(lambda: loop.create_task(impl.close()).add_done_callback(_consume_result))
        return True
    except RuntimeError:  # the loop is closed: nothing is waiting on it
        return False


def _consume_result(task: Any) -> None:
    """Read a close task's outcome so asyncio does not log 'exception was never retrieved'."""
    if not task.cancelled():
        task.exception()

"""A step watchdog: closes an episode's browser context from a timer thread when a step overruns.

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


class BrowserWatchdog:
    """`with BrowserWatchdog(context, limit_s):` closes `context` if the block outlives `limit_s`.

    The block itself is not interrupted: it returns (usually by raising Playwright's
    `TargetClosedError` from the call that was stuck) once the context is closed.
    """

    def __init__(self, context: Any, limit_s: float):
        if limit_s <= 0:
            raise ValueError(f"BrowserWatchdog limit_s must be > 0, got {limit_s!r}")
        loop = getattr(context, "_loop", None)
        impl = getattr(context, "_impl_obj", None)
        if loop is None or impl is None or not hasattr(impl, "close"):
            raise TypeError(f"BrowserWatchdog needs a Playwright sync BrowserContext, got {type(context).__name__} "
                            "(this Playwright's sync objects lack _loop/_impl_obj)")
        self.limit_s = limit_s
        self.fired = False
        self._loop, self._impl = loop, impl
        self._timer: Optional[threading.Timer] = None
        self._active = False

    def __enter__(self) -> "BrowserWatchdog":
        self._active = True
        self._timer = threading.Timer(self.limit_s, self._fire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._active = False  # a timer already past cancel() finds the block over and closes nothing
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._close_on_loop)
        except RuntimeError:  # the loop is closed: Playwright was stopped, nothing is waiting on it
            pass

    def _close_on_loop(self) -> None:
        """On the loop's thread, which is the block's own (the sync API runs its loop there): the
        block is still inside a Playwright call when `_active`, so no lock is needed."""
        if not self._active:
            return
        self.fired = True
        task = self._loop.create_task(self._impl.close(reason=WATCHDOG_REASON))
        task.add_done_callback(_consume_result)


def _consume_result(task: Any) -> None:
    """Read a close task's outcome so asyncio does not log 'exception was never retrieved'."""
    if not task.cancelled():
        task.exception()

"""The step watchdog on its own: a browser call stuck on a hung page returns once it fires, a
block that ends in time leaves the context open, and objects that are not Playwright contexts
are refused."""
from __future__ import annotations

import time

import pytest
from playwright.sync_api import Error as PlaywrightError

from webrl.envs.watchdog import WATCHDOG_REASON, BrowserWatchdog

pytestmark = pytest.mark.browser


def test_a_call_stuck_on_a_hung_page_returns_when_the_watchdog_fires(chromium):
    context = chromium.new_context()
    page = context.new_page()
    page.set_content("<p>hi</p>")
    page.evaluate("setTimeout(() => { while (true) {} }, 100)")
    time.sleep(0.5)  # the page's main thread is now stuck
    started = time.monotonic()
    with pytest.raises(PlaywrightError) as raised:
        with BrowserWatchdog(context, limit_s=2.0) as watchdog:
            page.evaluate("1 + 1")  # no timeout of its own: it waits for the stuck main thread
    elapsed = time.monotonic() - started
    assert watchdog.fired and page.is_closed()
    assert 1.5 < elapsed < 15.0, elapsed
    assert WATCHDOG_REASON in str(raised.value) or "closed" in str(raised.value).lower()
    context.close()  # closing again is harmless


def test_a_block_that_ends_in_time_leaves_the_context_open(chromium):
    context = chromium.new_context()
    page = context.new_page()
    with BrowserWatchdog(context, limit_s=0.5) as watchdog:
        assert page.evaluate("1 + 1") == 2
    time.sleep(1.0)  # past the limit: the timer was cancelled on exit
    assert not watchdog.fired and not page.is_closed()
    assert page.evaluate("2 + 2") == 4
    context.close()


def test_refuses_what_is_not_a_playwright_context_and_a_non_positive_limit(chromium):
    with pytest.raises(TypeError, match="needs a Playwright sync BrowserContext"):
        BrowserWatchdog(object(), limit_s=1.0)
    context = chromium.new_context()
    with pytest.raises(ValueError, match="limit_s must be > 0"):
        BrowserWatchdog(context, limit_s=0)
    context.close()

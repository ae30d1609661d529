"""Chromium features webrl turns off on top of Playwright's own `--disable-features` list.

Chromium keeps only the last `--disable-features` switch of its command line, and Playwright
passes its own list (PaintHolding, HttpsUpgrades, ThirdPartyStoragePartitioning... in
`chromiumSwitches`), so a bare `--disable-features=X` added to the launch arguments would turn
Playwright's features back on. `disable_features_flag()` therefore reads Playwright's list from
the installed driver bundle and returns one switch with both lists; when the list cannot be read
(another driver layout), it returns None and nothing is added.

`DISABLED_FEATURES`:
- RenderDocument: Chromium 156 (Debian) makes a new RenderFrameHost for every cross-document
  navigation, same-site included. Off, a MiniWoB++ entry navigation took 37.5-40.1 ms against
  41.5-55.7 ms, and the scrub's about:blank 18.1-21.9 ms against 24.0-30.5 ms (three alternating
  rounds of 25 navigations each, quiet 2-core machine, 2026-12-08): about 15 ms per reused-context
  reset, which navigates twice. Nothing a page can observe changes: it is how Chromium navigated
  before RenderDocument.
"""
from __future__ import annotations

import functools
import os
import re
from typing import Optional

DISABLED_FEATURES = ("RenderDocument",)
_BUNDLES = (("package", "lib", "coreBundle.js"),  # Playwright >= 1.5x: one bundled server
            ("package", "lib", "server", "chromium", "chromiumSwitches.js"))
_LIST = re.compile(r"disabledFeatures\s*=\s*\[(.*?)\]", re.S)
_NAME = re.compile(r"""["']([A-Za-z][A-Za-z0-9_]*)["']""")


@functools.lru_cache(maxsize=1)
def playwright_disabled_features() -> Optional[tuple[str, ...]]:
    """The features Playwright's Chromium launch disables, read from its driver; None if unreadable."""
    try:
        import playwright
    except ImportError:
        return None
    driver = os.path.join(os.path.dirname(playwright.__file__), "driver")
    for parts in _BUNDLES:
        try:
            with open(os.path.join(driver, *parts), encoding="utf-8") as f:
                text = f.read()
        except OSError:
            continue
        match = _LIST.search(text)
        names = tuple(_NAME.findall(match.group(1))) if match else ()
        if names:
            return names
    return None


def disable_features_flag(extra: tuple[str, ...] = DISABLED_FEATURES) -> Optional[str]:
    """`--disable-features=` Playwright's list + `extra`, or None when Playwright's is unreadable."""
    own = playwright_disabled_features()
    if own is None:
        return None
    return "--disable-features=" + ",".join(dict.fromkeys((*own, *extra)))

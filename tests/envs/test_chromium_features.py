"""webrl's `--disable-features` switch keeps Playwright's own list (Chromium keeps only the last
such switch on its command line) and adds webrl's (`webrl.envs.chromium_features`)."""
from __future__ import annotations

import pytest

from webrl.envs import chromium_features
from webrl.envs.chromium_features import DISABLED_FEATURES, disable_features_flag


def _features(cmdline: list[str]) -> list[set[str]]:
    """The feature sets of each --disable-features switch, in command-line order."""
    prefix = "--disable-features="
    return [set(a[len(prefix):].split(",")) for a in cmdline if a.startswith(prefix)]


def test_the_flag_is_playwrights_list_plus_webrls():
    own = chromium_features.playwright_disabled_features()
    assert own and "PaintHolding" in own  # one Playwright has disabled since 2021 (its issue #8162)
    flag = disable_features_flag()
    assert flag is not None and _features([flag]) == [set(own) | set(DISABLED_FEATURES)]


def test_an_unreadable_driver_adds_no_flag(monkeypatch):
    chromium_features.playwright_disabled_features.cache_clear()
    monkeypatch.setattr(chromium_features, "_BUNDLES", (("no", "such", "bundle.js"),))
    try:
        assert disable_features_flag() is None  # a bare list would turn Playwright's features back on
    finally:
        chromium_features.playwright_disabled_features.cache_clear()


@pytest.mark.browser
def test_the_launched_chromium_keeps_every_feature_off(browser_session):
    """The browser's own command line: its last --disable-features holds Playwright's and webrl's."""
    pid = browser_session.browser_pid()
    assert pid is not None
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmdline = f.read().decode().split("\0")
    switches = _features(cmdline)
    assert len(switches) >= 2  # Playwright's, then webrl's
    assert set.union(*switches[:-1]) <= switches[-1] and set(DISABLED_FEATURES) <= switches[-1]

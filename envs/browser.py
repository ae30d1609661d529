"""Browser session lifecycle: one Chromium per worker, one BrowserContext per episode.

`BrowserSession` owns a sync-Playwright Chromium. Every episode opens a fresh `BrowserContext`
(isolated cookies, storage, cache), so episodes cannot leak state into each other, and several
env slots can share one browser (`EnvWorker`). If Chromium dies, `relaunch()` starts a new one
and bumps `generation`, which tells every slot that its context belongs to a dead browser.

Every context gets the readiness probe (`webrl.envs.readiness`) as an init script; waiting on
it after an action lives there too. It also gets the listener registry (envs/listeners.js) that
element discovery reads.

Departure from common practice: Playwright's default `--disable-popup-blocking` flag is dropped,
so Chromium's own popup blocker stops `window.open` floods without a user gesture.
"""
from __future__ import annotations

import os
import shutil
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

from playwright.sync_api import Browser, BrowserContext, Playwright, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from webrl.envs.observation import listeners_init_script
from webrl.envs.readiness import READINESS_INIT_SCRIPT

CHROMIUM_FLAGS = (
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
    "--num-raster-threads=1", "--disable-partial-raster",
)
VIEWPORT_PRESETS = {"openwebrl": (1280, 1000), "cpu": (800, 600), "small": (640, 480)}
DEBIAN_CHROMIUM = "/usr/bin/chromium"

class InfraError(RuntimeError):
    """The browser, a page or the harness failed (not the agent): the episode must end truncated."""


@dataclass
class BrowserConfig:
    """How Chromium is found, launched and waited on."""

    executable_path: str = ""
    """Chromium binary; "" = $WEBRL_CHROMIUM, else Playwright's own browser if installed,
    else /usr/bin/chromium."""
    headless: bool = True
    """Run without a window (the only mode tested)."""
    viewport: str = "openwebrl"
    """Viewport preset: "openwebrl" (1280x1000, the OpenWebRL recipe), "cpu" (800x600),
    "small" (640x480), or "WxH" such as "1024x768"."""
    extra_args: tuple[str, ...] = ()
    """Chromium flags added after CHROMIUM_FLAGS."""
    launch_timeout_s: float = 30.0
    """Give up launching Chromium after this long."""
    load_timeout_s: float = 10.0
    """Cap for one navigation (goto / back / forward) to reach DOMContentLoaded."""
    ready_timeout_s: float = 3.0
    """Cap for the whole readiness wait after an action; past it the page is observed as is."""
    network_quiet_cap_s: float = 0.5
    """Stop waiting for in-flight fetch/XHR after this long (long-polling pages never go quiet)."""
    dom_quiet_ms: float = 30.0
    """The DOM must stay unchanged this long before the page counts as ready."""
    responsive_probe_s: float = 2.0
    """A page that does not run a trivial script within this long after a timed-out action or
    readiness wait counts as stuck (its tab is closed, the episode truncated)."""
    popup_wait_s: float = 1.0
    """After a click on a target=_blank link or a window.open call, wait this long for the tab."""
    navigation_grace_s: float = 1.0
    """After a page starts navigating away, wait at most this long for the next document."""

    def __post_init__(self) -> None:
        viewport_size(self.viewport)  # raises with the allowed values
        for name in ("launch_timeout_s", "load_timeout_s", "ready_timeout_s", "network_quiet_cap_s",
                     "navigation_grace_s", "popup_wait_s", "responsive_probe_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"BrowserConfig.{name} must be > 0, got {getattr(self, name)!r}")
        if self.dom_quiet_ms < 0:
            raise ValueError(f"BrowserConfig.dom_quiet_ms must be >= 0, got {self.dom_quiet_ms!r}")
        self.extra_args = tuple(self.extra_args)


def viewport_size(viewport: str) -> tuple[int, int]:
    """(width, height) of a preset name or a "WxH" string."""
    if viewport in VIEWPORT_PRESETS:
        return VIEWPORT_PRESETS[viewport]
    parts = viewport.lower().split("x")
    if len(parts) == 2 and all(p.isdigit() and 100 <= int(p) <= 8192 for p in parts):
        return int(parts[0]), int(parts[1])
    raise ValueError(f"BrowserConfig.viewport must be one of {sorted(VIEWPORT_PRESETS)} or 'WxH' "
                     f"with sides in 100..8192, got {viewport!r}")


def resolve_executable(configured: str, playwright: Optional[Playwright] = None) -> Optional[str]:
    """Path to launch, or None for Playwright's own downloaded Chromium.

    Order: the config value, $WEBRL_CHROMIUM, Playwright's browser when it exists on disk,
    /usr/bin/chromium (Debian's), then `chromium` on PATH.
    """
    for candidate in (configured, os.environ.get("WEBRL_CHROMIUM", "")):
        if candidate:
            if not os.path.exists(candidate):
                raise FileNotFoundError(f"Chromium executable {candidate!r} does not exist")
            return candidate
    if playwright is not None:
        try:
            if os.path.exists(playwright.chromium.executable_path):
                return None
        except PlaywrightError:
            pass
    if os.path.exists(DEBIAN_CHROMIUM):
        return DEBIAN_CHROMIUM
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    raise FileNotFoundError("no Chromium found: set BrowserConfig.executable_path or $WEBRL_CHROMIUM")


@dataclass
class EpisodeEvents:
    """What happened in the browser since it was last drained (filled by event handlers)."""

    notes: list[str] = field(default_factory=list)
    """Feedback lines: dialogs handled, downloads refused, requests blocked, tabs opened."""
    new_pages: list[Any] = field(default_factory=list)
    """Pages (tabs) opened since the last drain, in order."""
    crashed: bool = False
    """A renderer of this episode crashed."""
    flooded_pages: list[Any] = field(default_factory=list)
    """Tabs left blocked by a dialog flood (the env closes them)."""
    dialogs_this_step: int = 0
    """Dialogs seen during the current step (flood guard)."""

    def drain(self) -> tuple[list[str], list[Any]]:
        notes, pages = self.notes, self.new_pages
        self.notes, self.new_pages = [], []
        return notes, pages


# Sync Playwright allows one driver per thread; every BrowserSession of a thread shares it.
_THREAD_DRIVER = threading.local()


def _acquire_playwright() -> Playwright:
    state = getattr(_THREAD_DRIVER, "state", None)
    if state is None:
        manager = sync_playwright()
        state = {"manager": manager, "playwright": manager.start(), "users": 0}
        _THREAD_DRIVER.state = state
    state["users"] += 1
    return state["playwright"]


def _release_playwright() -> None:
    state = getattr(_THREAD_DRIVER, "state", None)
    if state is None:
        return
    state["users"] -= 1
    if state["users"] <= 0:
        _THREAD_DRIVER.state = None
        try:
            state["manager"].__exit__(None, None, None)
        except Exception:  # the driver may already be gone
            pass


class BrowserSession:
    """One Chromium for one worker process; `new_context()` per episode.

    Not thread-safe (sync Playwright): use it from one thread, as Ray sync actors do
    (max_concurrency=1). Sessions of one thread share one Playwright driver (sync Playwright
    allows one per thread), each with its own Chromium.
    """

    def __init__(self, config: Optional[BrowserConfig] = None):
        self.config = config or BrowserConfig()
        self.viewport = viewport_size(self.config.viewport)
        self.generation = 0
        self._playwright: Optional[Playwright] = None
        self._browser: Optional[Browser] = None
        self._marker = ""

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        if self._playwright is None:
            self._playwright = _acquire_playwright()
        if self._browser is None:
            executable = resolve_executable(self.config.executable_path, self._playwright)
            # a switch Chromium ignores, so that browser_pid() finds this session's process among
            # the others of this process (sessions of a thread share one Playwright driver)
            self._marker = f"--webrl-session={uuid.uuid4().hex}"
            self._browser = self._playwright.chromium.launch(
                executable_path=executable, headless=self.config.headless,
                args=[*CHROMIUM_FLAGS, *self.config.extra_args, self._marker],
                ignore_default_args=["--disable-popup-blocking"],
                timeout=self.config.launch_timeout_s * 1000)
            self.generation += 1

    @property
    def browser(self) -> Browser:
        if self._browser is None:
            self.start()
        assert self._browser is not None
        return self._browser

    def is_alive(self) -> bool:
        return self._browser is not None and self._browser.is_connected()

    def relaunch(self) -> None:
        """Throw away the current Chromium (dead or not) and start a new one."""
        if self._browser is not None:
            try:
                self._browser.close()
            except Exception:  # already dead: nothing to close
                pass
            self._browser = None
        self.start()

    def ensure_alive(self) -> None:
        if not self.is_alive():
            self.relaunch()

    def close(self) -> None:
        if self._browser is not None:
            try:
                self._browser.close()
            except Exception:
                pass
            self._browser = None
        if self._playwright is not None:
            self._playwright = None
            _release_playwright()

    def browser_pid(self) -> Optional[int]:
        """PID of the Chromium browser process this session launched (None if not running)."""
        if not self.is_alive():
            return None
        return next(iter(_browser_pids(os.getpid(), self._marker)), None)

    # -- episodes ----------------------------------------------------------------------------
    def new_context(self, viewport: Optional[tuple[int, int]] = None, record_har_path: str = "") -> BrowserContext:
        """A fresh isolated context with the readiness probe and listener registry installed;
        downloads refused.

        `viewport` (width, height) defaults to this session's config; envs sharing a session
        pass their own. `record_har_path`: write the context's traffic there as a HAR (bodies
        embedded) when it closes; "" records nothing (`webrl.envs.recording`).
        """
        self.ensure_alive()
        width, height = viewport or self.viewport
        har = {"record_har_path": record_har_path, "record_har_content": "embed",
               "record_har_mode": "minimal"} if record_har_path else {}
        context = self.browser.new_context(
            viewport={"width": width, "height": height}, device_scale_factor=1,
            accept_downloads=False, service_workers="block", locale="en-US",
            timezone_id="UTC", **har)
        context.add_init_script(READINESS_INIT_SCRIPT)
        context.add_init_script(listeners_init_script())
        return context


def _browser_pids(root_pid: int, marker: str = "") -> set[int]:
    """Chromium main processes among `root_pid`'s descendants (renderers carry --type=) whose
    command line holds `marker`."""
    children: dict[int, list[int]] = {}
    cmdlines: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdlines[int(entry)] = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, stack = set(), list(children.get(root_pid, []))
    while stack:
        pid = stack.pop()
        cmd = cmdlines.get(pid, "")
        if "chrom" in cmd and "--type=" not in cmd and "--remote-debugging-pipe" in cmd and marker in cmd:
            found.add(pid)
        stack.extend(children.get(pid, []))
    return found

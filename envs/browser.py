"""Browser session lifecycle: one Chromium per worker (launched, or joined at `connect_url`:
a Playwright browser server or a DevTools endpoint elsewhere), isolated contexts for episodes.

`BrowserSession` owns a sync-Playwright Chromium. Each env slot gets its own `BrowserContext`
(isolated cookies, storage, cache), kept across episodes and scrubbed in between
(`WebEnv(reuse_context=True)`, `webrl.envs.context_pool`) or opened fresh per episode, so episodes cannot
leak state into each other, and several env slots can share one browser (`EnvWorker`). If
Chromium dies (or a remote one becomes unreachable), `relaunch()` starts (or rejoins) one and
bumps `generation`, which tells every slot that its context belongs to a dead browser.

Every context gets the readiness probe (`webrl.envs.readiness`) as an init script; waiting on
it after an action lives there too. It also gets the listener registry (envs/listeners.js) that
element discovery reads.

Departure from common practice: Playwright's default `--disable-popup-blocking` flag is dropped,
so Chromium's own popup blocker stops `window.open` floods without a user gesture.
"""
from __future__ import annotations

import os
import shutil
import signal
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional
from urllib.parse import urlsplit

from playwright.sync_api import Browser, BrowserContext, Playwright, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from webrl.config import ConfigError
from webrl.envs.chromium_features import disable_features_flag
from webrl.envs.observation import listeners_init_script
from webrl.envs.readiness import READINESS_INIT_SCRIPT

CHROMIUM_FLAGS = (
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
    "--num-raster-threads=1", "--disable-partial-raster",
)
VIEWPORT_PRESETS = {"openwebrl": (1280, 1000), "cpu": (800, 600), "small": (640, 480)}
DEBIAN_CHROMIUM = "/usr/bin/chromium"


def launch_flags() -> tuple[str, ...]:
    """CHROMIUM_FLAGS and the one `--disable-features` switch (Playwright's list plus webrl's,
    `webrl.envs.chromium_features`) every Chromium webrl launches gets."""
    flag = disable_features_flag()
    return (*CHROMIUM_FLAGS, flag) if flag else CHROMIUM_FLAGS


LAUNCH_TIMEOUT_S = 30.0
"""Give up launching Chromium after this long (a healthy launch takes about a second)."""
CONNECT_TIMEOUT_S = 30.0
"""Give up joining `BrowserConfig.connect_url` after this long (an InfraError naming the URL);
`BrowserSession(connect_timeout_s=...)` overrides it (tests of unreachable endpoints)."""


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
    """Chromium flags added after CHROMIUM_FLAGS (a `--disable-features` here replaces webrl's and
    Playwright's lists: Chromium keeps the last one; `webrl.envs.chromium_features`)."""
    load_timeout_s: float = 10.0
    """Cap for one navigation (goto / back / forward) to reach DOMContentLoaded; a slow site
    needs more (the step's own `step_timeout_s` still bounds it)."""
    connect_url: str = ""
    """A browser running elsewhere to drive instead of launching one: "" = launch Chromium here;
    "ws://host:port/path" = a Playwright browser server (`playwright launch-server`, or
    `webrl.envs.remote_browser`), joined with `chromium.connect`; "http://host:port" or
    "ws://host:port/devtools/browser/<id>" = a Chromium DevTools endpoint
    (`--remote-debugging-port`), joined with `connect_over_cdp`. The remote browser's own
    flags are its owner's business, so `executable_path`, `extra_args` and `headless=False`
    are refused with it (see `webrl.envs.remote_browser` for what that means for the network
    policy)."""
    connect_api_key_env: str = "WEBRL_BROWSER_API_KEY"
    """Environment variable holding the remote browser server's key, read at each connect and
    sent as `Authorization: Bearer <key>` when set (`webrl browser-server` beyond loopback)."""

    def __post_init__(self) -> None:
        viewport_size(self.viewport)  # raises with the allowed values
        if not self.load_timeout_s > 0:
            raise ValueError(f"BrowserConfig.load_timeout_s must be > 0, got {self.load_timeout_s!r}")
        self.extra_args = tuple(self.extra_args)
        remote_connect_kind(self.connect_url)  # raises with the allowed forms
        check_remote_settings(self)

    @property
    def remote(self) -> bool:
        """True when this config drives a browser running elsewhere (`connect_url` set)."""
        return bool(self.connect_url)


def remote_connect_kind(url: str) -> str:
    """"" (launch here), "playwright" (`chromium.connect`) or "cdp" (`connect_over_cdp`) for a
    `BrowserConfig.connect_url`; raises ConfigError for anything else."""
    if url == "":
        return ""
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("ws", "wss", "http", "https") or not parts.hostname:
        raise ConfigError(f"BrowserConfig.connect_url must be '' (launch Chromium here), "
                          "'ws://host:port/path' (a Playwright browser server) or 'http://host:port' / "
                          f"'ws://host:port/devtools/browser/<id>' (a Chromium DevTools endpoint), got {url!r}")
    if parts.scheme in ("http", "https") or parts.path.startswith("/devtools/browser/"):
        return "cdp"
    return "playwright"


def check_remote_settings(config: "BrowserConfig") -> None:
    """Refuse launch settings that cannot apply to a browser launched by someone else. Run at
    construction and again at `BrowserSession.start`, because `WebEnvConfig` appends
    `--host-resolver-rules` (from `safety.network.resolver_overrides`) after construction."""
    if not config.connect_url:
        return
    refused = {"executable_path": config.executable_path != "", "extra_args": bool(config.extra_args),
               "headless": config.headless is not True}
    for name, bad in refused.items():
        if not bad:
            continue
        hint = (" (safety.network.resolver_overrides adds --host-resolver-rules there: the remote browser "
                "cannot take it, so leave resolver_overrides empty with a remote browser)"
                if name == "extra_args" and any(a.startswith("--host-resolver-rules=") for a in config.extra_args)
                else "")
        raise ConfigError(f"BrowserConfig.{name}={getattr(config, name)!r} cannot apply to the remote browser at "
                          f"connect_url={config.connect_url!r}{hint}: set it where that browser is launched, "
                          f"or leave connect_url '' to launch Chromium here")


def viewport_size(viewport: str) -> tuple[int, int]:
    """(width, height) of a preset name or a "WxH" string."""
    if not isinstance(viewport, str):  # e.g. [1280, 720] from YAML: named, not a TypeError
        raise ValueError(f"BrowserConfig.viewport must be a preset name ({sorted(VIEWPORT_PRESETS)}) or a 'WxH' "
                         f"string, got {viewport!r} ({type(viewport).__name__}); write e.g. '1280x720'")
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
    """One Chromium for one browser group of a worker; `new_context()` per slot (reused across
    episodes) or per episode.

    Not thread-safe (sync Playwright): use it from one thread, as Ray sync actors do
    (max_concurrency=1). Sessions of one thread share one Playwright driver (sync Playwright
    allows one per thread), each with its own Chromium.
    """

    def __init__(self, config: Optional[BrowserConfig] = None, *, connect_timeout_s: Optional[float] = None):
        self.config = config or BrowserConfig()
        self.connect_timeout_s = connect_timeout_s
        """Seconds to join `config.connect_url`; None = CONNECT_TIMEOUT_S (read at each connect)."""
        self.viewport = viewport_size(self.config.viewport)
        self.generation = 0
        self._playwright: Optional[Playwright] = None
        self._browser: Optional[Browser] = None
        self._marker = ""
        self._pid: Optional[int] = None  # the launched Chromium's, read once per launch (kill_browser)
        self.last_connect_error = ""
        """Why the last reconnect to a remote browser in `relaunch()` failed ("" if it did not)."""

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Launch Chromium here, or join the remote browser at `config.connect_url` (an
        InfraError naming the URL when nothing answers there within `connect_timeout_s`)."""
        check_remote_settings(self.config)  # before the driver starts: a config error costs nothing
        if self._playwright is None:
            self._playwright = _acquire_playwright()
        if self._browser is not None:
            return
        if self.config.remote:
            self._browser = self._connect()
            self.last_connect_error = ""
        else:
            executable = resolve_executable(self.config.executable_path, self._playwright)
            # a switch Chromium ignores, so that browser_pid() finds this session's process among
            # the others of this process (sessions of a thread share one Playwright driver)
            self._marker = f"--webrl-session={uuid.uuid4().hex}"
            self._browser = self._playwright.chromium.launch(
                executable_path=executable, headless=self.config.headless,
                args=[*launch_flags(), *self.config.extra_args, self._marker],
                ignore_default_args=["--disable-popup-blocking"],
                timeout=LAUNCH_TIMEOUT_S * 1000)
            self._pid = next(iter(_browser_pids(os.getpid(), self._marker)), None)
        self.generation += 1

    def _connect(self) -> Browser:
        url = self.config.connect_url
        timeout_s = CONNECT_TIMEOUT_S if self.connect_timeout_s is None else self.connect_timeout_s
        assert self._playwright is not None
        chromium = self._playwright.chromium
        key = os.environ.get(self.config.connect_api_key_env, "") if self.config.connect_api_key_env else ""
        headers = {"Authorization": f"Bearer {key}"} if key else None
        try:
            if remote_connect_kind(url) == "cdp":
                return chromium.connect_over_cdp(url, timeout=timeout_s * 1000, headers=headers)
            return chromium.connect(url, timeout=timeout_s * 1000, headers=headers)
        except PlaywrightError as error:
            first_line = (str(error).strip().splitlines() or [""])[0][:300]
            raise InfraError(f"could not reach the remote browser at BrowserConfig.connect_url={url!r} "
                             f"within connect_timeout_s={timeout_s:g}: {first_line}") from error

    @property
    def browser(self) -> Browser:
        if self._browser is None:
            self.start()
        assert self._browser is not None
        return self._browser

    def is_alive(self) -> bool:
        """The browser is running (local) or the connection to it is open (remote)."""
        return self._browser is not None and self._browser.is_connected() and not _connection_closed(self._browser)

    def relaunch(self) -> None:
        """Throw away the current Chromium (dead or not) and start a new one; for a remote
        browser, drop the connection and join `connect_url` again.

        A remote browser that cannot be reached yet is not raised here: callers relaunch while
        ending an episode whose browser went away, and that episode ends with infra_error either
        way. The session stays disconnected (`is_alive()` is False) and the next `start()` /
        `ensure_alive()` tries again and raises InfraError naming the URL.
        """
        self._drop_browser()
        if not self.config.remote:
            self.start()
            return
        try:
            self.start()
        except InfraError as error:
            self.last_connect_error = str(error)

    def ensure_alive(self) -> None:
        if not self.is_alive():
            self._drop_browser()
            self.start()

    def close(self) -> None:
        """Close the local Chromium, or only this session's connection to a remote one (its
        contexts are closed; the remote browser keeps running for its other clients)."""
        self._drop_browser()
        if self._playwright is not None:
            self._playwright = None
            _release_playwright()

    def _drop_browser(self) -> None:
        if self._browser is not None:
            from webrl.envs.watchdog import WATCHDOG_GRACE_S, BrowserWatchdog  # watchdog imports nothing of ours
            try:  # a browser that does not close in time is killed: close() then returns
                with BrowserWatchdog(None, WATCHDOG_GRACE_S, session=self):
                    self._browser.close()
            except Exception:  # already dead or unreachable: nothing to close
                pass
            self._browser, self._pid = None, None

    def kill_browser(self) -> bool:
        """End the browser from any thread so that every Playwright call waiting on it returns
        (TargetClosedError); True if something was ended. Local: SIGKILL to Chromium. Remote: this
        session's connection is closed on Playwright's loop (the browser serves its other clients)."""
        if not self.config.remote:
            try:
                os.kill(self._pid, signal.SIGKILL)  # type: ignore[arg-type]
                return True
            except (OSError, TypeError):  # already gone, or never launched
                return False
        from webrl.envs.watchdog import close_on_loop
        return close_on_loop(self._browser)

    def browser_pid(self) -> Optional[int]:
        """PID of the Chromium browser process this session launched (None if not running, and
        always None for a remote browser: it is no process of this machine's to watch)."""
        if self.config.remote or not self.is_alive():
            return None
        return next(iter(_browser_pids(os.getpid(), self._marker)), None)

    # -- episodes ----------------------------------------------------------------------------
    @property
    def own_proxy(self) -> bool:
        """Whether this Chromium was launched with its own proxy flags (`extra_args`): the
        allowlist then stays with the route guard (`webrl.envs.safety.guard_proxy`)."""
        return launched_with_proxy(self.config)

    def new_context(self, viewport: Optional[tuple[int, int]] = None, record_har_path: str = "",
                    proxy: Optional[dict] = None) -> BrowserContext:
        """A fresh isolated context with the readiness probe and listener registry installed;
        downloads refused.

        `viewport` (width, height) defaults to this session's config; envs sharing a session
        pass their own. `record_har_path`: write the context's traffic there as a HAR (bodies
        embedded) when it closes; "" records nothing (`webrl.envs.recording`). `proxy`: the
        context's proxy (`webrl.envs.safety.guard_proxy`), None for none.
        """
        self.ensure_alive()
        width, height = viewport or self.viewport
        har = {"record_har_path": record_har_path, "record_har_content": "embed",
               "record_har_mode": "minimal"} if record_har_path else {}
        context = self.browser.new_context(
            viewport={"width": width, "height": height}, device_scale_factor=1,
            accept_downloads=False, service_workers="block", locale="en-US",
            timezone_id="UTC", **har, **({"proxy": proxy} if proxy else {}))
        context.add_init_script(READINESS_INIT_SCRIPT)
        context.add_init_script(listeners_init_script())
        return context


def launched_with_proxy(config: BrowserConfig) -> bool:
    """Whether `config` launches Chromium with proxy flags of its own (`extra_args`)."""
    return any(a.startswith(("--proxy-server", "--proxy-pac-url")) for a in config.extra_args)


def _connection_closed(browser: Browser) -> bool:
    """Whether a `chromium.connect()` browser's WebSocket has closed.

    Playwright (1.65, `_impl/connect.py`) marks such a browser disconnected one event-loop turn
    after its connection closes, and the sync API turns its loop only inside calls that await:
    right after a step failed because the server died, `is_connected()` can still say True, and
    stays so while later calls fail fast on closed pages. The connection's own closed flag
    (`Connection._closed_error`, private) is set at once. Missing attributes read as "open", so a
    Playwright without them falls back to `is_connected()`.
    """
    connection = getattr(getattr(browser, "_impl_obj", None), "_connection", None)
    return getattr(connection, "_closed_error", None) is not None


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

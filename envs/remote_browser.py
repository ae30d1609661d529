"""Remote browsers: start a Playwright browser server or a DevTools Chromium for
`BrowserConfig.connect_url`, and what the env's guarantees become with a browser elsewhere.

How a worker joins a remote browser (`webrl.envs.browser.BrowserSession`):
- "ws://host:port/path": a Playwright browser server (`BrowserType.launchServer`, the driver's
  `launch-server` command, which `start_browser_server` runs), joined with `chromium.connect`.
  The client must be the same Playwright version as the server (the server refuses others).
- "http://host:port" or "ws://host:port/devtools/browser/<id>": a Chromium started with
  `--remote-debugging-port` (`start_devtools_browser`), joined with `connect_over_cdp`.
Each episode still opens its own BrowserContext on that browser; `BrowserSession.close()` drops
only the connection (the remote browser keeps running for its other clients). A browser that
dies or whose connection drops is met exactly as a crashed local one: the step in flight ends
with `infra_error` ("browser_crashed: ..."), the session reconnects (`relaunch`), and the next
reset works once the server answers again (until then it ends truncated with a reset_failed
infra_error naming the URL). `browser_pid()` is None: there is no local process to watch; the
step watchdog (`webrl.envs.watchdog`) closes contexts over the connection and needs no pid.

The network policy with a remote browser. The guards (`webrl.envs.safety`,
`webrl.envs.network`) are `context.route` handlers: Playwright sends every intercepted request
to this process, so the allowlist and the internal-address check still run here, on this
machine's name resolution, before anything is fetched. What changes:
- The fetch itself (`route.fetch` of the "public" policy) is made by the Playwright server's
  process (ws) or by this machine's driver (DevTools), and the browser's own connections
  (redirect hops it repeats after a checked first response) come from the remote host. A name
  that resolves to a public address here but to an internal one there (split-horizon DNS, the
  browser pod's own cluster names) is not caught: give the browser hosts the same resolver as
  the workers, and fence their egress off internal ranges as the last line.
- `safety.network.resolver_overrides` is refused with a remote browser: it needs
  `--host-resolver-rules` on Chromium's command line, which only the browser's owner sets.
  Likewise `executable_path`, `extra_args` and `headless=False` (a ConfigError names the key).
- `start_browser_server` launches Chromium with the same flags as a local session
  (`launch_flags()`, the popup blocker kept on), so pages render and elements are found alike;
  a browser fleet started some other way should do the same.

No open door: Playwright's server has no authentication of its own (and tells its WebSocket path to
anyone who asks `GET /json`), and the guards above run in the worker that connects, so another
client that reaches the server drives a Chromium inside the cluster's network unguarded. With a
key (`api_key` here, the variable `BrowserServerConfig.api_key_env` names for the CLI), Playwright
listens on 127.0.0.1 only and `webrl.envs.browser_gate.KeyGate` on the address asked for, admitting
only clients that send `Authorization: Bearer <key>` (workers read it from the variable
`env.connect_api_key_env` names). Binding anything but loopback without a key is refused.

Departure from the issue's wording: "replaced" means reconnected; starting the remote browser
again is the fleet's job (a restarted pod on the same address), not the worker's.
"""
from __future__ import annotations

import json
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import IO, Optional
from urllib.parse import urlsplit

from webrl.config import LOOPBACK_HOSTS, ConfigError
from webrl.envs.browser import DEBIAN_CHROMIUM, launch_flags
from webrl.envs.browser_gate import KeyGate

"""Addresses a browser server may bind without a key (the rule of `webrl serve`'s weight routes)."""
MIN_KEY_CHARS = 16
"""Shortest key accepted; `python -c 'import secrets; print(secrets.token_urlsafe(32))'` makes one."""

# Playwright's own launch switches that change layout or input emulation; a DevTools Chromium
# started without them would lay pages out differently from a Playwright-launched one.
DEVTOOLS_LAYOUT_FLAGS = (
    "--headless", "--hide-scrollbars", "--mute-audio", "--force-color-profile=srgb",
    "--blink-settings=primaryHoverType=2,availableHoverTypes=2,primaryPointerType=4,availablePointerTypes=4",
)


class RemoteBrowserProcess:
    """A browser server or DevTools Chromium started by this process (its own process group).

    `endpoint` is the URL to put in `BrowserConfig.connect_url`; `port` its TCP port.
    """

    def __init__(self, process: subprocess.Popen, endpoint: str, port: int, log_path: str,
                 cleanup_dir: str = "", gate: Optional[KeyGate] = None):
        self.process, self.endpoint, self.port, self.log_path = process, endpoint, port, log_path
        self._cleanup_dir = cleanup_dir
        self.gate = gate
        """The key check clients reach the server through (None: Playwright listens itself)."""

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole group (server and its Chromium), as a crashed browser pod."""
        if self.gate is not None:
            self.gate.close()
        self._signal(signal.SIGKILL)
        self.process.wait()

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the group, SIGKILL it after `timeout_s`; remove temporary files."""
        if self.gate is not None:
            self.gate.close()
        if self.running():
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        self._signal(signal.SIGKILL)  # children that outlived their parent
        if self._cleanup_dir:
            shutil.rmtree(self._cleanup_dir, ignore_errors=True)

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self) -> "RemoteBrowserProcess":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def server_executable(configured: str = "") -> str:
    """Chromium for a server: `configured`, $WEBRL_CHROMIUM, Debian's, else "" (Playwright's own)."""
    for candidate in (configured, os.environ.get("WEBRL_CHROMIUM", "")):
        if candidate:
            if not os.path.exists(candidate):
                raise FileNotFoundError(f"Chromium executable {candidate!r} does not exist")
            return candidate
    return DEBIAN_CHROMIUM if os.path.exists(DEBIAN_CHROMIUM) else ""


def start_browser_server(host: str = "127.0.0.1", port: int = 0, ws_path: str = "/webrl",
                         executable_path: str = "", startup_timeout_s: float = 60.0,
                         api_key: str = "") -> RemoteBrowserProcess:
    """Run Playwright's `launch-server` (one Chromium, shared by every client) on `host:port`
    (0 = a free port) and return once it listens; endpoint = "ws://host:port<ws_path>".

    With `api_key`, Playwright listens on 127.0.0.1 at a random port and path and a `KeyGate` on
    `host:port` admits only clients sending `Authorization: Bearer <api_key>` (module docstring).
    A `host` outside LOOPBACK_HOSTS without a key raises ValueError before anything starts."""
    check_server_key(host, api_key, "start_browser_server(api_key=...)")
    if not api_key:
        return _launch_server(host, port, ws_path, executable_path, startup_timeout_s)
    upstream = _launch_server("127.0.0.1", 0, f"/{secrets.token_urlsafe(24)}", executable_path, startup_timeout_s)
    try:
        gate = KeyGate(host, port, ws_path, api_key, upstream.port, urlsplit(upstream.endpoint).path).start()
    except BaseException:
        upstream.stop()
        raise
    url_host = f"[{host}]" if ":" in host else host
    upstream.endpoint, upstream.port, upstream.gate = f"ws://{url_host}:{gate.port}{ws_path}", gate.port, gate
    return upstream


def check_server_key(host: str, api_key: str, key_name: str) -> None:
    """Refuse a bind beyond loopback without a key, and a key too short to be one (ValueError
    naming `key_name`, the setting that supplies the key)."""
    if api_key and len(api_key) < MIN_KEY_CHARS:
        raise ValueError(f"{key_name}: the browser server's key has {len(api_key)} characters; use at least "
                         f"{MIN_KEY_CHARS} (python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    if host not in LOOPBACK_HOSTS and not api_key:
        raise ValueError(f"{key_name}: a browser server on host={host!r} (not loopback) needs a key, or any "
                         f"client that reaches it drives a Chromium inside this network with no guard; "
                         f"set one, or bind 127.0.0.1")


def _launch_server(host: str, port: int, ws_path: str, executable_path: str,
                   startup_timeout_s: float) -> RemoteBrowserProcess:
    from playwright._impl._driver import compute_driver_executable  # private, stable since 1.x

    node, cli = compute_driver_executable()
    folder = tempfile.mkdtemp(prefix="webrl-browser-server-")
    options = {"headless": True, "args": list(launch_flags()), "ignoreDefaultArgs": ["--disable-popup-blocking"],
               "host": host, "port": port, "wsPath": ws_path}
    executable = server_executable(executable_path)
    if executable:
        options["executablePath"] = executable
    config_path = os.path.join(folder, "launch.json")
    with open(config_path, "w") as f:
        json.dump(options, f)
    log_path = os.path.join(folder, "server.log")
    with open(log_path, "wb") as log:
        process = subprocess.Popen([node, cli, "launch-server", "--browser", "chromium", "--config", config_path],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                   start_new_session=True)
    endpoint = _first_matching_line(process, process.stdout, "ws://", startup_timeout_s, log_path, folder).strip()
    _drain_to_file(process.stdout, log_path)
    return RemoteBrowserProcess(process, endpoint, _port_of(endpoint), log_path, folder)


def start_devtools_browser(host: str = "127.0.0.1", port: int = 0, executable_path: str = "",
                           startup_timeout_s: float = 60.0) -> RemoteBrowserProcess:
    """Run Chromium with `--remote-debugging-port` on `host:port` (0 = a free port), with the
    flags a local session uses; endpoint = "http://host:port". DevTools takes no key, so a `host`
    outside LOOPBACK_HOSTS is refused (ValueError) before anything starts."""
    if host not in LOOPBACK_HOSTS:
        raise ValueError(f"start_devtools_browser(host={host!r}): a DevTools port has no key, so it binds loopback "
                         f"only; serve other machines with start_browser_server(api_key=...) "
                         f"(webrl browser-server), which admits only clients with the key")
    executable = server_executable(executable_path) or shutil.which("chromium") or ""
    if not executable:
        raise FileNotFoundError("no Chromium found for a DevTools browser: pass executable_path or set $WEBRL_CHROMIUM")
    folder = tempfile.mkdtemp(prefix="webrl-devtools-")
    log_path = os.path.join(folder, "chromium.log")
    args = [executable, *launch_flags(), *DEVTOOLS_LAYOUT_FLAGS, f"--remote-debugging-address={host}",
            f"--remote-debugging-port={port}", f"--user-data-dir={os.path.join(folder, 'profile')}", "about:blank"]
    process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
    line = _first_matching_line(process, process.stderr, "DevTools listening on", startup_timeout_s, log_path, folder)
    ws_url = line.split("DevTools listening on", 1)[1].strip()  # ws://host:port/devtools/browser/<id>
    _drain_to_file(process.stderr, log_path)
    return RemoteBrowserProcess(process, f"http://{host}:{_port_of(ws_url)}", _port_of(ws_url), log_path, folder)


def _port_of(url: str) -> int:
    return int(url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])


def _first_matching_line(process: subprocess.Popen, stream: Optional[IO[bytes]], marker: str,
                         timeout_s: float, log_path: str, folder: str) -> str:
    """The first line of `stream` containing `marker`; kills the process and raises with its
    output if none comes within `timeout_s`."""
    assert stream is not None
    selector = selectors.DefaultSelector()
    selector.register(stream, selectors.EVENT_READ)
    deadline, seen = time.monotonic() + timeout_s, b""
    try:
        while time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                break
            chunk = os.read(stream.fileno(), 65536)
            if not chunk:
                break
            seen += chunk
            for raw in seen.split(b"\n")[:-1]:
                text = raw.decode(errors="replace")
                if marker in text:
                    return text
    finally:
        selector.close()
    _kill_group(process)
    with open(log_path, "ab") as log:
        log.write(seen)
    with open(log_path, "rb") as log:
        tail = log.read()[-2000:].decode(errors="replace")
    shutil.rmtree(folder, ignore_errors=True)
    raise RuntimeError(f"the remote browser did not start listening within {timeout_s:g} s "
                       f"(exit code {process.poll()}); its output ends with:\n{tail}")


def _drain_to_file(stream: Optional[IO[bytes]], path: str) -> None:
    """Keep reading Chromium's stderr into `path` on a daemon thread (a full pipe would block it)."""
    import threading

    def pump() -> None:
        with open(path, "ab") as log:
            for chunk in iter(lambda: stream.read1(65536) if stream else b"", b""):  # type: ignore[union-attr]
                log.write(chunk)

    threading.Thread(target=pump, name="webrl-devtools-log", daemon=True).start()


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


@dataclass
class BrowserServerConfig:
    """`webrl browser-server`: one Playwright browser server for remote EnvWorkers."""

    host: str = "127.0.0.1"
    """Address to listen on; "0.0.0.0" to serve other machines. Anything but 127.0.0.1,
    localhost or ::1 needs a key (`api_key_env`)."""
    port: int = 3000
    """TCP port; 0 = any free one (printed)."""
    ws_path: str = "/webrl"
    """WebSocket path of the endpoint; workers set env.connect_url=ws://<host>:<port><ws_path>."""
    executable_path: str = ""
    """Chromium binary; "" = $WEBRL_CHROMIUM, else /usr/bin/chromium, else Playwright's own."""
    api_key_env: str = "WEBRL_BROWSER_API_KEY"
    """Environment variable holding the server's key (at least 16 characters); when it is set,
    only clients sending `Authorization: Bearer <key>` are served (workers read it from the
    variable env.connect_api_key_env names). Required beyond loopback. The key itself never goes
    in a config."""

    def __post_init__(self) -> None:
        if not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ConfigError(f"BrowserServerConfig.port must be an integer in 0..65535, got {self.port!r}")
        if not isinstance(self.ws_path, str) or not self.ws_path.startswith("/"):
            raise ConfigError(f"BrowserServerConfig.ws_path must start with '/', got {self.ws_path!r}")
        if not isinstance(self.host, str) or not self.host:
            raise ConfigError(f"BrowserServerConfig.host must be an address such as '127.0.0.1', got {self.host!r}")
        if not isinstance(self.api_key_env, str):
            raise ConfigError(f"BrowserServerConfig.api_key_env must be a variable name, got {self.api_key_env!r}")
        try:
            check_server_key(self.host, self.api_key(), f"BrowserServerConfig.api_key_env={self.api_key_env!r}")
        except ValueError as error:
            hint = (f" (export {self.api_key_env}=$(python -c 'import secrets; print(secrets.token_urlsafe(32))') "
                    "here and where the workers run)") if self.api_key_env else " (name a variable holding the key)"
            raise ConfigError(f"{error}{hint}") from None

    def api_key(self) -> str:
        """The key from the variable `api_key_env` names ("" when unset or unnamed)."""
        return os.environ.get(self.api_key_env, "") if self.api_key_env else ""


def main(config: BrowserServerConfig) -> int:
    """Start the server, print its endpoint, serve until interrupted (Ctrl-C / SIGTERM)."""
    key = config.api_key()
    server = start_browser_server(config.host, config.port, config.ws_path, config.executable_path, api_key=key)
    keyed = (f" env.connect_api_key_env={config.api_key_env} (workers need ${config.api_key_env} set)" if key
             else " (no key: loopback only)")
    print(f"browser server listening: env.connect_url={server.endpoint}{keyed}", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        while server.running():
            time.sleep(1.0)
        print(f"browser server exited with code {server.process.poll()}; log: {server.log_path}", flush=True)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=BrowserServerConfig.__doc__)
    for name, default in (("host", "127.0.0.1"), ("port", 3000), ("ws_path", "/webrl"), ("executable_path", ""),
                          ("api_key_env", "WEBRL_BROWSER_API_KEY")):
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    raise SystemExit(main(BrowserServerConfig(**vars(parser.parse_args()))))

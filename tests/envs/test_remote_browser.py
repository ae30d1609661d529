"""Remote browsers (`BrowserConfig.connect_url`): settings refused with them, unreachable URLs,
the same observation through a Playwright server or a DevTools endpoint as from a local
Chromium, and a server killed mid-episode (infra_error, then a working reset once it is back).

Every server here is started by the test on 127.0.0.1 and stopped by it."""
from __future__ import annotations

import socket

import pytest

from webrl.config import ConfigError
from webrl.envs import BrowserSession, EnvWorker, EnvWorkerConfig, WebEnv, WebEnvConfig
from webrl.envs.browser import BrowserConfig, InfraError, remote_connect_kind
from webrl.envs.observation import oracle_view
from webrl.envs.remote_browser import start_browser_server, start_devtools_browser
from webrl.envs.sites.source import make_task
from tests.envs.helpers import element_id, spec


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- config --------------------------------------------------------------------------------------
@pytest.mark.parametrize("url, kind", [
    ("", ""),
    ("ws://10.0.0.5:3000/webrl", "playwright"),
    ("wss://browsers.internal/pool", "playwright"),
    ("http://127.0.0.1:9222", "cdp"),
    ("ws://127.0.0.1:9222/devtools/browser/6a1c", "cdp"),
])
def test_connect_url_kinds(url, kind):
    assert remote_connect_kind(url) == kind
    assert BrowserConfig(connect_url=url).remote == bool(url)


@pytest.mark.parametrize("url", ["localhost:3000", "ftp://host/x", "ws://", "chrome://inspect"])
def test_bad_connect_url_names_the_key_and_the_forms(url):
    with pytest.raises(ConfigError, match=r"BrowserConfig.connect_url must be '' .*ws://host:port/path"):
        BrowserConfig(connect_url=url)


@pytest.mark.parametrize("setting", [{"executable_path": "/usr/bin/chromium"},
                                     {"extra_args": ("--lang=de",)}, {"headless": False}])
def test_launch_settings_are_refused_with_a_remote_browser(setting):
    name = next(iter(setting))
    with pytest.raises(ConfigError, match=rf"BrowserConfig.{name}=.*cannot apply to the remote browser"):
        BrowserConfig(connect_url="ws://127.0.0.1:3000/webrl", **setting)
    BrowserConfig(**setting)  # fine when the browser is launched here


def test_resolver_overrides_are_refused_before_anything_starts():
    """WebEnvConfig appends --host-resolver-rules after BrowserConfig is built, so the session
    checks again at start, before it starts a driver or connects."""
    config = WebEnvConfig.from_dict({"browser": {"connect_url": "ws://127.0.0.1:3000/webrl"},
                                     "safety": {"network": {"resolver_overrides": {"public.test": "127.0.0.1"}}}})
    session = BrowserSession(config.browser)
    with pytest.raises(ConfigError, match="resolver_overrides adds --host-resolver-rules"):
        session.start()
    assert session._playwright is None and session.generation == 0


@pytest.mark.slow  # starts a Playwright driver (no Chromium)
def test_unreachable_url_fails_with_an_error_naming_it():
    refused = f"ws://127.0.0.1:{_free_port()}/webrl"  # nothing listens there
    silent = socket.socket()  # accepts TCP connections but never answers the handshake
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    cdp_silent = f"http://127.0.0.1:{silent.getsockname()[1]}"
    first = BrowserSession(BrowserConfig(connect_url=refused), connect_timeout_s=2.0)
    second = BrowserSession(BrowserConfig(connect_url=cdp_silent), connect_timeout_s=1.0)
    try:
        with pytest.raises(InfraError, match=rf"connect_url='{refused}' within connect_timeout_s=2: .*ECONNREFUSED"):
            first.start()
        # only connect_timeout_s ends this wait: without it the test would hang
        with pytest.raises(InfraError, match=rf"connect_url='{cdp_silent}' within connect_timeout_s=1: .*Timeout"):
            second.start()
        assert not first.is_alive() and first.browser_pid() is None
    finally:
        first.close()
        second.close()
        silent.close()


# -- real remote browsers ----------------------------------------------------------------------
@pytest.fixture(params=["playwright_server", "devtools"])
def remote_endpoint(request):
    start = start_browser_server if request.param == "playwright_server" else start_devtools_browser
    server = start()
    yield server.endpoint
    server.stop()


def _sandbox_episode(env: WebEnv) -> tuple[list, list, float, str]:
    """Elements after reset and after the oracle's first step on one sandbox task."""
    task = make_task("shop", 1, "train", 7)  # same arguments, same task
    obs, info = env.reset(options={"task": task})
    before = info["elements"]
    obs, reward, _, truncated, info = env.step(task.oracle_action(oracle_view(obs, info)))
    assert not truncated and not info.get("infra_error")
    return before, info["elements"], reward, obs["url"]


@pytest.mark.browser
@pytest.mark.slow
def test_remote_browser_sees_what_a_local_one_sees(remote_endpoint, browser_session):
    config = {"browser": {"viewport": "cpu"}}
    local = WebEnv(WebEnvConfig.from_dict(config), session=browser_session)
    remote_config = WebEnvConfig.from_dict({"browser": {"viewport": "cpu", "connect_url": remote_endpoint}})
    remote = WebEnv(remote_config)
    try:
        expected = _sandbox_episode(local)
        assert expected[0] and expected[1]  # a page with elements, and the oracle's step changed it
        assert _sandbox_episode(remote) == expected
        assert remote.session.browser_pid() is None and remote.session.is_alive()
    finally:
        remote.close()
        local.close()
    assert not remote.session.is_alive()


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("api_key", ["", "a-test-key-of-32-characters-long"])  # keyed: behind its KeyGate
def test_killed_server_gives_infra_error_then_reconnects(fixture_server, monkeypatch, api_key):
    from webrl.envs import browser

    monkeypatch.setattr(browser, "CONNECT_TIMEOUT_S", 5.0)
    monkeypatch.setenv("WEBRL_BROWSER_API_KEY", api_key)  # what the worker sends ("" = nothing)
    server = start_browser_server(port=_free_port(), api_key=api_key)
    worker = EnvWorker(EnvWorkerConfig(num_slots=1, viewport="cpu", connect_url=server.endpoint, step_timeout_s=10.0))
    try:
        started = worker.reset(0, options={"task": spec(fixture_server)})
        assert not started.truncated and worker.session.browser_pid() is None
        generation = worker.session.generation
        server.kill()  # the server and its Chromium, mid-episode
        step = worker.step(0, f"click({element_id(started.info, 'btn')})")
        assert (step.reward, step.terminated, step.truncated) == (0.0, False, True)
        assert step.info["infra_error"].startswith("browser_crashed"), step.info["infra_error"]
        assert step.info["truncation_reason"] == "infra_error"
        # the reconnect found nobody: the session waits disconnected, and says why
        assert not worker.ping() and server.endpoint in worker.session.last_connect_error
        down = worker.reset(0, options={"task": spec(fixture_server)})  # still down: truncated, not raised
        assert down.truncated and down.info["infra_error"].startswith("reset_failed")
        assert server.endpoint in down.info["infra_error"]

        server = start_browser_server(port=server.port, api_key=api_key)  # the pod is back on the same address
        again = worker.reset(0, options={"task": spec(fixture_server)})
        assert not again.truncated and worker.ping() and worker.session.generation == generation + 1
        step = worker.step(0, f"click({element_id(again.info, 'btn')})")
        assert not step.truncated and step.observation["feedback"] == "Clicked <button> 'Press me'"
    finally:
        worker.close()
        server.stop()


@pytest.mark.parametrize("setting, message", [({"port": 70000}, "BrowserServerConfig.port must be an integer in 0..65535"),
                                              ({"ws_path": "webrl"}, "BrowserServerConfig.ws_path must start with '/'"),
                                              ({"host": ""}, "BrowserServerConfig.host must be an address")])
def test_browser_server_config_names_the_bad_key(setting, message):
    from webrl.envs.remote_browser import BrowserServerConfig

    with pytest.raises(ConfigError, match=message):
        BrowserServerConfig(**setting)
    assert BrowserServerConfig().port == 3000  # the defaults are valid

"""No open doors (issue #36): every server webrl starts binds loopback unless told otherwise, and
a bind beyond loopback without a key is refused before anything binds, naming the setting that
supplies the key.

"Beyond loopback" is tested with "0.0.0.0" and "127.0.0.3": the code's rule is the literal list
127.0.0.1 | localhost | ::1, so 127.0.0.3 stands for another interface while staying on this
machine. Nothing here binds a non-loopback address (each refusal is checked to come first).

Covered elsewhere, not repeated here:
- browser-server, keyed: a client without the key is refused (401, Playwright's /json included)
  and a keyed one drives the browser: tests/envs/test_browser_server_key.py
  (`test_a_keyed_server_refuses_clients_without_the_key`, `test_the_gate_relays_...`); its
  config and `start_browser_server` refusing beyond loopback:
  `test_a_bind_beyond_loopback_without_a_key_is_refused_naming_the_key`.
- launched vLLM: argv on loopback and refused beyond it unguarded
  (tests/engines/test_vllm_config.py `test_command_binds_loopback_...`), `ServerConfig`'s
  refusal (tests/engines/test_launcher.py `test_server_config_checks`), a keyed server refusing
  keyless requests (tests/engines/test_vllm_guard.py, slow).
- webrl serve's key on /v1 through `create_app` (tests/serve/test_server.py
  `test_bearer_key_is_required_when_configured`) and as a subprocess
  (tests/serve/test_serve_main.py, slow).
"""
from __future__ import annotations

import inspect
import threading
import time

import httpx
import pytest

from webrl.config import ConfigError
from webrl.engines import launcher
from webrl.engines.launcher import InferenceServerActor, check_launch_key, launch_command
from webrl.engines.server_config import ServerConfig
from webrl.envs import remote_browser
from webrl.envs.remote_browser import BrowserServerConfig, start_devtools_browser
from webrl.serve.app import ServeConfig, serve_main

from tests.reward.helpers import StubEngine

BEYOND_LOOPBACK = ["0.0.0.0", "127.0.0.3"]
KEY = "a-test-key-of-32-characters-long"


# -- webrl serve (serve_main: what `webrl serve` and a launched webrl server run) -----------------
class ServeMainRun:
    """`serve_main` with the model load replaced by a stub engine and uvicorn's blocking
    `Server.run` moved to a thread, so the test reaches the socket it really bound."""

    def __init__(self, monkeypatch):
        import uvicorn

        from webrl.chat.local import LocalChatEngine

        self.loads, self.servers, self.engine = [], [], StubEngine(lambda messages: "ok")
        original_run = uvicorn.Server.run

        def load(*args, **kwargs):
            self.loads.append(args)
            return self.engine

        def run_in_thread(server, sockets):
            thread = threading.Thread(target=original_run, args=(server,), kwargs={"sockets": sockets}, daemon=True)
            self.servers.append((server, sockets[0], thread))
            thread.start()

        monkeypatch.setattr(LocalChatEngine, "from_pretrained", load)
        monkeypatch.setattr(uvicorn.Server, "run", run_in_thread)

    def start(self, config: ServeConfig) -> str:
        assert serve_main(config) == 0
        server, sock, _ = self.servers[-1]
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        host, port = sock.getsockname()[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        for server, sock, thread in self.servers:
            server.should_exit = True
            thread.join(timeout=10)
            sock.close()


@pytest.fixture
def serve_run(monkeypatch):
    monkeypatch.delenv("WEBRL_SERVE_API_KEY", raising=False)
    monkeypatch.delenv("WEBRL_SERVE_ADMIN_API_KEY", raising=False)
    run = ServeMainRun(monkeypatch)
    yield run
    run.stop()


def test_webrl_serve_binds_loopback_by_default(serve_run):
    assert ServeConfig().host == "127.0.0.1"
    url = serve_run.start(ServeConfig(model_path="stub-checkpoint", port=0))
    # the socket serve_main bound is on 127.0.0.1, not on every interface
    assert url.startswith("http://127.0.0.1:") and serve_run.servers[0][1].getsockname()[0] == "127.0.0.1"
    assert httpx.get(url + "/health", timeout=10).status_code == 200


@pytest.mark.parametrize("host", BEYOND_LOOPBACK)
def test_webrl_serve_beyond_loopback_without_a_key_is_refused_before_the_model_loads(serve_run, host):
    with pytest.raises(ValueError, match=rf"host='{host}' is not loopback and needs a key: "
                                         r"export WEBRL_SERVE_API_KEY=<key>"):
        serve_main(ServeConfig(model_path="stub-checkpoint", host=host, port=0))
    with pytest.raises(ValueError, match="set api_key_env to a variable holding a key"):
        serve_main(ServeConfig(model_path="stub-checkpoint", host=host, port=0, api_key_env=""))
    # an admin key alone leaves /v1 open: still refused
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WEBRL_SERVE_ADMIN_API_KEY", KEY)
        with pytest.raises(ValueError, match="needs a key"):
            serve_main(ServeConfig(model_path="stub-checkpoint", host=host, port=0))
    assert serve_run.loads == [] and serve_run.servers == []  # refused before loading or binding


def test_webrl_serve_with_a_key_beyond_loopback_admits_only_the_key(serve_run, monkeypatch):
    monkeypatch.setenv("MY_SERVE_KEY", KEY)
    # 127.0.0.3: outside the literal loopback list (so the key is required), yet on this machine
    url = serve_run.start(ServeConfig(model_path="stub-checkpoint", host="127.0.0.3", port=0,
                                      api_key_env="MY_SERVE_KEY"))
    assert url.startswith("http://127.0.0.3:")
    payload = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    chat = url + "/v1/chat/completions"
    assert httpx.post(chat, json=payload, timeout=30).status_code == 401
    assert httpx.post(chat, json=payload, headers={"Authorization": "Bearer wrong"}, timeout=30).status_code == 401
    keyed = httpx.post(chat, json=payload, headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert keyed.status_code == 200 and keyed.json()["choices"][0]["message"]["content"] == "ok"
    assert len(serve_run.engine.seen) == 1  # the refused requests never reached the model


# -- servers the run launches (rollout.server.launch) --------------------------------------------
def test_launched_servers_bind_loopback_by_default():
    assert ServerConfig().host == "127.0.0.1"
    assert launch_command("webrl", "/ckpt", 8123)[4] == "host=127.0.0.1"
    sglang = launch_command("sglang", "/ckpt", 30000)
    assert sglang[sglang.index("--host") + 1] == "127.0.0.1"


@pytest.mark.parametrize("kind", ["webrl", "sglang"])
@pytest.mark.parametrize("host", BEYOND_LOOPBACK)
def test_launched_servers_beyond_loopback_need_api_key_env(kind, host):
    with pytest.raises(ConfigError, match=rf"rollout.server.host='{host}': a launched {kind} server beyond "
                                          r"loopback needs rollout.server.api_key_env"):
        ServerConfig(launch=kind, host=host)
    assert ServerConfig(launch=kind, host=host, api_key_env="K").api_key_env == "K"
    for loopback in ("127.0.0.1", "localhost", "::1"):
        assert ServerConfig(launch=kind, host=loopback).host == loopback


@pytest.mark.parametrize("kind", ["webrl", "sglang", "vllm"])
def test_a_launched_server_whose_key_variable_is_unset_is_refused_before_it_binds(kind, tmp_path, monkeypatch):
    monkeypatch.delenv("UNSET_SERVER_KEY", raising=False)

    def no_bind(host="127.0.0.1"):
        raise AssertionError(f"free_port({host!r}) ran before the key check")

    monkeypatch.setattr(launcher, "free_port", no_bind)
    for host in BEYOND_LOOPBACK:
        with pytest.raises(ValueError, match=rf"a launched {kind} server on rollout.server.host='{host}' needs a key "
                                             r"but has rollout.server.api_key_env='UNSET_SERVER_KEY', which is not set"):
            InferenceServerActor(kind, "/ckpt", host, 0, [], str(tmp_path), 60.0, 0, {"api_key_env": "UNSET_SERVER_KEY"})
        with pytest.raises(ValueError, match="needs a key but has no rollout.server.api_key_env"):
            InferenceServerActor(kind, "/ckpt", host, 0, [], str(tmp_path), 60.0, 0, {})


def test_check_launch_key_passes_loopback_and_a_set_key():
    for host in ("127.0.0.1", "localhost", "::1"):
        assert check_launch_key("sglang", host, "", "") is None
    assert check_launch_key("sglang", "0.0.0.0", "K", KEY) is None
    with pytest.raises(ValueError, match="needs a key"):
        check_launch_key("sglang", "0.0.0.0", "K", "")


def test_a_keyed_sglang_launch_hands_the_key_to_the_server(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_SGLANG_KEY", KEY)
    actor = InferenceServerActor("sglang", "/ckpt", "127.0.0.3", 0, [], str(tmp_path), 60.0, 0,
                                 {"api_key_env": "MY_SGLANG_KEY"})  # builds the command, starts nothing
    command = actor.server.process.command
    assert command[command.index("--host") + 1] == "127.0.0.3" and command[command.index("--api-key") + 1] == KEY


# -- webrl browser-server and the DevTools browser -----------------------------------------------
def test_browser_server_binds_loopback_by_default(monkeypatch):
    monkeypatch.delenv("WEBRL_BROWSER_API_KEY", raising=False)
    assert BrowserServerConfig().host == "127.0.0.1"
    assert inspect.signature(remote_browser.start_browser_server).parameters["host"].default == "127.0.0.1"
    asked = []

    class Started(Exception):
        pass

    def start(host, *args, **kwargs):
        asked.append((host, kwargs["api_key"]))
        raise Started

    monkeypatch.setattr(remote_browser, "start_browser_server", start)
    with pytest.raises(Started):
        remote_browser.main(BrowserServerConfig())  # what `webrl browser-server` runs
    assert asked == [("127.0.0.1", "")]


def test_devtools_browser_binds_loopback_and_refuses_any_other_host(monkeypatch):
    assert inspect.signature(start_devtools_browser).parameters["host"].default == "127.0.0.1"

    def no_start(*args, **kwargs):
        raise AssertionError("Chromium started before the host check")

    monkeypatch.setattr(remote_browser.subprocess, "Popen", no_start)
    for host in BEYOND_LOOPBACK:
        with pytest.raises(ValueError, match=rf"start_devtools_browser\(host='{host}'\): a DevTools port has no key.*"
                                             r"start_browser_server\(api_key=...\)"):
            start_devtools_browser(host=host)


# -- the sandbox sites and MiniWoB pages (loopback only: no setting binds them elsewhere) ---------
def test_sandbox_sites_server_listens_on_loopback():
    from webrl.envs.sites import server

    started_here = server._SERVER is None
    try:
        url = server.ensure_server()
        assert url.startswith("http://127.0.0.1:")
        assert server._SERVER["server"].socket.getsockname()[0] == "127.0.0.1"
        assert httpx.get(url + "/", timeout=10).status_code == 200
    finally:
        if started_here:
            server.stop_server()
    assert "host" not in inspect.signature(server.ensure_server).parameters  # only the port can change


def test_miniwob_server_listens_on_loopback():
    import os

    from webrl.envs import miniwob

    started_here = miniwob._SERVER["pid"] != os.getpid()
    url = miniwob.miniwob_base_url()
    httpd = miniwob._SERVER["httpd"]
    try:
        assert url.startswith("http://127.0.0.1:") and httpd.socket.getsockname()[0] == "127.0.0.1"
    finally:
        if started_here:
            httpd.shutdown()
            httpd.server_close()
            miniwob._SERVER.update(pid=None, httpd=None, url=None)

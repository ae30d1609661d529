"""Launched inference servers (`webrl.engines.launcher`) with real processes on 127.0.0.1:
health wait, restart after kill -9 (the request in flight completes, the weights last loaded come
back), bounded restarts, stop / a dead launcher leave no process, and clear errors (exit at
start, health deadline) quoting the server's log. Most use a stdlib stub server (starts in well
under a second); one slow test runs the real `webrl serve` on the tiny model."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import httpx
import pytest

from webrl.config import ConfigError
from webrl.engines.server_config import ServerConfig
from webrl.engines.sglang import ServerEngine, ServerEngineError
from webrl.engines.launcher import (InferenceServer, ServerLaunchError, free_port, launch_command)

# A server speaking the /generate subset ServerEngine reads: it answers every prompt with the ids
# given on its command line (log-prob -0.5 each), after DELAY seconds, and keeps a weight version.
STUB = textwrap.dedent('''
    import json, sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    port, delay, ids = int(sys.argv[1]), float(sys.argv[2]), [int(t) for t in sys.argv[3].split(",")]
    load_s = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0  # how long a weight load takes
    info = {"model_path": "start", "weight_version": "0"}
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass
        def reply(self, obj):
            data = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def do_GET(self):
            self.reply({"status": "ok"} if self.path == "/health" else info)
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/update_weights_from_disk":
                time.sleep(load_s)
                info.update(model_path=body["model_path"], weight_version=body.get("weight_version", "x"))
                return self.reply({"success": True, "message": "ok"})
            time.sleep(delay)
            self.reply({"output_ids": ids, "meta_info": {
                "output_token_logprobs": [[-0.5, t, None] for t in ids], "prompt_tokens": len(body["input_ids"]),
                "cached_tokens": 3, "weight_version": info["weight_version"], "finish_reason": {"type": "stop"}}})
    print("stub listening on", port, flush=True)
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
''')


@pytest.fixture(scope="module")
def stub_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("stub") / "stub_server.py"
    path.write_text(STUB)
    return str(path)


@pytest.fixture(scope="module")
def processor(tiny_qwen25vl_path):
    from webrl.models import load_model

    return load_model(tiny_qwen25vl_path)[1]


def stub_server(stub_file, tmp_path, ids=(11, 12), delay_s=0.0, **kw) -> InferenceServer:
    port = free_port()
    command = [sys.executable, stub_file, str(port), str(delay_s), ",".join(map(str, ids))]
    return InferenceServer(command, f"http://127.0.0.1:{port}", tmp_path, check_interval_s=0.2, stop_grace_s=2, **kw)


def gone(pid: int, within_s: float = 10.0) -> bool:
    """True once `pid` no longer exists (or is a zombie nobody reaped), polling up to `within_s`."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ", 1)[1].startswith("Z"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def wait_for(condition, within_s: float = 20.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def text_request():
    from tests.policy.helpers import observation
    from webrl.policy import PolicyRequest

    return PolicyRequest(observation(1, screenshot=None))


def test_launch_commands_by_hand():
    assert launch_command("webrl", "/ckpt", 8123, launch_args=["max_new_tokens=64"]) == [
        sys.executable, "-m", "webrl.serve", "model_path=/ckpt", "host=127.0.0.1", "port=8123", "max_new_tokens=64"]
    assert launch_command("sglang", "/ckpt", 30000, "0.0.0.0", ["--tp-size", "2"]) == [
        sys.executable, "-m", "sglang.launch_server", "--model-path", "/ckpt", "--host", "0.0.0.0", "--port",
        "30000", "--tp-size", "2"]
    with pytest.raises(ValueError, match="'vllm', 'webrl' or 'sglang', got 'tgi'"):
        launch_command("tgi", "/ckpt", 1)


def test_server_flags_by_hand():
    """The run's pixel bounds, key variables and the cascade's hidden states, as each server kind spells them."""
    from webrl.engines.launcher import server_flags

    env = {"USER_KEY": "u", "ADMIN_KEY": "a"}
    assert server_flags("webrl", (3136, 1003520), "USER_KEY", "ADMIN_KEY", True, env) == [
        "image_min_pixels=3136", "image_max_pixels=1003520", "api_key_env=USER_KEY", "admin_api_key_env=ADMIN_KEY"]
    assert server_flags("sglang", (3136, 1003520), "USER_KEY", "ADMIN_KEY", True, env) == [
        "--mm-process-config", '{"image": {"min_pixels": 3136, "max_pixels": 1003520}}', "--api-key", "u",
        "--admin-api-key", "a", "--enable-return-hidden-states"]
    assert server_flags("sglang", (0, 0), "UNSET", "", False, env) == []  # a variable not set: no flag
    assert server_flags("webrl", (0, 0), environ=env) == []
    # vLLM: the token route, log-probs at the sampling temperature, screenshots per prompt, no video,
    # the pixel bounds as its processor kwargs, the NCCL weight-transfer routes; no key in the
    # argv (it travels in the server's environment: vllm_environment)
    assert server_flags("vllm", (3136, 12544), "USER_KEY", "", True, env, max_images=2, dtype="bfloat16") == [
        "--enable-scale-out", "--logprobs-mode", "processed_logprobs", "--dtype", "bfloat16", "--enforce-eager",
        "--seed", "0", "--limit-mm-per-prompt", '{"image": 2, "video": 0}',
        "--weight-transfer-config", '{"backend": "nccl"}',
        "--mm-processor-kwargs", '{"min_pixels": 3136, "max_pixels": 12544}']
    assert "--enforce-eager" not in server_flags("vllm", eager=False)  # a server on a GPU keeps its CUDA graphs
    with pytest.raises(ValueError, match="'vllm', 'webrl' or 'sglang', got 'tgi'"):
        server_flags("tgi")


def test_server_config_checks():
    with pytest.raises(ConfigError, match=r"rollout.server.launch must be one of \('none', 'vllm', 'webrl', 'sglang'\)"):
        ServerConfig(launch="docker")
    # the protocol follows a launched kind; a vLLM server binds loopback (its weight routes take no key)
    assert ServerConfig(launch="vllm").speaks == "vllm" and ServerConfig(launch="webrl").speaks == "sglang"
    assert ServerConfig(urls=["http://127.0.0.1:1"], protocol="vllm").speaks == "vllm"
    with pytest.raises(ConfigError, match="protocol='sglang' but rollout.server.launch='vllm' servers speak 'vllm'"):
        ServerConfig(launch="vllm", protocol="sglang")
    with pytest.raises(ConfigError, match=r"rollout.server.protocol must be one of \('auto', 'sglang', 'vllm'\)"):
        ServerConfig(protocol="openai")
    with pytest.raises(ConfigError, match="beyond loopback needs rollout.server.api_key_env"):
        ServerConfig(launch="vllm", host="0.0.0.0")
    assert ServerConfig(launch="vllm", host="0.0.0.0", api_key_env="K").host == "0.0.0.0"  # every route asks K
    with pytest.raises(ConfigError, match="admin_api_key_env is SGLang's admin key"):
        ServerConfig(launch="vllm", api_key_env="K", admin_api_key_env="A")
    with pytest.raises(ConfigError, match="rollout.server.python only acts with rollout.server.launch=vllm"):
        ServerConfig(launch="webrl", python="/usr/bin/python3")
    with pytest.raises(ConfigError, match="urls=.* and rollout.server.launch='webrl' are both set"):
        ServerConfig(urls=["http://127.0.0.1:1"], launch="webrl")
    for setting in ({"num_servers": 2}, {"launch_args": ["--tp", "2"]}, {"port": 31000}, {"gpus_per_server": 1.0},
                    {"max_restarts": 9}, {"startup_timeout_s": 5.0}, {"host": "0.0.0.0"}, {"cpus_per_server": 2.0}):
        name = next(iter(setting))
        with pytest.raises(ConfigError, match=rf"rollout.server.{name} only act with rollout.server.launch"):
            ServerConfig(urls=["http://127.0.0.1:1"], **setting)
    with pytest.raises(ConfigError, match="max_restarts must be an integer >= 0"):
        ServerConfig(launch="webrl", max_restarts=-1)
    with pytest.raises(ConfigError, match="down_wait_s must be >= 0 or -1"):
        ServerConfig(launch="webrl", down_wait_s=-2)
    assert ServerConfig(urls=["http://127.0.0.1:1"]).request_down_wait_s(300) == 0.0  # user-started: fail over at once
    assert ServerConfig(launch="webrl", startup_timeout_s=42).request_down_wait_s(300) == 42  # launched: wait out a restart
    assert ServerConfig(launch="webrl").request_down_wait_s(300) == 270  # 600 s start-up, below the 300 s request bound
    assert ServerConfig(launch="webrl", down_wait_s=5).request_down_wait_s(300) == 5


def test_kill_9_restarts_the_server_and_the_request_in_flight_completes(stub_file, tmp_path, processor):
    server = stub_server(stub_file, tmp_path, ids=(11, 12), delay_s=1.0, max_restarts=2)
    engine = ServerEngine([server.start()], processor, down_wait_s=30)
    try:
        first = server.status()["pid"]
        # a weight load the supervisor sees (it polls /model_info while the server runs) ...
        httpx.post(f"{server.url}/update_weights_from_disk", json={"model_path": "/w/v3", "weight_version": "r-3"})
        assert wait_for(lambda: (server._latest_info or {}).get("weight_version") == "r-3")
        engine.note_weights("r-3")
        result = {}
        thread = threading.Thread(target=lambda: result.update(d=engine.act([text_request()])[0]))
        thread.start()
        time.sleep(0.4)  # the request is inside the stub's 1 s delay
        os.kill(first, signal.SIGKILL)
        thread.join(60)
        # ... came back after the restart, so the restarted server answers with the same version
        assert result["d"].response_ids == [11, 12] and result["d"].logprobs == [-0.5, -0.5]
        assert result["d"].stats.cached_tokens == 3  # meta_info.cached_tokens read into the stats
        status = server.status()
        assert status["restarts"] == 1 and status["alive"] and status["pid"] != first and status["failed"] is None
        assert httpx.get(f"{server.url}/model_info").json() == {"model_path": "/w/v3", "weight_version": "r-3"}
    finally:
        engine.close()
        server.stop()
    assert gone(status["pid"]) and gone(first)
    assert "stub listening on" in (tmp_path / "server.log").read_text()


def test_a_server_restarted_on_older_weights_gets_the_runs_newest_back_from_the_engine(stub_file, tmp_path,
                                                                                       processor):
    """The gap the chaos run's server_weight_update fault found (benchmarks/results/chaos_server_*):
    the server dies right after loading r-4, before its supervisor's next /model_info poll, so
    the restart restores r-3 (the last it saw) while the engine expects r-4. Before, every answer
    was refused as stale until down_wait_s ran out, and the run's collection stalled (the next load
    comes only after it). Now the engine loads its newest folder back into the server and the row
    is answered. The missed poll is made certain by freezing what the supervisor reads after r-3.
    A version the run never loaded (another writer's) is not overwritten: refused, as before."""
    port = free_port()
    server = InferenceServer([sys.executable, stub_file, str(port), "0", "11,12"], f"http://127.0.0.1:{port}",
                             tmp_path, check_interval_s=0.2, stop_grace_s=2, max_restarts=2)
    engine = ServerEngine([server.start()], processor, down_wait_s=15)
    try:
        engine.load_weights("/w/v3", "r-3")
        assert wait_for(lambda: (server._latest_info or {}).get("weight_version") == "r-3")
        seen = dict(server._latest_info)
        server._model_info = lambda: seen  # the supervisor's polls miss what comes next
        engine.load_weights("/w/v4", "r-4")
        first = server.status()["pid"]
        os.kill(first, signal.SIGKILL)
        assert wait_for(lambda: server.status()["restarts"] == 1 and server.status()["healthy"])
        # healthy comes before the launcher's restore of what it last saw: wait for that too
        assert wait_for(lambda: httpx.get(f"{server.url}/model_info").json()
                        == {"model_path": "/w/v3", "weight_version": "r-3"})
        started = time.monotonic()
        (decision,) = engine.act([text_request()])
        assert decision.response_ids == [11, 12] and time.monotonic() - started < 10
        assert httpx.get(f"{server.url}/model_info").json() == {"model_path": "/w/v4", "weight_version": "r-4"}

        httpx.post(f"{server.url}/update_weights_from_disk", json={"model_path": "/x", "weight_version": "theirs"})
        engine.backend.down_wait_s = 1.0
        with pytest.raises(ServerEngineError, match="weight_version is 'theirs', but this engine loaded 'r-4'"):
            engine.act([text_request()])
        assert httpx.get(f"{server.url}/model_info").json() == {"model_path": "/x", "weight_version": "theirs"}
    finally:
        engine.close()
        server.stop()


@pytest.mark.parametrize("down_wait_s", [20.0, 0.0])
def test_a_server_killed_during_a_weight_load_takes_the_load_once_restarted(stub_file, tmp_path, processor,
                                                                           down_wait_s):
    """The chaos run's second server_weight_update fault: the server dies inside POST
    /update_weights_from_disk (the stub's load takes 2 s; the kill comes 0.5 s in), so the
    connection drops. A launched server's engine (down_wait_s 20) sends the load again once the
    launcher has restarted it: the server ends on r-5, one restart. With down_wait_s 0 (a
    user-started server, nobody restarts it) the dropped load is raised at once, naming the route."""
    port = free_port()
    server = InferenceServer([sys.executable, stub_file, str(port), "0", "11,12", "2.0"], f"http://127.0.0.1:{port}",
                             tmp_path, check_interval_s=0.2, stop_grace_s=2, max_restarts=2)
    engine = ServerEngine([server.start()], processor, down_wait_s=down_wait_s)
    result = {}

    def load():
        try:
            result["version"] = engine.backend.load_weights_from_disk("/w/v5", "r-5")
        except ServerEngineError as e:
            result["error"] = str(e)

    try:
        thread = threading.Thread(target=load)
        thread.start()
        time.sleep(0.5)
        os.kill(server.status()["pid"], signal.SIGKILL)
        thread.join(60)
        if down_wait_s:
            assert result == {"version": "r-5"}
            assert httpx.get(f"{server.url}/model_info").json() == {"model_path": "/w/v5", "weight_version": "r-5"}
            assert server.status()["restarts"] == 1
        else:
            assert "/update_weights_from_disk: server unreachable" in result["error"]
    finally:
        engine.close()
        server.stop()


def test_restarts_are_bounded(stub_file, tmp_path):
    server = stub_server(stub_file, tmp_path, max_restarts=1)
    server.start()
    try:
        os.kill(server.status()["pid"], signal.SIGKILL)
        assert wait_for(lambda: server.status()["restarts"] == 1 and server.status()["healthy"])
        os.kill(server.status()["pid"], signal.SIGKILL)
        assert wait_for(lambda: server.status()["failed"] is not None)
        assert "died (exit code -9) after 1 restarts (rollout.server.max_restarts)" in server.failed
        assert "stub listening on" in server.failed  # the log's end is quoted
    finally:
        server.stop()


def test_a_command_that_exits_at_once_is_a_clear_error(tmp_path):
    command = [sys.executable, "-c", "print('cannot load the checkpoint'); raise SystemExit(3)"]
    server = InferenceServer(command, "http://127.0.0.1:9", tmp_path, startup_timeout_s=120)
    with pytest.raises(ServerLaunchError) as e:
        server.start()
    message = str(e.value)
    assert "http://127.0.0.1:9: the server process exited with code 3 before answering /health" in message
    assert "command: " + " ".join(command) in message and "cannot load the checkpoint" in message
    server.stop()


def test_health_deadline_is_a_clear_error_and_kills_the_process(tmp_path):
    command = [sys.executable, "-c", "import time; print('loading weights', flush=True); time.sleep(120)"]
    server = InferenceServer(command, f"http://127.0.0.1:{free_port()}", tmp_path, startup_timeout_s=1.5,
                             stop_grace_s=2)
    with pytest.raises(ServerLaunchError, match=r"no 200 from /health within 1.5 s \(rollout.server.startup_timeout_s"
                                                r"\)[\s\S]*loading weights"):
        server.start()
    assert gone(server.status()["pid"])
    server.stop()


def test_a_killed_launcher_takes_its_server_with_it(stub_file, tmp_path):
    """No orphans when the launching process itself dies (a Ray actor killed at shutdown)."""
    port = free_port()
    module = os.path.abspath("webrl/engines/launcher.py")  # stdlib-only imports: load it alone, fast
    script = textwrap.dedent(f'''
        import importlib.util, sys, time
        spec = importlib.util.spec_from_file_location("server_launcher", {module!r})
        launcher = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(launcher)
        InferenceServer = launcher.InferenceServer
        s = InferenceServer([sys.executable, {stub_file!r}, "{port}", "0", "1"], "http://127.0.0.1:{port}",
                            {str(tmp_path)!r})
        s.start()
        print(s.status()["pid"], flush=True)
        time.sleep(120)
    ''')
    launcher = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                                cwd=os.getcwd())
    try:
        server_pid = int(launcher.stdout.readline())
        assert not gone(server_pid, within_s=0.2)
        launcher.kill()  # SIGKILL: no cleanup code of the launcher runs
        launcher.wait()
        assert gone(server_pid)
    finally:
        launcher.kill()


def test_requests_wait_for_a_down_server_then_fail_clearly(processor):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    engine = ServerEngine([url], processor, down_wait_s=0.6)
    with pytest.raises(ServerEngineError, match=r"still down or stale after down_wait_s=0.6 s.*server unreachable"):
        engine.act([text_request()])
    engine.close()


@pytest.mark.slow
def test_webrl_serve_launched_restarted_and_equal_to_in_process(tmp_path, tiny_qwen25vl_path):
    """The real `webrl serve` (tiny model, own process): greedy decisions equal the in-process
    policy's; after kill -9 the launcher restarts it and the next act gives the same decision."""
    from webrl.models import load_model
    from webrl.policy import GeneratorConfig, GeneratorPolicy, SamplingConfig

    port = free_port()
    server = InferenceServer(launch_command("webrl", tiny_qwen25vl_path, port, launch_args=["default_max_tokens=16"]),
                             f"http://127.0.0.1:{port}", tmp_path, startup_timeout_s=300, check_interval_s=0.5)
    model, proc = load_model(tiny_qwen25vl_path)
    config = GeneratorConfig(sampling=SamplingConfig(greedy=True, max_new_tokens=8))
    local = GeneratorPolicy(model, proc, config).act([text_request()])[0]
    engine = ServerEngine([server.start()], proc, config, down_wait_s=300)
    try:
        before = engine.act([text_request()])[0]
        assert before.response_ids == local.response_ids and before.stats.cached_tokens == 0
        first = server.status()["pid"]
        os.kill(first, signal.SIGKILL)
        after = engine.act([text_request()])[0]  # waits out the restart
        assert after.response_ids == before.response_ids and server.status()["restarts"] == 1
    finally:
        engine.close()
        server.stop()
    assert gone(first) and gone(server.status()["pid"])


@pytest.mark.ray
@pytest.mark.slow
def test_run_actors_launch_the_servers_route_requests_to_them_and_stop_them(ray_cluster, tiny_qwen25vl_path,
                                                                             tmp_path):
    """rollout.server.launch=webrl through RunActors inside a placement group laid out as a Tune
    trial's (`run_layout`): the run starts `webrl serve` in a server actor placed in the layout's
    server bundle, its inference worker answers through it, and close() leaves no server listening."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from webrl.run.actors import RunActors
    from webrl.config import load_config
    from webrl.policy.generator import GeneratorConfig, SamplingConfig
    from webrl.policy.prompt import PromptConfig
    from webrl.run.config import WebRLConfig
    from webrl.run.resources import run_layout

    config = load_config(WebRLConfig, "smoke", [f"run.run_dir={tmp_path}", "rollout.engine=server",
                                                "rollout.server.launch=webrl", "rollout.server.max_concurrency=4",
                                                "rollout.server.startup_timeout_s=600",
                                                "rollout.server.cpus_per_server=0.5",
                                                "resources.cpus_per_learner_rank=0.25",
                                                "resources.cpus_per_inference_worker=0.25",
                                                "resources.cpus_per_env_worker=0.25"])
    layout = run_layout(config)
    assert layout.servers == len(layout.bundles) - 1 and layout.bundles[-1] == {"CPU": 0.5}
    pg = placement_group(layout.bundles)
    ray.get(pg.ready(), timeout=60)
    # what Ray has left of the server's bundle; Ray's resource view lags behind pg.ready(), and it
    # leaves out a resource with nothing left
    server_bundle = f"CPU_group_{layout.servers}_{pg.id.hex()}"
    assert wait_for(lambda: ray.available_resources().get(server_bundle) == 0.5, within_s=60)
    actors = RunActors(config, tmp_path, placement_group=pg)
    generator = GeneratorConfig(prompt=PromptConfig(think=False), sampling=SamplingConfig(greedy=True, max_new_tokens=4))
    try:
        (worker,) = actors.start_inference(tiny_qwen25vl_path, generator, index=0)
        actors.wait_started()
        (url,) = actors._server_urls
        assert httpx.get(url + "/health", timeout=10).status_code == 200
        (decision, version), = ray.get(worker.act_batch.remote([text_request()]))
        assert decision.response_ids and version == 0
        # the server actor took its bundle of the trial's group, not CPUs beside it
        assert wait_for(lambda: ray.available_resources().get(server_bundle, 0.0) == 0.0, within_s=60)
        assert ray.cluster_resources()[server_bundle] == 0.5  # the bundle is there, all of it in use
    finally:
        actors.close()
        remove_placement_group(pg)
    assert actors._server_actors == [] and wait_for(lambda: not _answers(url), within_s=30)


def _answers(url: str) -> bool:
    try:
        httpx.get(url + "/health", timeout=2)
        return True
    except httpx.HTTPError:
        return False


@pytest.mark.ray
def test_a_server_down_for_good_ends_the_run_at_the_next_sync(ray_cluster, tmp_path):
    """After rollout.server.max_restarts, RunActors.sync_weights raises naming the server instead
    of letting every request time out."""
    import ray

    from webrl.run.actors import RunActors
    from webrl.config import load_config
    from webrl.engines.launcher import ServerLaunchError
    from webrl.run.config import WebRLConfig

    @ray.remote
    class DeadServer:
        def status(self):
            return {"url": "http://127.0.0.1:9", "failed": "http://127.0.0.1:9: the server died (exit code 1) after "
                                                           "3 restarts (rollout.server.max_restarts)"}

    config = load_config(WebRLConfig, "smoke", [f"run.run_dir={tmp_path}", "rollout.engine=server",
                                                "rollout.server.launch=webrl", "rollout.server.max_concurrency=4"])
    actors = RunActors(config, tmp_path)
    actors._server_actors = [DeadServer.remote()]
    with pytest.raises(ServerLaunchError, match=r"down for good .*\n.*127.0.0.1:9: the server died .* after 3 restarts"):
        actors.sync_weights(learner=None, version=1)
    ray.kill(actors._server_actors[0])


def test_route_headers_by_hand():
    """One rule for every client of a server (engine, weight broadcast, launcher): the admin key on
    the weight routes when there is one, else the API key; /generate and /model_info the API key."""
    from webrl.chat.server_http import route_headers

    assert route_headers("/generate", "u", "a") == {"Authorization": "Bearer u"}
    assert route_headers("/model_info", "u", "a") == {"Authorization": "Bearer u"}
    assert route_headers("/update_weights_from_distributed", "u", "a") == {"Authorization": "Bearer a"}
    assert route_headers("/init_weights_update_group", "u", "") == {"Authorization": "Bearer u"}
    assert route_headers("/generate", "", "a") == {}

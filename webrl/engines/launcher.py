"""Inference servers the run starts itself (`rollout.server.launch`): launch, health, restart, stop.

    server = InferenceServer(launch_command("webrl", model, port), url, log_dir)   # plain class (tests)
    url = server.start()           # blocks until GET /health answers 200, or raises ServerLaunchError
    server.status()                # {"url", "pid", "alive", "healthy", "restarts", "failed"}
    server.stop()                  # the whole process group is gone when this returns
    actors, urls = start_server_actors(config.rollout.server, model_path, run_dir / "servers")

Lifecycle. Each server is one process in its own process group (a new session), its output in
`<log_dir>/server.log`. A supervisor thread owns it: it spawns the process, waits for /health
with a deadline (`startup_timeout_s`), then checks every `check_interval_s` that it still runs;
a dead server is started again, up to `max_restarts` times, and reloads the weights it last
reported (GET /model_info: `model_path` and `weight_version` changed since start ->
POST /update_weights_from_disk with both), so a restart does not roll the policy back. Requests
in flight to a dying server fail with a dropped connection; `ServerEngine` sends them again
once the server answers (`down_wait_s`), weight loads included. A weight load in the last `check_interval_s` before a
death is not seen here: the restarted server then reports the run's older version, and the
engine, whose answer reads stale, loads its newest folder back into it before sending the row
again (`ServerBackend.restore`; before 2026-12-07 it refused the answers until the next load,
which comes only after the collection they stalled).

No orphans: `stop()` sends SIGTERM to the process group, then SIGKILL after `stop_grace_s`.
The server is also tied to the process that launched it by PR_SET_PDEATHSIG (Linux): when that
process dies (a Ray actor killed by `ray.shutdown`, a `kill -9`), the kernel kills the server.
SGLang's own scheduler / detokenizer processes arm the same signal against the server process
(sglang `srt/utils` `kill_itself_when_parent_died`), so its whole tree goes with it.

Commands (`launch_command`, with `server_flags` first: the run's image pixel bounds, its key
variables and, for the cascade, SGLang's `--enable-return-hidden-states`):

    webrl   python -m webrl.serve model_path=<model> host=<host> port=<port> [launch_args]
            (= `webrl serve <model> host=... port=...`; dotlist keys of `ServeConfig`)
    sglang  python -m sglang.launch_server --model-path <model> --host <host> --port <port>
            [launch_args]   e.g. launch_args=["--tp-size", "2", "--mem-fraction-static", "0.8"]

SGLang's flags were read in sgl-project/sglang `python/sglang/srt/server_args.py` (ServerArgs at
commit 001067ff: model_path -> --model-path, host, port (default 30000), weight_version,
mem_fraction_static, tp_size) and the server-arguments page of docs.sglang.io; not run here (no
SGLang or GPU on the project's CPU machines).

Placement: each actor reserves `cpus_per_server` / `gpus_per_server`; inside a Tune trial it
takes its own bundle of the trial's placement group (`webrl.run.resources.run_layout` ends with
one bundle per launched server), otherwise it is scheduled freely.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from webrl.chat.server_http import env_key, route_headers
from webrl.config import LOOPBACK_HOSTS

LOG_TAIL_LINES = 30


class ServerLaunchError(RuntimeError):
    """A launched server that exited, never became healthy, or died more than `max_restarts`
    times; the message names its URL and command and quotes the end of its log."""


def launch_command(kind: str, model_path: str, port: int, host: str = "127.0.0.1",
                   launch_args: Sequence[str] = (), python: str = "", guarded: bool = False) -> list[str]:
    """The argv that starts one server of `kind` ("webrl" | "sglang" | "vllm") on `host:port`;
    `python`: vLLM's interpreter (`webrl.engines.vllm_launch.vllm_python`); `guarded`: vLLM asks
    every route for the run's key (`vllm_command`)."""
    if kind == "vllm":
        from webrl.engines.vllm_launch import vllm_command, vllm_python

        return vllm_command(vllm_python(python), model_path, port, host, launch_args, guarded)
    if kind == "webrl":
        base = [sys.executable, "-m", "webrl.serve", f"model_path={model_path}", f"host={host}", f"port={port}"]
    elif kind == "sglang":
        base = [sys.executable, "-m", "sglang.launch_server", "--model-path", model_path, "--host", host,
                "--port", str(port)]
    else:
        raise ValueError(f"launch kind must be 'vllm', 'webrl' or 'sglang', got {kind!r}")
    return base + [str(a) for a in launch_args]


def server_flags(kind: str, image_pixels: tuple[int, int] = (0, 0), api_key_env: str = "",
                 admin_api_key_env: str = "", hidden_states: bool = False,
                 environ: Optional[dict] = None, deterministic: bool = False, max_images: int = 8,
                 dtype: str = "float32", eager: bool = True) -> list[str]:
    """What a launched server must be told so that the run's requests mean the same there
    (vllm: `webrl.engines.vllm_launch.vllm_flags`, with `max_images` screenshots per prompt, the
    run's `dtype`, and `eager` where the server has no GPU; its seeds hold without a flag):

    - image_pixels (min, max): the bounds the run's prompts count image tokens at; a server
      expanding an image at other bounds answers another prompt_tokens (an error). sglang:
      `--mm-process-config {"image": {"min_pixels", "max_pixels"}}`; webrl: image_min/max_pixels.
    - keys: webrl serve reads them from the variables the run names (inherited); SGLang takes
      `--api-key` / `--admin-api-key` values (visible in the process list of the server's node).
    - hidden_states: the cascade's heads read hidden states; SGLang returns them only when
      started with `--enable-return-hidden-states`.
    - deterministic (run.deterministic): SGLang's batch-invariant mode,
      `--enable-deterministic-inference` (the only mode where it honours `sampling_seed`); webrl
      serve decodes one row per forward already and honours seeds always, so it needs no flag.
    Put before `launch_args`, so that a user's own flag comes last and wins."""
    env = os.environ if environ is None else environ
    low, high = image_pixels
    if kind == "vllm":
        from webrl.engines.vllm_launch import vllm_flags

        return vllm_flags(image_pixels, max_images, dtype, eager)  # its key travels in its environment
    if kind == "webrl":
        out = [f"image_min_pixels={low}", f"image_max_pixels={high}"] if high else []
        out += [f"api_key_env={api_key_env}"] if api_key_env else []
        return out + ([f"admin_api_key_env={admin_api_key_env}"] if admin_api_key_env else [])
    if kind != "sglang":
        raise ValueError(f"server_flags kind must be 'vllm', 'webrl' or 'sglang', got {kind!r}")
    out = ["--mm-process-config", json.dumps({"image": {"min_pixels": low, "max_pixels": high}})] if high else []
    for flag, name in (("--api-key", api_key_env), ("--admin-api-key", admin_api_key_env)):
        if name and env.get(name):
            out += [flag, env[name]]
    out += ["--enable-return-hidden-states"] if hidden_states else []
    return out + (["--enable-deterministic-inference"] if deterministic else [])


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (another process may take it before the server binds)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


# loaded here, not in the forked child (little may run between fork and exec in a threaded process)
_LIBC = ctypes.CDLL("libc.so.6", use_errno=True) if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:
    """In the child before exec: its own session (process group) and SIGKILL when the launching
    thread's process dies."""
    os.setsid()
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


class ServerProcess:
    """One server process: spawn, health wait, stop (its whole process group)."""

    def __init__(self, command: Sequence[str], url: str, log_path: Path, env: Optional[dict] = None,
                 cwd: Optional[str] = None):
        self.command, self.url, self.log_path = list(command), url.rstrip("/"), Path(log_path)
        self.env, self.cwd = env, cwd
        self.process: Optional[subprocess.Popen] = None

    def spawn(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n--- webrl: starting {' '.join(self.command)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd,
                                            preexec_fn=_die_with_parent)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def describe(self) -> str:
        return f"command: {' '.join(self.command)}\nlog {self.log_path}, last lines:\n{log_tail(self.log_path)}"

    def wait_healthy(self, timeout_s: float, poll_s: float = 0.2, stop: Optional[threading.Event] = None) -> None:
        """Return once GET <url>/health answers 200; raise ServerLaunchError when the process exits
        first or `timeout_s` passes."""
        import httpx

        deadline = time.monotonic() + timeout_s
        while True:
            code = self.process.poll()
            if code is not None:
                raise ServerLaunchError(f"{self.url}: the server process exited with code {code} before answering "
                                        f"/health\n{self.describe()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise ServerLaunchError(f"{self.url}: no 200 from /health within {timeout_s:g} s "
                                        f"(rollout.server.startup_timeout_s)\n{self.describe()}")
            if stop is not None and stop.wait(poll_s):
                raise ServerLaunchError(f"{self.url}: stopped while starting")
            elif stop is None:
                time.sleep(poll_s)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM to the process group, SIGKILL after `grace_s`; reaps the process."""
        if self.process is None:
            return
        pgid = self.process.pid  # setsid: the group id is the server's pid
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(wait_s)
            except subprocess.TimeoutExpired:
                continue
            if not _group_alive(pgid):
                break
        try:
            os.killpg(pgid, signal.SIGKILL)  # a child the server left behind in its group
        except ProcessLookupError:
            pass
        self.process.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


class InferenceServer:
    """A launched server kept alive: started, watched and restarted by a supervisor thread.

    The thread that spawns the process is the one PR_SET_PDEATHSIG watches, so one long-lived
    thread does every spawn (first start and restarts)."""

    def __init__(self, command: Sequence[str], url: str, log_dir: str | Path, startup_timeout_s: float = 600.0,
                 max_restarts: int = 3, check_interval_s: float = 1.0, stop_grace_s: float = 10.0,
                 env: Optional[dict] = None, keys: tuple[str, str] = ("", ""), cwd: Optional[str] = None):
        if not startup_timeout_s > 0 or max_restarts < 0 or not check_interval_s > 0:
            raise ValueError(f"InferenceServer needs startup_timeout_s > 0, max_restarts >= 0 and check_interval_s "
                             f"> 0, got {startup_timeout_s}, {max_restarts}, {check_interval_s}")
        self.url = url.rstrip("/")
        self.process = ServerProcess(command, self.url, Path(log_dir) / "server.log", env, cwd)
        self.startup_timeout_s, self.max_restarts = startup_timeout_s, max_restarts
        self.check_interval_s, self.stop_grace_s = check_interval_s, stop_grace_s
        self._keys = keys  # (API key, admin key) for the supervisor's own requests
        self.restarts = 0
        self.healthy = False
        """True from a successful /health wait until the supervisor sees the process dead."""
        self.failed: Optional[str] = None
        """Why the server is down for good (start failed or restarts exhausted); None while fine."""
        self._started_info: Optional[dict] = None  # /model_info right after the first start
        self._latest_info: Optional[dict] = None  # ... as last read while it ran
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> str:
        """Launch and wait until healthy; the URL. Raises ServerLaunchError with the log's end."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._supervise, daemon=True, name=f"webrl-server-{self.url}")
            self._thread.start()
        self._ready.wait()
        if self.failed is not None:
            raise ServerLaunchError(self.failed)
        return self.url

    def status(self) -> dict:
        return {"url": self.url, "pid": self.process.process.pid if self.process.process else None,
                "alive": self.process.alive(), "healthy": self.healthy, "restarts": self.restarts, "failed": self.failed}

    def stop(self) -> None:
        """Stop supervising and end the server's process group (idempotent)."""
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.stop_grace_s + 30)
        self.process.stop(self.stop_grace_s)

    # -- the supervisor thread -------------------------------------------------------------------
    def _supervise(self) -> None:
        try:
            self._launch()
            self._started_info = self._latest_info = self._model_info()
        except ServerLaunchError as e:
            self.failed = str(e)
        self._ready.set()
        while self.failed is None and not self._stopping.wait(self.check_interval_s):
            if self.process.alive():
                self._latest_info = self._model_info() or self._latest_info
                continue
            self.healthy = False
            self._restart()
        self.process.stop(self.stop_grace_s)  # this thread spawned it: stop it here too

    def _restart(self) -> None:
        """Start the dead server again (a failed start counts as a restart) or give up."""
        why = f"died (exit code {self.process.process.returncode})"
        while not self._stopping.is_set():
            if self.restarts >= self.max_restarts:
                self.failed = (f"{self.url}: the server {why} after {self.restarts} restarts "
                               f"(rollout.server.max_restarts)\n{self.process.describe()}")
                return
            self.restarts += 1
            try:
                self._launch()
                self._restore_weights()
                return
            except ServerLaunchError as e:
                why = f"failed to restart ({str(e).splitlines()[0]})"

    def _launch(self) -> None:
        self.process.spawn()
        try:
            self.process.wait_healthy(self.startup_timeout_s, stop=self._stopping)
        except ServerLaunchError:
            self.process.stop(self.stop_grace_s)
            raise
        self.healthy = True

    def _model_info(self) -> Optional[dict]:
        import httpx

        try:
            r = httpx.get(f"{self.url}/model_info", timeout=5.0, headers=route_headers("/model_info", *self._keys))
            return r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def _restore_weights(self) -> None:
        """A restarted server starts from the launch checkpoint: load what it last served."""
        import httpx

        old, first = self._latest_info or {}, self._started_info or {}
        if not old.get("model_path") or old.get("model_path") == first.get("model_path"):
            # nothing loaded from disk since launch: the launch weights are what it reports (a
            # version given by a broadcast is not restored with them, so it reads stale, not current)
            return
        body = {"model_path": old["model_path"]}
        if old.get("weight_version") is not None:
            body["weight_version"] = str(old["weight_version"])
        try:
            r = httpx.post(f"{self.url}/update_weights_from_disk", json=body, timeout=self.startup_timeout_s,
                           headers=route_headers("/update_weights_from_disk", *self._keys))
            ok = r.status_code == 200 and r.json().get("success") is True
        except (httpx.HTTPError, ValueError) as e:
            ok, r = False, e
        if not ok:
            raise ServerLaunchError(f"{self.url}: the restarted server did not reload {body}: {str(r)[:300]}\n"
                                    f"{self.process.describe()}")


def bundle_strategy(placement_group: Any, bundle_index: int) -> dict[str, Any]:
    """Actor options that pin an actor to one bundle (none without a placement group)."""
    if placement_group is None:
        return {}
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    if not 0 <= bundle_index < placement_group.bundle_count:
        raise ValueError(f"bundle index {bundle_index} is outside the placement group's "
                         f"{placement_group.bundle_count} bundles (check bundle_offset)")
    return {"scheduling_strategy": PlacementGroupSchedulingStrategy(
        placement_group, placement_group_bundle_index=bundle_index,
        placement_group_capture_child_tasks=True)}


def start_server_actors(config: Any, model_path: str, log_root: str | Path, placement_group: Any = None,
                        bundle_offset: int = 0, image_pixels: tuple[int, int] = (0, 0),
                        hidden_states: bool = False, deterministic: bool = False, max_images: int = 8,
                        dtype: str = "float32") -> tuple[list, list[str]]:
    """`config.num_servers` Ray actors (`ServerConfig`), each launching one server of
    `config.launch` on `model_path` (server i in bundle `bundle_offset + i` of `placement_group`
    when one is given) with the run's `server_flags`; returns (actors, their URLs) once all are
    healthy."""
    import ray

    actor_class = ray.remote(InferenceServerActor)
    options: dict[str, Any] = {"num_cpus": config.cpus_per_server, "max_concurrency": 4}
    if config.gpus_per_server:
        options["num_gpus"] = config.gpus_per_server
    actors = [actor_class.options(**options, **bundle_strategy(placement_group, bundle_offset + i)).remote(
        config.launch, model_path, config.host, config.port + i if config.port else 0, list(config.launch_args),
        str(Path(log_root) / f"server_{i}"), config.startup_timeout_s, config.max_restarts,
        dict(image_pixels=image_pixels, api_key_env=config.api_key_env, admin_api_key_env=config.admin_api_key_env,
             hidden_states=hidden_states, deterministic=deterministic,
             **(dict(max_images=max_images, dtype=dtype, eager=not config.gpus_per_server)
                if config.launch == "vllm" else {})),
        getattr(config, "python", ""))
        for i in range(config.num_servers)]
    try:
        urls = ray.get([a.start.remote() for a in actors], timeout=config.startup_timeout_s + 60)
    except BaseException:
        for a in actors:
            ray.kill(a)
        raise
    return actors, urls


def check_launch_key(kind: str, host: str, api_key_env: str, api_key: str) -> None:
    """Refuse (ValueError, before anything binds) a server beyond loopback whose key variable is
    unnamed or unset on this node: without `--api-key` SGLang (and webrl serve) answer anyone."""
    if host in LOOPBACK_HOSTS or api_key:
        return
    where = (f"rollout.server.api_key_env={api_key_env!r}, which is not set on this node" if api_key_env
             else "no rollout.server.api_key_env")
    raise ValueError(f"a launched {kind} server on rollout.server.host={host!r} needs a key but has {where}: "
                     f"export the variable where the server runs, or bind 127.0.0.1")


class InferenceServerActor:
    """The Ray shell: builds the command on the actor's node (its IP and a free port there)."""

    def __init__(self, kind: str, model_path: str, host: str, port: int, launch_args: list, log_dir: str,
                 startup_timeout_s: float, max_restarts: int, flags: Optional[dict] = None, python: str = ""):
        import ray

        flags = flags or {}  # `server_flags`' keywords; keys are resolved here, on the server's node
        keys = (env_key(flags.get("api_key_env", "")), env_key(flags.get("admin_api_key_env", "")))
        check_launch_key(kind, host, flags.get("api_key_env", ""), keys[0])
        port = port or free_port("127.0.0.1" if host in ("127.0.0.1", "localhost") else host)
        address = host if host not in ("0.0.0.0", "::") else ray.util.get_node_ip_address()
        args = server_flags(kind, **flags) + list(launch_args)
        env = cwd = None
        if kind == "vllm":  # its own environment, started outside webrl's checkout (vllm_launch)
            from webrl.engines.vllm_launch import vllm_environment

            env, cwd = vllm_environment(api_key=keys[0]), log_dir
            Path(log_dir).mkdir(parents=True, exist_ok=True)
        self.server = InferenceServer(launch_command(kind, model_path, port, host, args, python, bool(keys[0])),
                                      f"http://{address}:{port}", log_dir, startup_timeout_s, max_restarts,
                                      env=env, keys=keys, cwd=cwd)

    def start(self) -> str:
        return self.server.start()

    def status(self) -> dict:
        return self.server.status()

    def stop(self) -> None:
        self.server.stop()

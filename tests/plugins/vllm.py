"""A real vLLM server for the tests, started through webrl's own launcher (`InferenceServer` with
`launch_command("vllm", ...)`), from the environment `bash run.sh` makes (.venv-vllm).

    vllm_server(model_path, pixels=(min, max), api_key="") -> InferenceServer   (healthy; `.url`;
        with api_key, guarded: every route but GET /health asks for it)

One server per (checkpoint, pixel bounds) and test process, started on first use (30-90 s on
2 cores) and stopped at the end of the run; at most `MAX_RUNNING` at once (the oldest is stopped
first: each holds about 3 GiB). No vLLM environment is a failure, not a skip: `bash run.sh test`
makes it, and CI runs that. The one exception is a disk too small to hold it: then run.sh sets
WEBRL_VLLM_SKIP to its reason (the free space it found) and every test that needs the server skips
with that reason.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

SKIP_VARIABLE = "WEBRL_VLLM_SKIP"


def skip_without_vllm() -> None:
    """Skip the calling test when run.sh could not make vLLM's environment for want of disk."""
    reason = os.environ.get(SKIP_VARIABLE, "")
    if reason:
        pytest.skip(f"no vLLM environment: {reason}")

MAX_RUNNING = 1


class VLLMServers:
    def __init__(self, root: Path):
        self.root, self.running = root, {}

    def __call__(self, model_path: str, pixels: tuple[int, int] = (0, 0), max_restarts: int = 0,
                 fresh: bool = False, max_images: int = 4, api_key: str = ""):
        from webrl.engines.vllm_launch import vllm_environment
        from webrl.engines.launcher import InferenceServer, free_port, launch_command, server_flags

        key = (str(model_path), tuple(pixels), max_restarts, api_key)
        if key in self.running and not fresh:
            return self.running[key]
        while len(self.running) >= MAX_RUNNING:
            self.running.pop(next(iter(self.running))).stop()
        port = free_port()
        log_dir = self.root / f"vllm-{port}"
        log_dir.mkdir(parents=True)
        command = launch_command("vllm", str(model_path), port, "127.0.0.1",
                                 server_flags("vllm", tuple(pixels), max_images=max_images), guarded=bool(api_key))
        server = InferenceServer(command, f"http://127.0.0.1:{port}", log_dir, startup_timeout_s=300,
                                 max_restarts=max_restarts, env=vllm_environment(api_key=api_key), cwd=str(log_dir),
                                 keys=(api_key, ""))
        server.start()
        self.running[key] = server
        return server

    def stop(self) -> None:
        for server in self.running.values():
            server.stop()
        self.running.clear()


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    skip_without_vllm()
    servers = VLLMServers(Path(tmp_path_factory.mktemp("vllm")))
    yield servers
    servers.stop()

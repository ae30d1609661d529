"""Starting a local Ray instance robustly on small, busy machines.

Ray 2.60's raylet aborts at startup when its dashboard agent has not written its port file
within a fixed window (ray-project/ray#65983); on 2 loaded cores that happens. The agent
imports faster on a second try (warm page cache), so a failed start is cleaned up and retried.
The instance keeps its temp dir where the caller says and its node on 127.0.0.1.

Loopback: `ray.init(_node_ip_address="127.0.0.1")` alone is not enough on Linux. Ray 2.60
resolves a loopback address to the machine's interface address (`services.resolve_ip_for_localhost`)
unless its cluster mode is off, so the node, its raylet and agents registered on that address and
actors talked to each other over it. `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` turns cluster mode
off (the setting Ray reads, despite its name, on every platform): set while Ray starts, the
raylet, GCS and the workers they spawn inherit it, and the driver's own copy (read when `ray`
was imported) is set for the call. Both are restored after the start, so a later
`ray.init(address=...)` in the same process joins a real cluster as before. A local instance
has one node, so nothing needs to reach it from outside this machine.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Iterator, Optional


CLUSTER_MODE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch for multi-node mode; "0" keeps a node's address on loopback (module docstring)."""


def start_local_ray(num_cpus: int, temp_dir: str, env_vars: Optional[dict[str, str]] = None,
                    attempts: int = 3, **kwargs) -> None:
    """`ray.init` a local instance on 127.0.0.1, retrying a start that timed out."""
    import ray

    os.environ.setdefault("RAY_raylet_start_wait_time_s", "120")
    os.environ.setdefault("RAY_agent_register_timeout_ms", "120000")
    last: Optional[BaseException] = None
    for attempt in range(attempts):
        try:
            with _loopback_only():
                ray.init(num_cpus=num_cpus, include_dashboard=False, _temp_dir=temp_dir,
                         _node_ip_address="127.0.0.1", runtime_env={"env_vars": dict(env_vars or {})},
                         log_to_driver=False, **kwargs)
            return
        except Exception as e:  # Ray raises a bare Exception for a node that did not start
            last = e
            ray.shutdown()
            time.sleep(2.0 * (attempt + 1))
    raise RuntimeError(f"local Ray did not start after {attempts} attempts; last error: {last}. "
                       f"Its logs are under {temp_dir}/session_latest/logs") from last


@contextmanager
def _loopback_only() -> Iterator[None]:
    """Ray's cluster mode off while the instance starts: in the environment its processes
    inherit and in the driver's `ray_constants` (read at import); both restored afterwards."""
    from ray._private import ray_constants

    before_env, before_flag = os.environ.get(CLUSTER_MODE_ENV), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[CLUSTER_MODE_ENV], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before_flag
        if before_env is None:
            os.environ.pop(CLUSTER_MODE_ENV, None)
        else:
            os.environ[CLUSTER_MODE_ENV] = before_env

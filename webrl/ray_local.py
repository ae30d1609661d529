"""Starting a local Ray instance robustly on small, busy machines.

Ray 2.60's raylet aborts at startup when its dashboard agent has not written its port file
within a fixed window (ray-project/ray#65983); on 2 loaded cores that happens. The agent
imports faster on a second try (warm page cache), so a failed start is cleaned up and retried.
The instance binds to loopback only and keeps its temp dir where the caller says.
"""
from __future__ import annotations

import os
import time
from typing import Optional


def start_local_ray(num_cpus: int, temp_dir: str, env_vars: Optional[dict[str, str]] = None,
                    attempts: int = 3, **kwargs) -> None:
    """`ray.init` a local instance on 127.0.0.1, retrying a start that timed out."""
    import ray

    os.environ.setdefault("RAY_raylet_start_wait_time_s", "120")
    os.environ.setdefault("RAY_agent_register_timeout_ms", "120000")
    last: Optional[BaseException] = None
    for attempt in range(attempts):
        try:
            ray.init(num_cpus=num_cpus, include_dashboard=False, _temp_dir=temp_dir, _node_ip_address="127.0.0.1",
                     runtime_env={"env_vars": dict(env_vars or {})}, log_to_driver=False, **kwargs)
            return
        except Exception as e:  # Ray raises a bare Exception for a node that did not start
            last = e
            ray.shutdown()
            time.sleep(2.0 * (attempt + 1))
    raise RuntimeError(f"local Ray did not start after {attempts} attempts; last error: {last}. "
                       f"Its logs are under {temp_dir}/session_latest/logs") from last

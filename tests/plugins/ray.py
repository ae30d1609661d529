"""`ray_cluster`: one local Ray instance per test module, its temp dir inside the test folder.

Started with `webrl.run.ray_local.start_local_ray` (loopback only, retried when the raylet is slow to
register on loaded cores) and the environment the actors need (no phone-home, no hub, the test
folder's extension dir).
"""
import os
import tempfile

import pytest

ACTOR_ENV = ("RAY_USAGE_STATS_ENABLED", "HF_HUB_OFFLINE", "TORCH_EXTENSIONS_DIR", "TOKENIZERS_PARALLELISM")


@pytest.fixture(scope="module")
def ray_cluster(run_dir):
    import ray

    from webrl.run.ray_local import start_local_ray

    temp = tempfile.mkdtemp(prefix="r", dir=run_dir)
    start_local_ray(4, temp, {k: os.environ[k] for k in ACTOR_ENV if k in os.environ})
    yield
    ray.shutdown()

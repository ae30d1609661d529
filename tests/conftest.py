"""Test configuration: no phone-home, every output inside the test folder, GPU tests skip without CUDA."""
import os
import tempfile

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Local test clusters need no token (Ray 2.60 otherwise writes one to ~/.ray).
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
_RUN_DIR = os.environ.setdefault("WEBRL_TEST_DIR", tempfile.mkdtemp(prefix="webrl-tests-"))
os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(_RUN_DIR, "torch_extensions"))

import pytest  # noqa: E402

pytest_plugins = ["tests.plugins.models", "tests.plugins.browser", "tests.plugins.ray", "tests.plugins.vllm"]


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    # Modules holding a slow test run first, the top-level ones (the end-to-end runs) before the
    # packages', each module's tests kept together and in order: the two xdist workers then start
    # on the longest runs and fill in with short tests, instead of ending the suite on a tail of
    # long ones (tests/test_*.py are collected last).
    slow = {item.module.__name__ for item in items if "slow" in item.keywords and item.module is not None}

    def rank(item) -> tuple[bool, int]:
        name = item.module.__name__ if item.module is not None else ""
        return name not in slow, name.count(".") if name in slow else 0
    items.sort(key=rank)
    if _cuda_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def run_dir():
    """A folder for this whole test run (Ray temp dir, extension builds, artifacts)."""
    return _RUN_DIR

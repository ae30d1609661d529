"""Session fixtures that build the tiny Qwen-VL models once per test run (owned by the models/policy work).

    tiny_qwen25vl_path / tiny_qwen3vl_path -> str   folder with model, tokenizer and processor
    tiny_model_paths -> {"qwen2.5-vl": path, "qwen3-vl": path}

Load them with `webrl.models.load_model(path)` (fp32, CPU, eval mode). Both are built with
seed 0 from the default corpus, so every test run sees the same weights and vocabulary.
Building one takes about half a second.
"""
import pytest


def _build(tmp_path_factory, family: str) -> str:
    from webrl.models import tiny_model

    return tiny_model(family, out_dir=tmp_path_factory.mktemp(f"tiny-{family}"), seed=0)


@pytest.fixture(scope="session")
def tiny_qwen25vl_path(tmp_path_factory) -> str:
    """A tiny random-init Qwen2.5-VL checkpoint folder (patch 14, factor 28)."""
    return _build(tmp_path_factory, "qwen2.5-vl")


@pytest.fixture(scope="session")
def tiny_qwen3vl_path(tmp_path_factory) -> str:
    """A tiny random-init Qwen3-VL checkpoint folder (patch 16, factor 32)."""
    return _build(tmp_path_factory, "qwen3-vl")


@pytest.fixture(scope="session")
def tiny_model_paths(tiny_qwen25vl_path, tiny_qwen3vl_path) -> dict:
    """Both tiny checkpoints by family name."""
    return {"qwen2.5-vl": tiny_qwen25vl_path, "qwen3-vl": tiny_qwen3vl_path}

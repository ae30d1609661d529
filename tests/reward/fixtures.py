"""Fixtures shared by tests/reward and tests/serve (imported by both folders' conftest.py)."""
import pytest

from webrl.serve import ServeConfig, ServerThread, create_app

from .helpers import RecordingEngine

# Small limits so the limit tests stay cheap; the tiny model's prompts fit well within them.
SMALL_LIMITS = dict(max_images=4, max_request_bytes=1_000_000, max_image_pixels=512 * 512,
                    max_prompt_tokens=1500, max_new_tokens=64, default_max_tokens=8)


@pytest.fixture(scope="session")
def tiny_engine(tiny_qwen25vl_path):
    """The tiny random-init Qwen2.5-VL behind `LocalChatEngine` (fp32, CPU)."""
    from webrl.serve import LocalChatEngine

    return LocalChatEngine.from_pretrained(tiny_qwen25vl_path, model_name="tiny-qwen25vl")


@pytest.fixture(scope="session")
def tiny_server(tiny_engine):
    """`webrl serve`'s app with the tiny model on 127.0.0.1 (real HTTP); yields (server, recorder)."""
    recorder = RecordingEngine(tiny_engine)
    server = ServerThread(create_app(recorder, ServeConfig(**SMALL_LIMITS))).start()
    yield server, recorder
    server.stop()

# Stub engines generate nothing, so judges may ask for their default reply length.
STUB_LIMITS = {**SMALL_LIMITS, "max_new_tokens": 4096, "default_max_tokens": 512}

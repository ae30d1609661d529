"""ServerEngine against a real SGLang server (GPU machines only; never run on the project's CPUs).

Start a server from a Qwen-VL checkpoint, then point the test at it:

    python -m sglang.launch_server --model-path CKPT --port 30000 &
    WEBRL_SGLANG_URL=http://127.0.0.1:30000 WEBRL_SGLANG_MODEL=CKPT pytest -m gpu tests/rollout/test_server_engine_sglang.py

Greedy decisions through SGLang must carry the same prompt ids as webrl's in-process policy and
log-probs close to the transformers model's (bf16 kernels differ: 0.05 nats), and a weight update
from a folder must be reported back as the version asked for.
"""
import os

import pytest
import torch

pytestmark = pytest.mark.gpu
URL, MODEL = os.environ.get("WEBRL_SGLANG_URL", ""), os.environ.get("WEBRL_SGLANG_MODEL", "")
needs_server = pytest.mark.skipif(not (URL and MODEL), reason="set WEBRL_SGLANG_URL and WEBRL_SGLANG_MODEL")


@needs_server
def test_sglang_greedy_decisions_match_the_in_process_policy(tmp_path):
    from tests.policy.helpers import observation
    from webrl.models import load_model, model_family
    from webrl.policy import GeneratorConfig, GeneratorPolicy, PolicyRequest, SamplingConfig
    from webrl.rollout.server_engine import ServerEngine

    model, processor = load_model(MODEL, dtype="bfloat16", device="cuda")
    config = GeneratorConfig(sampling=SamplingConfig(greedy=True, max_new_tokens=32))
    local = GeneratorPolicy(model, processor, config)
    engine = ServerEngine([URL], processor, config, model_family(model), send_pixel_bounds=False)
    requests = [PolicyRequest(observation(0, size=(640, 400))), PolicyRequest(observation(1, screenshot=None))]
    for remote, mine in zip(engine.act(requests), local.act(requests)):
        assert remote.prompt_ids == mine.prompt_ids
        n = min(len(remote.response_ids), len(mine.response_ids), 4)
        assert remote.response_ids[:n] == mine.response_ids[:n]
        assert torch.allclose(torch.tensor(remote.logprobs[:n]), torch.tensor(mine.logprobs[:n]), atol=0.05)
    model.save_pretrained(tmp_path / "v7")
    processor.save_pretrained(tmp_path / "v7")
    assert engine.load_weights_from_disk(str(tmp_path / "v7"), 7) == "7"
    engine.close()

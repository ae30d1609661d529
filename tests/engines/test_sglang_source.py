"""ServerEngine against a real SGLang server (GPU machines only; never run on the project's CPUs).

Start a server from a Qwen-VL checkpoint, then point the test at it:

    python -m sglang.launch_server --model-path CKPT --port 30000 --enable-return-hidden-states \
        --mm-process-config '{"image": {"min_pixels": 3136, "max_pixels": 1003520}}' &
    WEBRL_SGLANG_URL=http://127.0.0.1:30000 WEBRL_SGLANG_MODEL=CKPT pytest -m gpu tests/engines/test_sglang_source.py

Greedy decisions through SGLang must carry the same prompt ids as webrl's in-process policy and
log-probs close to the transformers model's (bf16 kernels differ: 0.05 nats), and a weight update
from a folder must be reported back as the version asked for. The backend's scoring (forced ids
from logprob_start_len = P-1) and hidden states (return_hidden_states) must agree with the
in-process backend's. The pixel bounds in the command are webrl's PromptConfig defaults.
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
    from webrl.engines.sglang import ServerEngine

    model, processor = load_model(MODEL, dtype="bfloat16", device="cuda")
    config = GeneratorConfig(sampling=SamplingConfig(greedy=True, max_new_tokens=32))
    local = GeneratorPolicy(model, processor, config)
    engine = ServerEngine([URL], processor, config, model_family(model))
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


@needs_server
def test_sglang_scores_forced_ids_and_returns_hidden_states_as_the_in_process_backend():
    from tests.policy.helpers import observation
    from webrl.models import load_model
    from webrl.policy import GeneratorConfig, GeneratorPolicy, PolicyRequest
    from webrl.engines.transformers import TransformersBackend
    from webrl.engines.sglang import ServerBackend

    model, processor = load_model(MODEL, dtype="bfloat16", device="cuda")
    local = GeneratorPolicy(model, processor, GeneratorConfig())
    prompt = local.builder.render(PolicyRequest(observation(0, size=(640, 400))))
    forced = processor.tokenizer("click(3)", add_special_tokens=False)["input_ids"]
    ask = local.request(prompt, forced_ids=forced, max_new_tokens=1, greedy=True, temperature=1.0, hidden_layer=-1,
                        cache_key="sglang-check")
    (mine,) = TransformersBackend(model, processor).generate([ask])
    (theirs,) = ServerBackend([URL], processor, model.config).generate([ask])
    assert torch.allclose(torch.tensor(theirs.forced_logprobs), torch.tensor(mine.forced_logprobs), atol=0.05)
    # the server returns rows after its cached prefix only: compare the rows both have
    rows = mine.hidden[theirs.hidden_start - mine.hidden_start:]
    assert rows.shape == theirs.hidden.shape and theirs.hidden.shape[0] > 0
    assert torch.nn.functional.cosine_similarity(theirs.hidden.float(), rows.float(), dim=-1).min() > 0.99

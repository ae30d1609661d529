"""vLLM's NCCL weight transfer from webrl's learner side, for real (GPU machines with two GPUs and
vLLM; never run on the project's CPUs, where tests/engines/test_vllm_guard.py covers the routes
and payloads up to the NCCL calls).

The test launches vLLM (`bash run.sh setup-vllm` makes its environment; the CUDA branch installs
`vllm==0.32.0`) on GPU 1 through webrl's launcher, joins it from GPU 0 as NCCL rank 0
(`VLLMTargets.connect`: ncclUniqueId over /init_weight_transfer_engine, vLLM's warm-up
all-reduce), perturbs the tiny model's language weights, sends them (`VLLMTargets.send`), and
checks that the server's greedy answers now equal the in-process model's on the new weights,
under the version the send stamped:

    pytest -m gpu tests/engines/test_vllm_nccl.py
"""
import os

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2,
    reason="needs two CUDA devices (NCCL refuses two ranks on one GPU)")]


def test_nccl_transfer_makes_the_server_answer_as_the_new_weights(tmp_path, tiny_qwen25vl_path):
    from tests.engines.test_sglang import generator_config, requests
    from tests.engines.test_vllm import BOUNDS, rows
    from webrl.engines.launcher import InferenceServer, free_port, launch_command, server_flags
    from webrl.engines.sglang import ServerEngine
    from webrl.engines.transformers import TransformersBackend
    from webrl.engines.vllm_launch import vllm_environment
    from webrl.learner.vllm_transfer import VLLMTargets
    from webrl.learner.weight_buckets import TensorSpec, dtype_name
    from webrl.models import load_model
    from webrl.policy import GeneratorPolicy

    port = free_port()
    env = {**vllm_environment(), "CUDA_VISIBLE_DEVICES": os.environ.get("WEBRL_TEST_VLLM_GPU", "1")}
    server = InferenceServer(launch_command("vllm", tiny_qwen25vl_path, port, "127.0.0.1",
                                            server_flags("vllm", BOUNDS, max_images=4)),
                             f"http://127.0.0.1:{port}", tmp_path / "vllm", startup_timeout_s=600, env=env,
                             cwd=str(tmp_path))
    server.start()
    try:
        device = torch.device("cuda", 0)
        model, processor = load_model(tiny_qwen25vl_path, device="cuda:0")
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "language_model" in name or name.startswith("lm_head"):
                    p.add_(0.05 * torch.randn_like(p))
        named = [(n, p) for n, p in model.named_parameters() if "language_model" in n or n.startswith("lm_head")]
        specs = [TensorSpec(n, tuple(p.shape), dtype_name(p.dtype)) for n, p in named]
        targets = VLLMTargets([server.url], timeout_s=300.0)
        comm = targets.connect(device)
        targets.weight_version = "nccl-test:v1"
        stats = targets.send(comm, named, specs)
        assert stats["buckets"] == len(specs) and stats["bytes"] == sum(s.num_bytes for s in specs)
        engine = ServerEngine([server.url], processor, generator_config(), "qwen2.5-vl", model_config=model.config,
                              protocol="vllm")
        engine.note_weights("nccl-test:v1")
        policy = GeneratorPolicy(engine.generator.backend, processor, generator_config())
        remote = engine.generator.backend.generate(rows(policy, requests(policy.builder.format)))
        local = TransformersBackend(model, processor).generate(rows(policy, requests(policy.builder.format)))
        for r, m in zip(remote, local):
            assert r.weight_version == "nccl-test:v1"
            assert r.ids == m.ids
        comm.destroy()
    finally:
        server.stop()

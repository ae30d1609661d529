"""Compiled Triton kernels on CUDA against the reference (skipped without a GPU)."""
import pytest
import torch

from tests.kernels.helpers import (
    FP32_TOL,
    Outputs,
    assert_outputs_close,
    assert_within_bound,
    bf16_rounded_grad_z_bound,
    make_inputs,
    run,
)
from webrl.kernels import TokenLogprobsConfig, token_logprobs, token_logprobs_reference

pytestmark = pytest.mark.gpu


def _on_cuda(inputs):
    return [x.cuda() for x in inputs]


def _to_cpu(out: Outputs) -> Outputs:
    return Outputs(*(t.float().cpu() for t in (out.logprobs, out.entropy, out.grad_hidden,
                                                  out.grad_weight)))


def _triton(h, w, t, temperature):
    return token_logprobs(h, w, t, temperature, config=TokenLogprobsConfig(backend="triton"))


@pytest.mark.parametrize("n, vocab", [(300, 5000), (1000, 151936 // 8 + 3)])
def test_triton_fp32_matches_reference_on_gpu(n, vocab):
    # float32 dots run in IEEE precision (no TF32), so FP32_TOL applies as on the CPU
    inputs = _on_cuda(make_inputs(n, 256, vocab, seed=11))
    got = _to_cpu(run(_triton, *inputs, temperature=0.8))
    want = _to_cpu(run(token_logprobs_reference, *inputs, temperature=0.8))
    assert_outputs_close(got, want, grad_tol=FP32_TOL)


def test_triton_bf16_within_rounding_bound_on_gpu():
    inputs = make_inputs(500, 512, 7001, dtype=torch.bfloat16, seed=12)
    got = run(_triton, *_on_cuda(inputs), temperature=1.0)
    want = run(token_logprobs_reference, *_on_cuda(inputs), temperature=1.0)
    # logits accumulate in float32 on both sides; K = 512 bf16 products summed in a different
    # order (tensor cores) keep the float32 outputs within 1e-4
    torch.testing.assert_close(got.logprobs, want.logprobs, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got.entropy, want.entropy, rtol=1e-4, atol=1e-4)
    bound_h, bound_w = bf16_rounded_grad_z_bound(*inputs, 1.0)
    assert_within_bound(got.grad_hidden.cpu(), want.grad_hidden.cpu(), bound_h)
    assert_within_bound(got.grad_weight.cpu(), want.grad_weight.cpu(), bound_w)


def test_auto_dispatch_picks_triton_on_gpu(monkeypatch):
    from webrl.kernels import resolve_backend

    monkeypatch.delenv("WEBRL_KERNEL", raising=False)
    assert resolve_backend(torch.device("cuda")) == "triton"

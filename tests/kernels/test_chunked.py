"""The chunked torch path against the naive reference (forward and backward), and invariances."""
import pytest
import torch

from tests.kernels.helpers import (
    BF16_ONE_ROUNDING_TOL,
    FP32_TOL,
    assert_outputs_close,
    make_inputs,
    reference_outputs,
    run,
)
from webrl.kernels import TokenLogprobsConfig, token_logprobs


def chunked(token_chunk, vocab_chunk):
    config = TokenLogprobsConfig(backend="torch", token_chunk=token_chunk, vocab_chunk=vocab_chunk)
    return lambda h, w, t, temperature: token_logprobs(h, w, t, temperature, config=config)


@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7])
def test_fp32_matches_reference(temperature):
    # 37 tokens in chunks of 8 (last one partial), V = 1000 in chunks of 128 (last: 104 rows)
    inputs = make_inputs(37, 24, 1000, seed=1)
    got = run(chunked(8, 128), *inputs, temperature=temperature)
    assert_outputs_close(got, reference_outputs(*inputs, temperature), grad_tol=FP32_TOL)


def test_bf16_matches_reference():
    # Both paths compute in float32 from the same bf16 values: the float32 outputs agree to
    # FP32_TOL; bf16 grads differ by at most one final rounding (BF16_ONE_ROUNDING_TOL).
    inputs = make_inputs(37, 24, 1000, dtype=torch.bfloat16, seed=2)
    got = run(chunked(8, 128), *inputs, temperature=0.7)
    assert got.grad_hidden.dtype == torch.bfloat16 and got.grad_weight.dtype == torch.bfloat16
    assert_outputs_close(got, reference_outputs(*inputs, 0.7), grad_tol=BF16_ONE_ROUNDING_TOL)


def test_chunk_sizes_do_not_change_results():
    inputs = make_inputs(29, 16, 700, seed=3)
    whole = run(chunked(10_000, 10_000), *inputs, temperature=0.9)
    for token_chunk, vocab_chunk in [(1, 7), (5, 64), (29, 699)]:
        got = run(chunked(token_chunk, vocab_chunk), *inputs, temperature=0.9)
        assert_outputs_close(got, whole, grad_tol=FP32_TOL)


def test_float64_backward_passes_gradcheck():
    # An independent check of the hand-written backward (finite differences, not autograd).
    hidden, weight, targets, _, _ = make_inputs(6, 3, 11, dtype=torch.float64, seed=4)
    hidden.requires_grad_(True)
    weight.requires_grad_(True)
    fn = chunked(4, 5)
    assert torch.autograd.gradcheck(lambda h, w: fn(h, w, targets, 0.8), (hidden, weight))


def test_temperature_equals_scaling_hidden():
    # z = h Wᵀ / τ, so (h, τ) and (h / τ, 1) give the same log-probs and entropy
    hidden, weight, targets, _, _ = make_inputs(9, 8, 300, seed=5)
    fn = chunked(4, 64)
    a = fn(hidden, weight, targets, 0.5)
    b = fn(hidden / 0.5, weight, targets, 1.0)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, **FP32_TOL)


def test_batched_shape_equals_flat():
    hidden, weight, targets, a, b = make_inputs(0, 16, 300, seed=6, batch_shape=(3, 5))
    fn = chunked(4, 64)
    batched = run(fn, hidden, weight, targets, a, b, temperature=1.0)
    flat = run(fn, hidden.reshape(15, 16), weight, targets.reshape(15), a.reshape(15),
               b.reshape(15), temperature=1.0)
    assert batched.logprobs.shape == (3, 5)
    torch.testing.assert_close(batched.logprobs.reshape(15), flat.logprobs)
    torch.testing.assert_close(batched.grad_hidden.reshape(15, 16), flat.grad_hidden)
    torch.testing.assert_close(batched.grad_weight, flat.grad_weight)


def test_mask_skips_positions_and_leaves_the_rest_unchanged():
    hidden, weight, targets, a, b = make_inputs(0, 16, 300, seed=7, batch_shape=(2, 6))
    mask = torch.tensor([[1, 1, 0, 0, 1, 0], [0, 1, 1, 1, 0, 1]], dtype=torch.bool)
    targets = torch.where(mask, targets, -100)  # masked targets are never read
    config = TokenLogprobsConfig(backend="torch", token_chunk=4, vocab_chunk=64)
    masked = run(lambda h, w, t, **k: token_logprobs(h, w, t, mask=mask, config=config),
                 hidden, weight, targets, a, b)
    full = run(chunked(4, 64), hidden, weight, targets.clamp(min=0), a * mask, b * mask,
               temperature=1.0)
    assert (masked.logprobs[~mask] == 0).all() and (masked.entropy[~mask] == 0).all()
    assert (masked.grad_hidden[~mask] == 0).all()
    torch.testing.assert_close(masked.logprobs[mask], full.logprobs[mask])
    torch.testing.assert_close(masked.entropy[mask], full.entropy[mask])
    torch.testing.assert_close(masked.grad_hidden, full.grad_hidden, **FP32_TOL)
    torch.testing.assert_close(masked.grad_weight, full.grad_weight, **FP32_TOL)


def test_logprob_only_loss_and_frozen_weight():
    # entropy unused → its incoming grad is None; weight without requires_grad → no grad_W
    hidden, weight, targets, a, _ = make_inputs(11, 8, 200, seed=8)
    h1 = hidden.clone().requires_grad_(True)
    logprobs, _ = chunked(4, 64)(h1, weight, targets, 1.0)
    (logprobs * a).sum().backward()
    h2 = hidden.clone().requires_grad_(True)
    ref_logprobs = torch.log_softmax(h2 @ weight.T, -1).gather(-1, targets[:, None]).squeeze(-1)
    (ref_logprobs * a).sum().backward()
    torch.testing.assert_close(h1.grad, h2.grad, **FP32_TOL)
    assert weight.grad is None


def test_all_masked_gives_zeros_and_zero_grads():
    hidden, weight, targets, a, b = make_inputs(0, 8, 50, seed=9, batch_shape=(2, 3))
    mask = torch.zeros(2, 3, dtype=torch.bool)
    out = run(lambda h, w, t, **k: token_logprobs(h, w, t, mask=mask), hidden, weight, targets, a, b)
    assert (out.logprobs == 0).all() and (out.entropy == 0).all()
    assert (out.grad_hidden == 0).all() and (out.grad_weight == 0).all()

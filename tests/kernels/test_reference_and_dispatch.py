"""The naive reference against hand-computed values, and backend dispatch / config checks."""
import math

import pytest
import torch

from webrl.kernels import (
    KernelBackendError,
    TokenLogprobsConfig,
    resolve_backend,
    token_logprobs,
    token_logprobs_reference,
)

# hidden [1, 0] against rows e0, e1, 0 gives logits z = [1, 0, 0]:
#   logsumexp = log(e + 2) = 1.551445;  logprob(target 0) = 1 - 1.551445 = -0.551445
#   p = [e, 1, 1] / (e + 2) = [0.576117, 0.211942, 0.211942]
#   entropy = logsumexp - Σ p z = 1.551445 - 0.576117 = 0.975328
HAND_HIDDEN = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
HAND_WEIGHT = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
HAND_TARGETS = torch.tensor([0, 2])
HAND_LOGPROBS = [1 - math.log(math.e + 2), -math.log(math.e + 2)]
HAND_ENTROPY = math.log(math.e + 2) - math.e / (math.e + 2)


def test_reference_matches_hand_computed_values():
    logprobs, entropy = token_logprobs_reference(HAND_HIDDEN, HAND_WEIGHT, HAND_TARGETS)
    torch.testing.assert_close(logprobs, torch.tensor(HAND_LOGPROBS), rtol=0, atol=1e-6)
    torch.testing.assert_close(entropy, torch.full((2,), HAND_ENTROPY), rtol=0, atol=1e-6)


def test_reference_with_temperature_two():
    # τ = 2 halves the logits: z = [0.5, 0, 0]; logsumexp = log(e^0.5 + 2) = 1.2955
    logprobs, _ = token_logprobs_reference(HAND_HIDDEN, HAND_WEIGHT, HAND_TARGETS, 2.0)
    expected = [0.5 - math.log(math.exp(0.5) + 2), -math.log(math.exp(0.5) + 2)]
    torch.testing.assert_close(logprobs, torch.tensor(expected), rtol=0, atol=1e-6)


def test_chunked_path_matches_hand_computed_values():
    config = TokenLogprobsConfig(backend="torch", token_chunk=1, vocab_chunk=2)
    logprobs, entropy = token_logprobs(HAND_HIDDEN, HAND_WEIGHT, HAND_TARGETS, config=config)
    torch.testing.assert_close(logprobs, torch.tensor(HAND_LOGPROBS), rtol=0, atol=1e-6)
    torch.testing.assert_close(entropy, torch.full((2,), HAND_ENTROPY), rtol=0, atol=1e-6)


def test_zero_hidden_gives_uniform_distribution():
    # all logits 0: logprob = -log V and entropy = log V for every token, V = 1000
    hidden, weight = torch.zeros(4, 8), torch.randn(1000, 8)
    logprobs, entropy = token_logprobs(hidden, weight, torch.tensor([0, 1, 998, 999]),
                                       config=TokenLogprobsConfig(backend="torch", vocab_chunk=300))
    torch.testing.assert_close(logprobs, torch.full((4,), -math.log(1000)), rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy, torch.full((4,), math.log(1000)), rtol=0, atol=1e-5)


def test_auto_picks_torch_on_cpu(monkeypatch):
    monkeypatch.delenv("WEBRL_KERNEL", raising=False)
    assert resolve_backend(torch.device("cpu")) == "torch"


def test_env_var_forces_backend(monkeypatch):
    monkeypatch.setenv("WEBRL_KERNEL", "torch")
    assert resolve_backend(torch.device("cuda")) == "torch"
    monkeypatch.setenv("WEBRL_KERNEL", "bogus")
    with pytest.raises(KernelBackendError, match="WEBRL_KERNEL"):
        resolve_backend(torch.device("cpu"))


def test_explicit_config_beats_env_var(monkeypatch):
    monkeypatch.setenv("WEBRL_KERNEL", "triton")
    assert resolve_backend(torch.device("cpu"), "torch") == "torch"


def test_forcing_triton_on_cpu_without_interpreter_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("WEBRL_KERNEL", "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(KernelBackendError, match="TRITON_INTERPRET=1"):
        token_logprobs(HAND_HIDDEN, HAND_WEIGHT, HAND_TARGETS)


@pytest.mark.parametrize(
    "field, value",
    [("backend", "cuda"), ("token_chunk", 0), ("block_vocab", 100), ("block_tokens", 8)],
)
def test_config_rejects_bad_values_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        TokenLogprobsConfig(**{field: value})


def test_input_errors_are_clear():
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs(HAND_HIDDEN, HAND_WEIGHT, HAND_TARGETS, 0.0)
    with pytest.raises(ValueError, match="targets must lie"):
        token_logprobs(HAND_HIDDEN, HAND_WEIGHT, torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="disagree"):
        token_logprobs(HAND_HIDDEN, HAND_WEIGHT.T.contiguous(), HAND_TARGETS)

"""Triton kernels (forward and backward) under TRITON_INTERPRET=1 against the naive reference.

The kernels run in one subprocess per group of cases (see interpret_cases.py for why); the
comparisons run here. Shapes are tiny because the interpreter is 100-300x slower than torch.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.kernels.helpers import (
    FP32_TOL,
    Outputs,
    assert_outputs_close,
    assert_within_bound,
    bf16_rounded_grad_z_bound,
    reference_outputs,
)
from tests.kernels.interpret_cases import CASES

pytest.importorskip("triton")

REPO_ROOT = Path(__file__).resolve().parents[2]
FAST = [name for name, case in CASES.items() if not case.slow]
SLOW = [name for name, case in CASES.items() if case.slow]


def _interpret(names, out_dir: Path) -> dict:
    out = out_dir / "interpreted.pt"
    env = dict(os.environ, TRITON_INTERPRET="1", WEBRL_KERNEL="triton")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.kernels.interpret_cases", str(out), *names],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(out)


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    return _interpret(FAST, tmp_path_factory.mktemp("interp"))


def _check_against_reference(name, result):
    case = CASES[name]
    inputs = result["inputs"]
    got = Outputs(**result["outputs"])
    want = reference_outputs(*inputs, case.temperature)
    if case.dtype == "float32":
        assert_outputs_close(got, want, grad_tol=FP32_TOL)
        return
    # bf16: logits accumulate in float32 on both sides, so the float32 outputs match to
    # FP32_TOL; the grads see g_z rounded to bf16 before the dots (bound in helpers.py).
    torch.testing.assert_close(got.logprobs, want.logprobs, **FP32_TOL)
    torch.testing.assert_close(got.entropy, want.entropy, **FP32_TOL)
    bound_h, bound_w = bf16_rounded_grad_z_bound(*inputs, case.temperature)
    assert_within_bound(got.grad_hidden, want.grad_hidden, bound_h)
    assert_within_bound(got.grad_weight, want.grad_weight, bound_w)


@pytest.mark.parametrize("name", FAST)
def test_triton_interpreted_matches_reference(interpreted, name):
    _check_against_reference(name, interpreted[name])


def test_vocab_splits_do_not_change_results(interpreted):
    # same inputs (same seed), forward merged from 5 splits (one empty) vs a single program
    split = Outputs(**interpreted["fp32_v1000"]["outputs"])
    single = Outputs(**interpreted["fp32_one_split"]["outputs"])
    assert_outputs_close(split, single, grad_tol=FP32_TOL)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_triton_interpreted_larger_shapes(tmp_path, name):
    _check_against_reference(name, _interpret([name], tmp_path)[name])

"""Triton sparse prefill kernel under TRITON_INTERPRET=1 equals the torch block-sparse reference.

The kernel runs in a subprocess started with the variable set (this module run as a script; see
interpret_cases.py for why a subprocess); the comparison runs here. float32 inputs, so the
kernel's "ieee" dots and the reference agree to float32 rounding (1e-5).
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from webrl.kernels.sparse_prefill import (ImageSpan, ModalityLayout, SparsePrefillConfig,
                                          block_sparse_attention_reference, build_block_plan)

REPO_ROOT = Path(__file__).resolve().parents[2]
# name: (heads, kv_heads, T, D, block, budget, layout). T and D leave partial tiles (masked lanes).
CASES = {
    # 83 = 5·16 + 3 tokens; D = 24 < BLOCK_D = 32; GQA group 2; every pattern; a 6 x 8 image
    "gqa_partial": (4, 2, 83, 24, 16, 0.3, ModalityLayout(83, (ImageSpan(10, 1, 6, 8),))),
    # two images and text between; budget 1 (all causal blocks, permuted order on grid heads)
    "two_images_full": (4, 4, 120, 32, 16, 1.0, ModalityLayout(120, (ImageSpan(8, 1, 4, 5), ImageSpan(60, 1, 5, 6)))),
    # 32-token blocks, one kv head for four query heads
    "block32_mqa": (4, 1, 100, 16, 32, 0.25, ModalityLayout(100, (ImageSpan(20, 1, 6, 8),))),
}
PATTERNS = ["dense", "a_shape", "vertical_slash", "grid"]


def case_inputs(name):
    heads, kv_heads, T, D, block, budget, layout = CASES[name]
    g = torch.Generator().manual_seed(len(name))
    q, k, v = (torch.randn(h, T, D, generator=g) for h in (heads, kv_heads, kv_heads))
    plan = build_block_plan(q, k, layout, PATTERNS[:heads], SparsePrefillConfig(block_size=block, budget=budget))
    return q, k, v, plan


def _interpret(out: Path) -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1", WEBRL_KERNEL="triton")
    proc = subprocess.run([sys.executable, "-m", "tests.kernels.test_sparse_prefill_triton", str(out)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(out)


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    pytest.importorskip("triton")
    return _interpret(tmp_path_factory.mktemp("sparse_interp") / "out.pt")


@pytest.mark.slow  # ~15 s: the interpreter subprocess
@pytest.mark.parametrize("name", list(CASES))
def test_triton_interpreter_equals_reference(name, interpreted):
    q, k, v, plan = case_inputs(name)
    assert not plan.dense
    want = block_sparse_attention_reference(q, k, v, plan)
    torch.testing.assert_close(interpreted[name], want, atol=1e-5, rtol=1e-5)


def test_block_lists_by_hand():
    pytest.importorskip("triton")
    from webrl.kernels.sparse_prefill import block_lists

    mask = torch.tensor([[[True, False, False], [True, True, False], [False, True, True]]])
    index, count = block_lists(mask)
    assert count.tolist() == [[1, 2, 2]]
    assert index[0, 0, :1].tolist() == [0] and index[0, 1].tolist() == [0, 1] and index[0, 2].tolist() == [1, 2]


if __name__ == "__main__":  # the interpreter subprocess
    from webrl.kernels.sparse_prefill import sparse_prefill_attention

    results = {}
    for case in CASES:
        q, k, v, plan = case_inputs(case)
        results[case] = sparse_prefill_attention(q, k, v, plan)  # backend "auto" -> $WEBRL_KERNEL=triton
    torch.save(results, sys.argv[1])

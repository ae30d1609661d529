"""Runs the Triton kernels under TRITON_INTERPRET=1 in a fresh process and saves the results.

Why a subprocess: Triton decides interpreter-or-compiler when a kernel is decorated (at
import of webrl.kernels.triton_logprobs), reading TRITON_INTERPRET then. Setting the variable
in a conftest would leak into every other test in the pytest process (and would turn real
GPU runs into interpreter runs), so test_triton_interpret.py starts this module once with the
variable set and compares what it saves against the reference in the parent.

    TRITON_INTERPRET=1 WEBRL_KERNEL=triton python -m tests.kernels.interpret_cases OUT.pt CASE...

The config leaves backend="auto", so the Triton path is chosen through $WEBRL_KERNEL (forcing
Triton on CPU tensors, which the dispatcher allows only under the interpreter).
"""
from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class Case:
    """One interpreter run; tiles are small so V, N and H leave partial (masked) tiles."""

    n: int
    hidden: int
    vocab: int
    temperature: float
    dtype: str = "float32"
    block_tokens: int = 16
    block_vocab: int = 128
    block_hidden: int = 16
    vocab_splits: int = 5
    seed: int = 0
    slow: bool = False


CASES = {
    # 1000 = 7·128 + 104: last vocab tile has 24 masked lanes; 7 of 16 token lanes live;
    # 8 tiles over 5 splits of 2 tiles → split 4 is empty (exercises the merge of empty splits)
    "fp32_v1000": Case(n=7, hidden=32, vocab=1000, temperature=0.7),
    "fp32_one_split": Case(n=7, hidden=32, vocab=1000, temperature=0.7, vocab_splits=1),
    "bf16_v1000": Case(n=7, hidden=32, vocab=1000, temperature=0.7, dtype="bfloat16", seed=1),
    # H = 40 is not a multiple of BLOCK_H = 16: masked hidden lanes in every dot
    "fp32_h40_t1.3": Case(n=5, hidden=40, vocab=300, temperature=1.3, seed=2),
    # several token blocks (40 = 2·16 + 8) and tiles of 64 lanes (2000 = 31·64 + 16)
    "fp32_multi_block": Case(n=40, hidden=48, vocab=2000, temperature=1.0, block_vocab=64,
                             vocab_splits=4, seed=3, slow=True),
}


def run_case(case: Case) -> dict:
    from tests.kernels.helpers import make_inputs, run
    from webrl.kernels import TokenLogprobsConfig, token_logprobs

    config = TokenLogprobsConfig(block_tokens=case.block_tokens,
                                 block_vocab=case.block_vocab, block_hidden=case.block_hidden,
                                 vocab_splits=case.vocab_splits)
    inputs = make_inputs(case.n, case.hidden, case.vocab, getattr(torch, case.dtype), case.seed)
    out = run(lambda h, w, t, temperature: token_logprobs(h, w, t, temperature, config=config),
              *inputs, temperature=case.temperature)
    return {"inputs": inputs, "outputs": asdict(out)}


def main(path: str, names: list[str]) -> None:
    if os.environ.get("TRITON_INTERPRET") != "1" or os.environ.get("WEBRL_KERNEL") != "triton":
        raise SystemExit("run with TRITON_INTERPRET=1 WEBRL_KERNEL=triton")
    torch.save({name: run_case(CASES[name]) for name in names}, path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])

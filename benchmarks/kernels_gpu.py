"""GPU benchmark: token log-probs + entropy, forward+backward, at Qwen-VL lm_head shapes.

    python benchmarks/kernels_gpu.py                    # all shapes, bf16
    python benchmarks/kernels_gpu.py --tokens 4096 --models qwen2.5-vl-3b --json out.json

Variants (each gets hidden (N, H) and lm_head weight (V, H) in bf16, both requiring grad):
    naive          logits = (h @ Wᵀ).float(), log_softmax, gather, entropy: what RL code
                   usually writes; keeps several (N, V) float32 tensors for backward
    chunked_torch  webrl.kernels torch path (TokenLogprobsConfig(backend="torch"))
    triton         webrl.kernels Triton kernels (TokenLogprobsConfig(backend="triton"))
    liger          Liger-Kernel's fused linear cross-entropy (reduction="sum"), if importable.
                   It returns only Σ -logprob (no entropy), so it does less work than the rest.
Loss: Σ a·logprobs + Σ b·entropy with fixed random a, b (liger: Σ logprobs).

Before timing, every variant is checked against `token_logprobs_reference` (float32 math on
the same bf16 values) on the first 1024 tokens of each shape; a variant that fails its
tolerance is reported as FAILED and not timed. Tolerances:
    chunked_torch, triton: logits accumulate in float32 → log-probs and entropy within 2e-3
        absolute (H = 2048..2560 bf16 products per logit, summed in another order);
        grads within 2^-6 of the largest reference grad (bf16 rounding of g_z and of the grads)
    naive, liger: logits are rounded to bf16 (|Δz| ≤ 2^-9 |z|, ~0.06 at |z| = 30) → outputs
        within 0.25 (liger: Σ logprobs per token); grads within 2^-4 of the largest one
Memory: torch.cuda.max_memory_allocated() during forward+backward minus what was allocated
before (inputs); "working" also subtracts the returned gradients (grad_h, grad_W), which
every variant must allocate. Time: CUDA events, median of --iters after --warmup calls.
Exits with status 0 and a message when CUDA is unavailable.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

from webrl.kernels import TokenLogprobsConfig, token_logprobs, token_logprobs_reference

VOCAB = 151936
MODELS = {"qwen2.5-vl-3b": 2048, "qwen3-vl-4b": 2560}
GIB = 1024**3
CHECK_TOKENS = 1024
TOLERANCES = {  # (outputs absolute, grads relative to the largest reference grad)
    "chunked_torch": (2e-3, 2**-6), "triton": (2e-3, 2**-6),
    "naive": (0.25, 2**-4), "liger": (0.25, 2**-4),
}


def naive_logprobs(hidden, weight, targets):
    logits = (hidden @ weight.T).float()  # (N, V) float32, from bf16-rounded logits
    log_probs = torch.log_softmax(logits, dim=-1)
    logprobs = log_probs.gather(-1, targets[:, None]).squeeze(-1)
    return logprobs, -(log_probs.exp() * log_probs).sum(-1)


def _webrl(backend):
    config = TokenLogprobsConfig(backend=backend)
    return lambda hidden, weight, targets: token_logprobs(hidden, weight, targets, config=config)


def _liger_sum_logprobs():
    """(hidden, weight, targets) -> Σ logprobs via Liger's fused linear cross-entropy, or None
    when Liger is not installed."""
    try:
        from liger_kernel.transformers.fused_linear_cross_entropy import (
            LigerFusedLinearCrossEntropyLoss,
        )
    except ImportError:
        return None
    loss = LigerFusedLinearCrossEntropyLoss(reduction="sum")
    return lambda hidden, weight, targets: -loss(weight, hidden, targets)


def _loss_fns() -> dict:
    """{name: (outputs_fn or None, loss(hidden, weight, targets, a, b) -> scalar)}."""
    def weighted(fn):
        def loss(hidden, weight, targets, a, b):
            logprobs, entropy = fn(hidden, weight, targets)
            return (logprobs * a).sum() + (entropy * b).sum()
        return loss

    outputs = {"naive": naive_logprobs, "chunked_torch": _webrl("torch"), "triton": _webrl("triton")}
    fns = {name: (fn, weighted(fn)) for name, fn in outputs.items()}
    liger = _liger_sum_logprobs()
    if liger is not None:
        fns["liger"] = (None, lambda hidden, weight, targets, a, b: liger(hidden, weight, targets))
    return fns


def make_inputs(tokens, hidden_size, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    hidden = torch.randn(tokens, hidden_size, device="cuda", generator=gen).bfloat16()
    weight = (torch.randn(VOCAB, hidden_size, device="cuda", generator=gen)
              * (3 / hidden_size**0.5)).bfloat16()
    targets = torch.randint(0, VOCAB, (tokens,), device="cuda", generator=gen)
    a, b = torch.randn(2, tokens, device="cuda", generator=gen)
    return hidden.requires_grad_(True), weight.requires_grad_(True), targets, a, b


def _grads(loss_fn, hidden, weight, targets, a, b):
    hidden.grad = weight.grad = None
    loss_fn(hidden, weight, targets, a, b).backward()
    return hidden.grad.float(), weight.grad.float()


def _reference_loss(hidden, weight, targets, a, b):
    logprobs, entropy = token_logprobs_reference(hidden, weight, targets)
    return (logprobs * a).sum() + (entropy * b).sum()


def check(name, outputs_fn, loss_fn, hidden_size) -> dict:
    """Outputs and grads vs the float32 reference on CHECK_TOKENS tokens; adds 'ok'.
    Liger (no per-token outputs) is checked on Σ logprobs per token and its grads."""
    hidden, weight, targets, a, b = make_inputs(CHECK_TOKENS, hidden_size, seed=1)
    out_tol, grad_tol = TOLERANCES[name]
    with torch.no_grad():
        ref_logprobs, ref_entropy = token_logprobs_reference(hidden, weight, targets)
    if outputs_fn is None:
        a, b = torch.ones_like(a), torch.zeros_like(b)  # loss = Σ logprobs
        with torch.no_grad():
            got = loss_fn(hidden, weight, targets, a, b).float()
        out_diff = ((got - ref_logprobs.sum()).abs() / CHECK_TOKENS).item()
    else:
        with torch.no_grad():
            logprobs, entropy = outputs_fn(hidden, weight, targets)
        out_diff = max((logprobs - ref_logprobs).abs().max().item(),
                       (entropy - ref_entropy).abs().max().item())
    want = _grads(_reference_loss, hidden, weight, targets, a, b)
    got_grads = _grads(loss_fn, hidden, weight, targets, a, b)
    grad_rel = max(((g - w).abs().max() / w.abs().max()).item() for g, w in zip(got_grads, want))
    return {"output_diff": out_diff, "grad_rel_diff": grad_rel,
            "ok": out_diff <= out_tol and grad_rel <= grad_tol}


def measure(loss_fn, hidden, weight, targets, a, b, warmup, iters) -> dict:
    """Median forward and forward+backward time (ms) and peak memory above the inputs."""
    for _ in range(warmup):
        _grads(loss_fn, hidden, weight, targets, a, b)
    hidden.grad = weight.grad = None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    forward_ms, total_ms = [], []
    for _ in range(iters):
        hidden.grad = weight.grad = None
        start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        start.record()
        value = loss_fn(hidden, weight, targets, a, b)
        mid.record()
        value.backward()
        end.record()
        torch.cuda.synchronize()
        forward_ms.append(start.elapsed_time(mid))
        total_ms.append(start.elapsed_time(end))
    extra = torch.cuda.max_memory_allocated() - base
    grads = sum(t.numel() * t.element_size() for t in (hidden, weight))
    return {"forward_ms": statistics.median(forward_ms), "fwd_bwd_ms": statistics.median(total_ms),
            "extra_gib": extra / GIB, "working_gib": (extra - grads) / GIB}


def run_shape(model, tokens, fns, args) -> list[dict]:
    hidden_size = MODELS[model]
    rows = []
    for name, (outputs_fn, loss_fn) in fns.items():
        row = {"model": model, "H": hidden_size, "N": tokens, "variant": name}
        try:
            row.update(check(name, outputs_fn, loss_fn, hidden_size))
            if row["ok"]:
                inputs = make_inputs(tokens, hidden_size)
                row.update(measure(loss_fn, *inputs, args.warmup, args.iters))
                del inputs
        except torch.cuda.OutOfMemoryError:
            row["error"] = "OOM"
        except Exception as error:  # one variant failing must not hide the others' figures
            row["error"] = f"{type(error).__name__}: {error}"[:200]
        torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def print_table(rows) -> None:
    print("\n| model | N | variant | check | fwd ms | fwd+bwd ms | extra GiB | working GiB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        status = r.get("error") or ("ok" if r.get("ok") else "FAILED")
        nums = [f"{r[k]:.2f}" if k in r else "-" for k in ("forward_ms", "fwd_bwd_ms",
                                                             "extra_gib", "working_gib")]
        print(f"| {r['model']} | {r['N']} | {r['variant']} | {status} | " + " | ".join(nums) + " |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--tokens", nargs="+", type=int, default=[4096, 16384])
    parser.add_argument("--variants", nargs="+", default=None, help="subset of variant names")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("kernels_gpu.py: no CUDA device available; nothing to benchmark (CPU figures: "
              "benchmarks/kernels.py)")
        return 0
    fns = _loss_fns()
    if args.variants:
        fns = {k: v for k, v in fns.items() if k in args.variants}
    print(f"device: {torch.cuda.get_device_name()}  variants: {list(fns)}", flush=True)
    rows = [row for model in args.models for tokens in args.tokens
            for row in run_shape(model, tokens, fns, args)]
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""CPU benchmark: peak memory and time of naive vs chunked token log-probs, forward + backward.

    .venv/bin/python benchmarks/kernels.py                      # 1024 then 4096 tokens
    .venv/bin/python benchmarks/kernels.py --shapes 4096:2048:151936 --dtype float32

Each variant runs in its own subprocess, so one variant's freed memory or allocator state
cannot hide in another's figure. Memory is the process's resident-set high-water mark
(VmHWM in /proc/self/status), reset right before the measured call by writing 5 to
/proc/self/clear_refs, once the inputs are built. tracemalloc cannot see torch's C++
allocations, and torch's CPU allocator does not cache, so RSS is what the machine pays.
Reported per variant:
    inputs     RSS before the call (interpreter + torch + hidden, weight, targets)
    extra      peak RSS during forward+backward minus `inputs`
    working    extra minus the gradient tensors every method must return (grad_hidden,
               grad_weight): the memory the log-prob computation itself costs
The loss is Σ a·logprobs + Σ b·entropy with fixed random a, b, so both gradient paths run.
Each variant saves its outputs; the parent prints the largest absolute differences.
Timings are one call each (the large shape takes minutes on 2 cores); they are wall-clock
on a shared machine, so read them as rough.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

VARIANTS = ("naive", "chunked")
GIB = 1024**3


@dataclass(frozen=True)
class Shape:
    """One benchmark shape: N tokens, H hidden, V vocabulary."""

    tokens: int
    hidden: int
    vocab: int

    @classmethod
    def parse(cls, text: str) -> "Shape":
        tokens, hidden, vocab = (int(x) for x in text.split(":"))
        return cls(tokens, hidden, vocab)

    def __str__(self) -> str:
        return f"N={self.tokens} H={self.hidden} V={self.vocab}"


def _proc_status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _mem_available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def make_inputs(shape: Shape, dtype: torch.dtype, seed: int = 0):
    """hidden (N, H), weight (V, H) with logits std ≈ 3, targets (N,), upstream a, b (N,)."""
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(shape.tokens, shape.hidden, generator=gen).to(dtype)
    weight = torch.randn(shape.vocab, shape.hidden, generator=gen).mul_(3 / shape.hidden**0.5)
    targets = torch.randint(0, shape.vocab, (shape.tokens,), generator=gen)
    upstream = torch.randn(2, shape.tokens, generator=gen)
    return hidden, weight.to(dtype), targets, upstream[0], upstream[1]


def _variant_fn(variant: str, token_chunk: int, vocab_chunk: int):
    from webrl.kernels import TokenLogprobsConfig, token_logprobs, token_logprobs_reference

    if variant == "naive":
        return token_logprobs_reference
    config = TokenLogprobsConfig(backend="torch", token_chunk=token_chunk, vocab_chunk=vocab_chunk)
    return lambda h, w, t, temperature: token_logprobs(h, w, t, temperature, config=config)


def worker(args) -> None:
    """Child process: one variant, one forward+backward; prints a JSON line, saves outputs."""
    shape, dtype = Shape.parse(args.worker_shape), getattr(torch, args.dtype)
    fn = _variant_fn(args.worker, args.token_chunk, args.vocab_chunk)
    hidden, weight, targets, a, b = make_inputs(shape, dtype)
    hidden.requires_grad_(True)
    weight.requires_grad_(True)
    reset_ok = _reset_peak_rss()
    inputs_kib = _proc_status_kib("VmRSS")
    start = time.perf_counter()
    logprobs, entropy = fn(hidden, weight, targets, temperature=args.temperature)
    forward_s = time.perf_counter() - start
    ((logprobs * a).sum() + (entropy * b).sum()).backward()
    total_s = time.perf_counter() - start
    peak_kib = _proc_status_kib("VmHWM")
    grads_bytes = sum(t.grad.numel() * t.grad.element_size() for t in (hidden, weight))
    torch.save({"logprobs": logprobs.detach(), "entropy": entropy.detach(),
                "grad_hidden": hidden.grad, "grad_weight": weight.grad}, args.worker_out)
    print(json.dumps({
        "variant": args.worker, "forward_s": forward_s, "forward_backward_s": total_s,
        "inputs_gib": inputs_kib * 1024 / GIB, "peak_gib": peak_kib * 1024 / GIB,
        "extra_gib": (peak_kib - inputs_kib) * 1024 / GIB,
        "working_gib": ((peak_kib - inputs_kib) * 1024 - grads_bytes) / GIB,
        "peak_reset": reset_ok,
    }))


def _run_variant(variant: str, shape: Shape, args, out_dir: Path) -> dict:
    out = out_dir / f"{variant}.pt"
    cmd = [sys.executable, __file__, "--worker", variant, "--worker-shape",
           f"{shape.tokens}:{shape.hidden}:{shape.vocab}", "--worker-out", str(out),
           "--dtype", args.dtype, "--temperature", str(args.temperature),
           "--token-chunk", str(args.token_chunk), "--vocab-chunk", str(args.vocab_chunk)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{variant} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["outputs"] = out
    return result


def max_abs_diffs(a_path: Path, b_path: Path) -> dict[str, tuple[float, float]]:
    """{name: (max |a - b|, max |b|)} for each saved output."""
    a, b = torch.load(a_path), torch.load(b_path)
    return {name: ((a[name].float() - b[name].float()).abs().max().item(),
                   b[name].float().abs().max().item()) for name in a}


def _naive_fits(shape: Shape, measured_factor: float | None) -> tuple[bool, str]:
    """Naive keeps several (N, V) float32 tensors; refuse to start if it cannot fit."""
    factor = measured_factor or 6.0
    need = factor * shape.tokens * shape.vocab * 4 + 3 * shape.vocab * shape.hidden * 4
    have = _mem_available_bytes() - 2 * GIB
    message = f"naive needs ≈{need / GIB:.1f} GiB ({factor:.1f} × N·V float32 + weights), {have / GIB:.1f} GiB free"
    return need < have, message


def _print_table(rows: list[dict]) -> None:
    print("\n| shape | variant | fwd s | fwd+bwd s | inputs GiB | peak GiB | extra GiB | working GiB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['shape']} | {r['variant']} | {r['forward_s']:.1f} | {r['forward_backward_s']:.1f} | "
              f"{r['inputs_gib']:.2f} | {r['peak_gib']:.2f} | {r['extra_gib']:.2f} | {r['working_gib']:.3f} |")


def main(args) -> None:
    rows, factor = [], None
    for shape in [Shape.parse(s) for s in args.shapes.split(",")]:
        fits, message = _naive_fits(shape, factor)
        print(f"\n== {shape} {args.dtype} τ={args.temperature}: {message}", flush=True)
        if not fits:
            print("   skipped: does not fit in this machine's free memory")
            continue
        with tempfile.TemporaryDirectory(prefix="webrl-bench-", dir=args.tmp_dir) as tmp:
            results = {}
            for variant in VARIANTS:
                results[variant] = r = _run_variant(variant, shape, args, Path(tmp))
                r["shape"] = str(shape)
                rows.append(r)
                print(f"   {variant}: {json.dumps({k: v for k, v in r.items() if k != 'outputs'})}", flush=True)
            naive, chunked = results["naive"], results["chunked"]
            factor = naive["working_gib"] * GIB / (shape.tokens * shape.vocab * 4)
            for name, (diff, scale) in max_abs_diffs(chunked["outputs"], naive["outputs"]).items():
                print(f"   max |chunked - naive| {name:12s} {diff:.3g}  (max |naive| {scale:.3g})")
            for key in ("peak_gib", "extra_gib", "working_gib"):
                print(f"   naive / chunked {key:12s} {naive[key] / chunked[key]:.1f}x")
    _print_table(rows)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="1024:2048:151936,4096:2048:151936",
                        help="comma-separated N:H:V, run in order")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--token-chunk", type=int, default=1024)
    parser.add_argument("--vocab-chunk", type=int, default=8192)
    parser.add_argument("--tmp-dir", default=None, help="where variants save outputs to compare")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--worker-shape", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    parsed = parse_args()
    if parsed.worker:
        worker(parsed)
    else:
        main(parsed)

"""GPU check for a bare single-GPU machine: the 4B recipe's model, learner step, generation and
log-prob kernel, measured once and written to one JSON file.

On the GPU machine, from the repo root (webrl need not be installed; the source tree is enough):

    python benchmarks/gpu_check.py --out $OUT/gpu_check.json     # meant to finish within 8 min on one H200
    python benchmarks/gpu_check.py --tiny --out /tmp/gpu_check.json   # tiny shapes on CPU (the test)

Needs only torch, transformers (>= 4.57, for Qwen3-VL) and triton; no Ray, DeepSpeed, Playwright
or network, and no weights: the model is built from a config written here with the public
Qwen3-VL-4B shapes (Qwen2.5-VL-3B if this transformers has no Qwen3-VL; `model.family` says which)
and random weights in bf16. When `webrl` is not importable, the repo root goes on sys.path and
`webrl.algos` / `webrl.kernels` are loaded from the folders setup.cfg's `package_dir` maps them to.

Sections (each catches its own exception into {"error": ...} and records its wall seconds):
    model     parameter count and bytes of the real-shape model.
    learner   one micro-batch at the preset's `learner.batching.token_budget` (rows x tokens),
              text only (no images), through the learner's path: backbone -> final hidden states
              -> `webrl.kernels.token_logprobs` on the response -> `webrl.algos.OBJECTIVES[objective]`
              -> backward; with activation checkpointing and without (an out-of-memory run is
              recorded as {"fits": false}). old_logprobs are the step's own detached log-probs
              (ratio 1, the first mini-batch of an on-policy update); advantages are +-1 per row.
    generate  HF `generate` at batch 16, 256 prompt + 128 sampled tokens: plain, with
              `output_logits=True, return_dict_in_generate=True`, and with webrl's rollout path
              (`SampledLogprobs`: the sampled tokens' log-probs, no logits kept).
    kernel    `token_logprobs` Triton vs chunked torch at the lm_head shape: forward+backward
              seconds and max |difference| of log-probs, entropy and gradients. Under --tiny it
              runs only when TRITON_INTERPRET=1 is set (Triton's CPU interpreter), else is skipped.
    sparse_prefill  one attention layer at 8K / 16K / 32K tokens in the recipe's screenshot layout:
              the Triton block-sparse prefill (`webrl.kernels.triton_sparse_prefill`) at budgets
              0.1 and 0.25 vs dense SDPA: seconds, mask-building seconds, FLOPs saved, and max
              |Triton - torch reference| on 4 heads. Skipped without CUDA (also under --tiny).
Memory figures are `torch.cuda.max_memory_allocated()` (null on CPU). Without CUDA and without
--tiny the script prints a message and exits 0.
"""
from __future__ import annotations

import argparse
import ast
import configparser
import importlib.util
import json
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PRESETS = sorted(p.stem for p in (REPO_ROOT / "webrl" / "configs").glob("*.yaml"))


def _import_webrl_from_source() -> None:
    """Make `webrl.algos` and `webrl.kernels` importable from a source tree without an install."""
    if importlib.util.find_spec("webrl") is None:
        sys.path.insert(0, str(REPO_ROOT))
    import webrl

    parser = configparser.ConfigParser()
    parser.read(REPO_ROOT / "setup.cfg")
    mapping = {}  # "webrl.kernels = kernels" lines: package -> folder
    for line in parser["options"]["package_dir"].splitlines():
        if "=" in line:
            package, folder = (part.strip() for part in line.split("="))
            mapping[package] = folder
    for package in ("webrl.algos", "webrl.kernels"):
        if importlib.util.find_spec(package) is not None:
            continue
        folder = REPO_ROOT / mapping[package]
        spec = importlib.util.spec_from_file_location(package, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[package] = module
        spec.loader.exec_module(module)
        setattr(webrl, package.split(".")[1], module)


_import_webrl_from_source()

import torch  # noqa: E402
import transformers  # noqa: E402

from webrl.algos import OBJECTIVES, GRPOConfig, LearnerOutputs, PolicyLossConfig  # noqa: E402
from webrl.kernels import TokenLogprobsConfig, resolve_backend, token_logprobs  # noqa: E402
from webrl.types import Batch  # noqa: E402

QWEN_VL_TOKENS = dict(image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
                      vision_end_token_id=151653)
# Public checkpoint shapes (config.json of Qwen/Qwen3-VL-4B-Instruct and Qwen/Qwen2.5-VL-3B-Instruct).
QWEN3_VL_4B = dict(
    text=dict(hidden_size=2560, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
              intermediate_size=9728, vocab_size=151936, max_position_embeddings=262144, rms_norm_eps=1e-6),
    vision=dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16, out_hidden_size=2560,
                patch_size=16, spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=2304,
                deepstack_visual_indexes=[5, 11, 17], hidden_act="gelu_pytorch_tanh"),
    rope=(5e6, [24, 20, 20]))
QWEN2_5_VL_3B = dict(
    text=dict(hidden_size=2048, num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2,
              intermediate_size=11008, vocab_size=151936, max_position_embeddings=128000, rms_norm_eps=1e-6),
    vision=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                fullatt_block_indexes=[7, 15, 23, 31]),
    rope=(1e6, [16, 24, 24]))
TINY = dict(  # same families, 2 layers, hidden 64: the suite's CPU run
    text=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              intermediate_size=128, vocab_size=1024, max_position_embeddings=4096, rms_norm_eps=1e-6),
    vision=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=16,
                spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=64,
                deepstack_visual_indexes=[0], hidden_act="gelu_pytorch_tanh"),
    rope=(5e6, [4, 2, 2]))


@dataclass
class Shapes:
    """Sizes of one run. Notation: B rows, T tokens per row, N tokens, H hidden, V vocabulary."""

    dtype: torch.dtype
    token_budget: int
    """Learner micro-batch tokens (B x T), from the preset."""
    rows: int = 4
    """Learner B: turn samples per micro-batch (T = token_budget // rows)."""
    response_tokens: int = 1024
    """Trained (loss-mask) tokens at the end of each learner row."""
    generate_batch: int = 16
    prompt_tokens: int = 256
    new_tokens: int = 128
    kernel_tokens: int = 8192
    timing_iters: int = 3


def preset_settings(preset: str) -> dict:
    """token_budget, objective, temperature, GRPO loss and response length of a preset YAML. What
    the preset leaves out is the default of webrl's config dataclasses, read from their source so
    that no module importing DeepSpeed or Ray is imported."""
    import yaml  # a dependency of transformers

    if preset not in PRESETS:
        raise ValueError(f"--preset must be one of {PRESETS}, got {preset!r}")
    data = yaml.safe_load((REPO_ROOT / "webrl" / "configs" / f"{preset}.yaml").read_text()) or {}
    learner, sampling = data.get("learner") or {}, (data.get("generator") or {}).get("sampling") or {}
    learner_source = REPO_ROOT / "webrl" / "learner" / "config.py"
    generator_source = REPO_ROOT / "webrl" / "policy" / "generator.py"
    budget = (learner.get("batching") or {}).get("token_budget")
    source = f"webrl/configs/{preset}.yaml learner.batching.token_budget"
    if budget is None:
        budget = _dataclass_default(learner_source, "BatchingConfig", "token_budget")
        source = "webrl.learner.config.BatchingConfig.token_budget (the preset does not set it)"
    objective = learner.get("objective") or _dataclass_default(learner_source, "LearnerConfig", "objective")
    if objective != "grpo":
        raise ValueError(f"{preset}: learner.objective is {objective!r}; gpu_check runs 'grpo' (the recipe's) only")
    temperature = sampling.get("temperature", _dataclass_default(generator_source, "SamplingConfig", "temperature"))
    return {"preset": preset, "token_budget": int(budget), "token_budget_source": source, "objective": objective,
            "temperature": float(temperature), "loss": learner.get("loss") or {},
            "response_tokens": int(sampling.get("max_new_tokens") or
                                   _dataclass_default(generator_source, "SamplingConfig", "max_new_tokens"))}


def _dataclass_default(path: Path, class_name: str, field_name: str):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and getattr(item.target, "id", None) == field_name:
                    return ast.literal_eval(item.value)
    raise ValueError(f"{path}: no default for {class_name}.{field_name}")


# -- helpers ----------------------------------------------------------------------------------

def _triton_version() -> str | None:
    return importlib.import_module("triton").__version__ if importlib.util.find_spec("triton") else None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _reset_peak(device: torch.device) -> int | None:
    """Start a peak-memory window; returns the bytes allocated now (None on CPU)."""
    if device.type != "cuda":
        return None
    _sync(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def _peak(device: torch.device) -> int | None:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def _timed(section):
    """Run section() -> dict; add its wall seconds; turn an exception into {"error": ...}."""
    start = time.perf_counter()
    try:
        result = section()
    except Exception as error:  # one section failing must not lose the others' figures
        result = {"error": f"{type(error).__name__}: {error}"[:2000]}
    result["seconds"] = time.perf_counter() - start
    return result


@contextmanager
def _default_dtype(dtype: torch.dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _set_checkpointing(model, on: bool) -> None:
    """transformers >= 5 names it activation checkpointing; older versions gradient checkpointing."""
    prefix = "activation" if hasattr(model, "activation_checkpointing_enable") else "gradient"
    if on:
        getattr(model, f"{prefix}_checkpointing_enable")({"use_reentrant": False})
    else:
        getattr(model, f"{prefix}_checkpointing_disable")()


# -- model ------------------------------------------------------------------------------------

def build_model(tiny: bool, device: torch.device, dtype: torch.dtype):
    """(model, info): a random-init Qwen3-VL (or Qwen2.5-VL) ForConditionalGeneration in `dtype`."""
    if hasattr(transformers, "Qwen3VLConfig"):
        family, shapes = "qwen3-vl", TINY if tiny else QWEN3_VL_4B
        config_cls, model_cls = transformers.Qwen3VLConfig, transformers.Qwen3VLForConditionalGeneration
    elif tiny:
        raise RuntimeError(f"transformers {transformers.__version__} has no Qwen3-VL; --tiny needs >= 4.57")
    else:
        family, shapes = "qwen2.5-vl", QWEN2_5_VL_3B
        config_cls, model_cls = transformers.Qwen2_5_VLConfig, transformers.Qwen2_5_VLForConditionalGeneration
    theta, section = shapes["rope"]
    rope = {"rope_type": "default", "mrope_section": section}
    if family == "qwen3-vl":
        rope["mrope_interleaved"] = True
    text = dict(shapes["text"], hidden_act="silu", tie_word_embeddings=True)
    if int(transformers.__version__.split(".")[0]) >= 5:
        text["rope_parameters"] = dict(rope, rope_theta=theta)
    else:
        text.update(rope_scaling=rope, rope_theta=theta)
    config = config_cls(text_config=text, vision_config=shapes["vision"], tie_word_embeddings=True,
                        **QWEN_VL_TOKENS)
    torch.manual_seed(0)
    with torch.device(device), _default_dtype(dtype):  # weights born in dtype on the device: no fp32 copy
        model = model_cls(config)

    def count(module):
        return sum(p.numel() for p in module.parameters())

    params = list(model.parameters())  # tied lm_head / embedding counted once
    info = {"family": family, "class": model_cls.__name__,
            "shapes": "tiny" if tiny else ("Qwen3-VL-4B" if family == "qwen3-vl" else
                                           "Qwen2.5-VL-3B (this transformers has no Qwen3-VL)"),
            "config": {"text": shapes["text"], "vision": shapes["vision"]},
            "dtype": sorted({str(p.dtype).removeprefix("torch.") for p in params}),
            "parameters": sum(p.numel() for p in params),
            "parameter_bytes": sum(p.numel() * p.element_size() for p in params),
            "language_model_parameters": count(model.model.language_model),
            "vision_parameters": count(model.model.visual),
            "tied_lm_head": model.lm_head.weight is model.get_input_embeddings().weight,
            "attn_implementation": model.config._attn_implementation}
    return model, info


# -- learner ----------------------------------------------------------------------------------

def learner_inputs(shapes: Shapes, vocab: int, device: torch.device) -> Batch:
    """A text-only micro-batch: B rows of T random tokens, the last R of each row trained on."""
    rows, length = shapes.rows, shapes.token_budget // shapes.rows
    response = min(shapes.response_tokens, length // 2)
    gen = torch.Generator().manual_seed(1)
    input_ids = torch.randint(0, vocab, (rows, length), generator=gen)  # (B, T)
    loss_mask = torch.zeros(rows, length)
    loss_mask[:, -response:] = 1.0  # (B, T)
    signs = torch.tensor([1.0 if b % 2 == 0 else -1.0 for b in range(rows)])  # (B,)
    batch = Batch(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), loss_mask=loss_mask,
                  old_logprobs=torch.zeros(rows, length), advantages=signs[:, None] * loss_mask,
                  group_index=torch.zeros(rows, dtype=torch.long), trajectory_index=torch.arange(rows))
    for name in ("input_ids", "attention_mask", "loss_mask", "old_logprobs", "advantages", "group_index",
                 "trajectory_index"):
        setattr(batch, name, getattr(batch, name).to(device))
    return batch


def learner_loss(model, batch: Batch, settings: dict):
    """The learner's path (webrl.learner.model.PolicyModule, text only, no DeepSpeed): final hidden
    states -> token_logprobs on the response -> the objective. Returns (loss, metrics)."""
    out = model.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
    hidden = out.last_hidden_state  # (B, T, H)
    weight = model.lm_head.weight  # (V, H)
    mask = batch.loss_mask[:, 1:].bool()  # (B, T-1): token t is predicted from position t-1
    lp, ent = token_logprobs(hidden[:, :-1], weight.to(hidden.dtype), batch.input_ids[:, 1:],
                             settings["temperature"], mask=mask)  # (B, T-1) each
    zeros = lp.new_zeros((lp.shape[0], 1))
    logprobs, entropy = torch.cat([zeros, lp], dim=1), torch.cat([zeros, ent], dim=1)  # (B, T)
    batch.old_logprobs = logprobs.detach()  # ratio 1: the first mini-batch of an on-policy update
    config = GRPOConfig(loss=PolicyLossConfig(**settings["loss"]))
    return OBJECTIVES[settings["objective"]](LearnerOutputs(logprobs, entropy), batch, config)


def learner_step(model, batch: Batch, settings: dict, shapes: Shapes, device: torch.device, checkpointing: bool):
    """Forward + backward `timing_iters` times; figures of the last, peak memory over all."""
    _set_checkpointing(model, checkpointing)
    model.train()
    base = _reset_peak(device)
    try:
        for _ in range(shapes.timing_iters):
            model.zero_grad(set_to_none=True)
            start = time.perf_counter()
            loss, metrics = learner_loss(model, batch, settings)
            _sync(device)
            middle = time.perf_counter()
            loss.backward()
            _sync(device)
            end = time.perf_counter()
    except torch.cuda.OutOfMemoryError as error:
        model.zero_grad(set_to_none=True)
        return {"fits": False, "message": str(error).splitlines()[0][:300]}
    language = list(model.model.language_model.parameters())
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    peak = _peak(device)
    result = {"fits": True, "loss": float(loss.detach()), "forward_s": middle - start, "backward_s": end - middle,
              "tokens_per_s": shapes.token_budget / (end - start),
              "grad_norm": float(torch.linalg.vector_norm(torch.stack(  # fp32 norms, no fp32 copy of the grads
                  [torch.linalg.vector_norm(g, dtype=torch.float32) for g in grads]))),
              "params_with_grad": len(grads),
              "language_params": len(language),
              "language_params_with_nonzero_grad": sum(p.grad is not None and bool(p.grad.any()) for p in language),
              "peak_memory_bytes": peak, "peak_above_start_bytes": None if peak is None else peak - base,
              "objective_metrics": {k: v for k, v in metrics.items() if isinstance(v, float)}}
    model.zero_grad(set_to_none=True)
    return result


def learner_section(model, settings: dict, shapes: Shapes, device: torch.device) -> dict:
    batch = learner_inputs(shapes, model.config.text_config.vocab_size, device)
    rows, length = batch.input_ids.shape
    result = {"token_budget": shapes.token_budget, "token_budget_source": settings["token_budget_source"],
              "rows": rows, "tokens_per_row": length, "response_tokens_per_row": int(batch.loss_mask[0].sum()),
              "objective": settings["objective"], "temperature": settings["temperature"],
              "logprob_backend": resolve_backend(device), "inputs": "text only (no images), random token ids"}
    result["checkpointing"] = learner_step(model, batch, settings, shapes, device, checkpointing=True)
    result["no_checkpointing"] = learner_step(model, batch, settings, shapes, device, checkpointing=False)
    return result


# -- generate ---------------------------------------------------------------------------------

def generate_run(model, shapes: Shapes, settings: dict, device: torch.device, full_logits: bool,
                 sampled_logprobs: bool = False) -> dict:
    """One generate call: plain, with transformers' output_logits, or with webrl's rollout path
    (`webrl.policy.sampled_logprobs.SampledLogprobs`: the sampled tokens' log-probs, no logits kept)."""
    gen = torch.Generator().manual_seed(2)
    prompt = torch.randint(1, model.config.text_config.vocab_size, (shapes.generate_batch, shapes.prompt_tokens),
                           generator=gen).to(device)  # (B, P), no pad id 0
    kwargs = dict(attention_mask=torch.ones_like(prompt), do_sample=True, temperature=settings["temperature"],
                  top_k=0, top_p=1.0, max_new_tokens=shapes.new_tokens,
                  pad_token_id=0, eos_token_id=None)  # no eos: every row samples all new tokens
    if full_logits:
        kwargs.update(output_logits=True, return_dict_in_generate=True)
    recorder = None
    if sampled_logprobs:
        from webrl.policy.sampled_logprobs import LogitsProcessorList, SampledLogprobs

        recorder = SampledLogprobs(settings["temperature"])
        kwargs.update(logits_processor=LogitsProcessorList([recorder]))
    base = _reset_peak(device)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(prompt, **kwargs)
        if recorder is not None:
            recorder.finish(out)
    _sync(device)
    seconds = time.perf_counter() - start
    sequences = out.sequences if full_logits else out
    new = sequences.shape[1] - shapes.prompt_tokens
    peak = _peak(device)
    result = {"seconds": seconds, "new_tokens": new, "tokens_per_s": shapes.generate_batch * new / seconds,
              "peak_memory_bytes": peak, "peak_above_start_bytes": None if peak is None else peak - base}
    if full_logits:
        result["logits_bytes"] = sum(t.numel() * t.element_size() for t in out.logits)
        result["logits_dtype"] = str(out.logits[0].dtype).removeprefix("torch.")
    return result


def generate_section(model, settings: dict, shapes: Shapes, device: torch.device) -> dict:
    model.eval()
    _set_checkpointing(model, False)
    with torch.no_grad():  # warm-up: CUDA/cuBLAS start-up stays out of the figures
        model.generate(torch.ones(2, 8, dtype=torch.long, device=device), max_new_tokens=2, do_sample=False,
                       pad_token_id=0, eos_token_id=None)
    result = {"batch": shapes.generate_batch, "prompt_tokens": shapes.prompt_tokens,
              "max_new_tokens": shapes.new_tokens, "sampling": f"temperature {settings['temperature']}"}
    result["plain"] = generate_run(model, shapes, settings, device, full_logits=False)
    result["output_logits"] = generate_run(model, shapes, settings, device, full_logits=True)
    result["sampled_logprobs"] = generate_run(model, shapes, settings, device, full_logits=False, sampled_logprobs=True)
    return result


# -- kernel -----------------------------------------------------------------------------------

def _kernel_pass(backend: str, hidden, weight, targets, a, b):
    """((logprobs, entropy), (grad_hidden, grad_weight)) of Σ a·logprobs + Σ b·entropy."""
    hidden.grad = weight.grad = None
    logprobs, entropy = token_logprobs(hidden, weight, targets, config=TokenLogprobsConfig(backend=backend))
    ((logprobs * a).sum() + (entropy * b).sum()).backward()
    return (logprobs.detach(), entropy.detach()), (hidden.grad.float(), weight.grad.float())


def kernel_section(shapes: Shapes, hidden_size: int, vocab: int, device: torch.device) -> dict:
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET", "0") != "1":
        return {"skipped": "no CUDA and TRITON_INTERPRET is not 1: the Triton path cannot run here"}
    gen = torch.Generator().manual_seed(3)
    n = shapes.kernel_tokens
    hidden = torch.randn(n, hidden_size, generator=gen).to(device, shapes.dtype).requires_grad_(True)  # (N, H)
    weight = (torch.randn(vocab, hidden_size, generator=gen) * 3 / hidden_size ** 0.5).to(
        device, shapes.dtype).requires_grad_(True)  # (V, H)
    targets = torch.randint(0, vocab, (n,), generator=gen).to(device)  # (N,)
    a, b = torch.randn(2, n, generator=gen).to(device)  # (N,) each
    result = {"tokens": n, "hidden": hidden_size, "vocab": vocab, "dtype": str(shapes.dtype).removeprefix("torch.")}
    outputs = {}
    for backend in ("triton", "torch"):
        start = time.perf_counter()
        _kernel_pass(backend, hidden, weight, targets, a, b)  # first call: Triton compiles here
        _sync(device)
        first = time.perf_counter() - start
        base = _reset_peak(device)
        times = []
        for _ in range(shapes.timing_iters):
            start = time.perf_counter()
            outputs[backend] = _kernel_pass(backend, hidden, weight, targets, a, b)
            _sync(device)
            times.append(time.perf_counter() - start)
        peak = _peak(device)
        result[backend] = {"first_call_s": first, "fwd_bwd_s": sorted(times)[len(times) // 2],
                           "peak_above_start_bytes": None if peak is None else peak - base}
    (lp_t, ent_t), (gh_t, gw_t) = outputs["triton"]
    (lp_c, ent_c), (gh_c, gw_c) = outputs["torch"]
    result.update(max_abs_diff_logprobs=float((lp_t - lp_c).abs().max()),
                  max_abs_diff_entropy=float((ent_t - ent_c).abs().max()),
                  max_rel_diff_grad_hidden=float((gh_t - gh_c).abs().max() / gh_c.abs().max()),
                  max_rel_diff_grad_weight=float((gw_t - gw_c).abs().max() / gw_c.abs().max()),
                  speedup_triton_over_torch=result["torch"]["fwd_bwd_s"] / result["triton"]["fwd_bwd_s"])
    return result


# -- sparse prefill ---------------------------------------------------------------------------

SPARSE_TOKENS = (8192, 16384, 32768)
SPARSE_BUDGETS = (0.1, 0.25)
SPARSE_CHECK_HEADS = 4  # the Triton output is compared with the torch reference on these heads


def _sparse_benchmark_module():
    """benchmarks/sparse_prefill.py (its recipe layout), loaded from this folder by path."""
    path = Path(__file__).resolve().parent / "sparse_prefill.py"
    spec = importlib.util.spec_from_file_location("webrl_sparse_prefill_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cuda_seconds(fn, iters: int) -> float:
    """Median seconds of fn() over `iters` calls after one warm-up (Triton compiles there)."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return sorted(times)[len(times) // 2]


def sparse_prefill_section(text: dict, shapes: Shapes, device: torch.device) -> dict:
    """One attention layer of the model's text shapes (all heads) at 8K-32K tokens in the recipe's
    screenshot layout (benchmarks/sparse_prefill.py): Triton block-sparse prefill vs SDPA, bf16,
    random q/k/v (timing and FLOPs do not depend on the values; the error is kernel vs reference
    on the same plan, not sparse vs dense). Patterns alternate grid / a_shape over the heads."""
    if device.type != "cuda":
        return {"skipped": "no CUDA: the sparse prefill is timed on a GPU only (CPU figures: "
                           "benchmarks/sparse_prefill.py)"}
    rows = sparse_prefill_rows(text, SPARSE_TOKENS, device, torch.bfloat16,
                               lambda fn: _cuda_seconds(fn, shapes.timing_iters))
    return {"dtype": "bfloat16", "block_size": 64, "rows": rows}


def sparse_prefill_rows(text: dict, token_counts, device, dtype, timer, block_size: int = 64) -> list[dict]:
    """The section's measurements; `timer(fn) -> seconds` (CUDA events on the GPU)."""
    from webrl.kernels.sparse_prefill import (BlockPlan, SparsePrefillConfig, block_flops,
                                              block_sparse_attention_reference, build_block_plan,
                                              dense_causal_attention)
    from webrl.kernels.triton_sparse_prefill import triton_block_sparse_attention

    bench = _sparse_benchmark_module()
    heads, kv_heads = text.get("num_attention_heads", 32), text.get("num_key_value_heads", 8)
    head_dim = text.get("head_dim", text.get("hidden_size", 2560) // heads)
    group, scale = heads // kv_heads, head_dim ** -0.5
    rows = []
    for tokens in token_counts:
        layout = bench.recipe_layout(tokens, bench.SCREENSHOTS.get(tokens, 1))
        gen = torch.Generator().manual_seed(4)
        q = torch.randn(heads, tokens, head_dim, generator=gen).to(device, dtype)  # (H, T, D)
        k, v = (torch.randn(kv_heads, tokens, head_dim, generator=gen).to(device, dtype) for _ in range(2))
        patterns = ["grid" if h % 2 == 0 else "a_shape" for h in range(heads)]
        dense_s = timer(lambda: dense_causal_attention(q, k, v))
        for budget in SPARSE_BUDGETS:
            config = SparsePrefillConfig(block_size=block_size, budget=budget)
            plan_s = timer(lambda: build_block_plan(q, k, layout, patterns, config))
            plan = build_block_plan(q, k, layout, patterns, config)

            def sparse():
                return triton_block_sparse_attention(q, k, v, plan.perm, plan.block_mask, plan.block_size, scale)

            sparse_s = timer(sparse)
            n, n_kv = SPARSE_CHECK_HEADS, max(1, SPARSE_CHECK_HEADS // group)
            part = BlockPlan(plan.perm[:n], plan.block_mask[:n], plan.block_size)
            want = block_sparse_attention_reference(q[:n].float(), k[:n_kv].float(), v[:n_kv].float(), part, scale)
            flops, dense_flops = block_flops(plan, head_dim)
            rows.append({"tokens": tokens, "budget": budget, "heads": heads, "kv_heads": kv_heads,
                         "screenshots": len(layout.images), "kept_block_fraction": plan.kept_fraction(),
                         "flops_saved": 1 - flops / dense_flops, "dense_sdpa_s": dense_s, "plan_s": plan_s,
                         "triton_sparse_s": sparse_s, "speedup_attention": dense_s / sparse_s,
                         "speedup_with_plan": dense_s / (sparse_s + plan_s),
                         "max_abs_diff_vs_reference": float((sparse()[:n].float() - want).abs().max())})
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


# -- main -------------------------------------------------------------------------------------

def nccl_section(device: torch.device) -> dict:
    """webrl's ctypes NCCL communicator (`webrl.learner.nccl`, the trainer side of vLLM's NCCL
    weight transfer) on this GPU as a group of one: a unique id, ncclCommInitRank, vLLM's warm-up
    all-reduce and a bf16 broadcast (a group of two on one GPU is refused by NCCL, so the
    transfer into a vLLM server on a second GPU is tests/engines/test_vllm_nccl.py's)."""
    if device.type != "cuda":
        return {"skipped": "CUDA only"}
    from webrl.learner.nccl import NcclComm, encode_unique_id, load_library, new_unique_id

    lib = load_library()
    uid = new_unique_id(lib)
    comm = NcclComm(lib, uid, 0, 1, device)
    warm = torch.full((1,), 2.5, dtype=torch.float32, device=device)
    comm.all_reduce(warm)
    sent = torch.arange(1 << 20, device=device).to(torch.bfloat16)
    copy = sent.clone()
    comm.broadcast(sent)
    comm.synchronize()
    comm.destroy()
    return {"unique_id_b64_chars": len(encode_unique_id(uid)), "all_reduce_of_2_5": float(warm.item()),
            "broadcast_unchanged": bool(torch.equal(sent, copy))}


def run_check(tiny: bool, preset: str) -> dict:
    start = time.perf_counter()
    device = torch.device("cpu") if tiny else torch.device("cuda", 0)
    settings = preset_settings(preset)
    if tiny:
        shapes = Shapes(dtype=torch.float32, token_budget=256, rows=2, response_tokens=32, generate_batch=4,
                        prompt_tokens=16, new_tokens=8, kernel_tokens=128, timing_iters=1)
        settings["token_budget_source"] += f" (the tiny run uses 256 instead of {settings['token_budget']})"
    else:
        shapes = Shapes(dtype=torch.bfloat16, token_budget=settings["token_budget"],
                        response_tokens=settings["response_tokens"])
    report = {"tiny": tiny, "preset": preset,
              "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                           "transformers": transformers.__version__, "triton": _triton_version()},
              "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "total_memory_bytes": (torch.cuda.get_device_properties(device).total_memory
                                     if device.type == "cuda" else None)}
    holder = {}

    def model_section():
        holder["model"], info = build_model(tiny, device, shapes.dtype)
        return info

    def needs_model(section):
        return lambda: section(holder["model"], settings, shapes, device) if "model" in holder else \
            {"error": "no model (the model section failed)"}

    report["model"] = _timed(model_section)
    report["learner"] = _timed(needs_model(learner_section))
    report["generate"] = _timed(needs_model(generate_section))
    text = report["model"].get("config", {}).get("text", {})
    holder.clear()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    hidden, vocab = text.get("hidden_size", 2560), text.get("vocab_size", 151936)
    report["kernel"] = _timed(lambda: kernel_section(shapes, hidden, vocab, device))
    report["sparse_prefill"] = _timed(lambda: sparse_prefill_section(text, shapes, device))
    report["nccl"] = _timed(lambda: nccl_section(device))
    report["total_seconds"] = time.perf_counter() - start
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_check.json", help="the JSON file to write")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes on CPU (the suite's run)")
    parser.add_argument("--preset", default="online_mind2web_qwen3vl_4b", choices=PRESETS,
                        help="preset whose learner token budget, objective and temperature are used")
    args = parser.parse_args(argv)
    if not args.tiny and not torch.cuda.is_available():
        print("gpu_check.py: no CUDA device available; nothing to check (run with --tiny for the CPU shapes)")
        return 0
    report = run_check(args.tiny, args.preset)
    text = json.dumps(report, indent=1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""benchmarks/gpu_check.py: the --tiny run on CPU writes a complete JSON report (every section,
no errors, finite figures, a learner step whose gradients reach every language-model weight), the
real shapes are Qwen3-VL-4B's (parameter counts worked out by hand, built on the meta device), the
script imports from a bare source tree without Ray / DeepSpeed / Playwright, and bad input fails
naming the allowed values."""
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from tests.benchmarks.helpers import BENCHMARKS, load_benchmark

SCRIPT = BENCHMARKS / "gpu_check.py"
REPO = BENCHMARKS.parent
SECTIONS = ("model", "learner", "generate", "kernel", "nccl")


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("gpu_check")


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check") / "report.json"
    env = dict(os.environ, TRITON_INTERPRET="1", HF_HUB_OFFLINE="1", RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--out", str(out)], cwd=out.parent, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert json.loads(proc.stdout) == report  # the same JSON is printed
    return report


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@pytest.mark.slow
def test_tiny_report_has_every_section_without_errors(tiny_report):
    for name in SECTIONS:
        assert name in tiny_report, name
        assert "error" not in tiny_report[name], tiny_report[name]
        assert _positive(tiny_report[name]["seconds"])
    assert tiny_report["tiny"] is True and tiny_report["device"] == "cpu"
    assert tiny_report["total_memory_bytes"] is None
    assert all(tiny_report["versions"][k] for k in ("torch", "transformers", "triton"))
    assert _positive(tiny_report["total_seconds"])


@pytest.mark.slow
def test_tiny_model_counts(tiny_report):
    model = tiny_report["model"]
    # Tiny language model, V=1024, H=64, 4 heads / 2 kv heads of 16, I=128, 2 layers, tied lm_head:
    #   embedding 1024*64 = 65536; per layer q 64*64 + k 64*32 + v 64*32 + o 64*64 = 12288,
    #   q/k norms 2*16, MLP 3*64*128 = 24576, two RMSNorms 2*64 -> 37024; final norm 64
    #   65536 + 2*37024 + 64 = 139648
    assert model["language_model_parameters"] == 139648
    assert model["tied_lm_head"] is True
    assert model["parameters"] == model["language_model_parameters"] + model["vision_parameters"]
    assert model["parameter_bytes"] == 4 * model["parameters"] and model["dtype"] == ["float32"]  # CPU


@pytest.mark.slow
def test_tiny_learner_step(tiny_report):
    learner = tiny_report["learner"]
    assert learner["rows"] * learner["tokens_per_row"] == learner["token_budget"] == 256
    assert learner["response_tokens_per_row"] == 32 and learner["logprob_backend"] == "torch"  # CPU
    runs = [learner["checkpointing"], learner["no_checkpointing"]]
    for run in runs:
        assert run["fits"] is True
        # ratio 1 and advantages +1 / -1 on rows with equal response lengths: token-mean loss
        # -(32*1 + 32*(-1)) / 64 = 0
        assert math.isfinite(run["loss"]) and abs(run["loss"]) < 1e-6
        assert run["objective_metrics"]["ratio_max"] == pytest.approx(1.0)
        assert _positive(run["grad_norm"]) and _positive(run["tokens_per_s"])
        # every language-model weight gets a non-zero gradient (the vision tower none: text only)
        assert run["language_params_with_nonzero_grad"] == run["language_params"] == run["params_with_grad"] > 0
        assert run["peak_memory_bytes"] is None  # CPU
    # activation checkpointing recomputes the same forward: same gradients up to fp32 rounding
    assert runs[0]["grad_norm"] == pytest.approx(runs[1]["grad_norm"], rel=1e-5)


@pytest.mark.slow
def test_tiny_generate(tiny_report):
    generate = tiny_report["generate"]
    for name in ("plain", "output_logits", "sampled_logprobs"):
        assert generate[name]["new_tokens"] == 8
        assert _positive(generate[name]["tokens_per_s"])
    # batch 4 x 8 new tokens x vocab 1024 x float32
    assert generate["output_logits"]["logits_bytes"] == 4 * 8 * 1024 * 4


@pytest.mark.slow
def test_tiny_kernel_triton_matches_torch(tiny_report):
    kernel = tiny_report["kernel"]
    assert "skipped" not in kernel  # TRITON_INTERPRET=1 was set for the run
    assert (kernel["tokens"], kernel["hidden"], kernel["vocab"]) == (128, 64, 1024)
    for backend in ("triton", "torch"):
        assert _positive(kernel[backend]["fwd_bwd_s"])
    # float32 inputs: both paths accumulate in float32, so they agree to rounding
    for key in ("max_abs_diff_logprobs", "max_abs_diff_entropy", "max_rel_diff_grad_hidden",
                "max_rel_diff_grad_weight"):
        assert 0 <= kernel[key] < 1e-4, key


def test_kernel_section_skips_without_cuda_or_interpreter(bench, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    shapes = bench.Shapes(dtype=torch.float32, token_budget=64)
    result = bench.kernel_section(shapes, 64, 1024, torch.device("cpu"))
    assert "TRITON_INTERPRET" in result["skipped"]


@pytest.mark.slow
def test_real_shapes_are_qwen3_vl_4b(bench):
    model, info = bench.build_model(False, torch.device("meta"), torch.bfloat16)
    assert info["family"] == "qwen3-vl" and info["tied_lm_head"]
    # Language model, V=151936, H=2560, 32 heads / 8 kv heads of 128, I=9728, 36 layers:
    #   embedding 151936*2560 = 388956160
    #   per layer: q 2560*4096 + k 2560*1024 + v 2560*1024 + o 4096*2560 = 26214400,
    #   q/k norms 2*128, MLP 3*2560*9728 = 74711040, two RMSNorms 2*2560 -> 100930816
    #   388956160 + 36*100930816 + 2560 (final norm) = 4022468096
    assert info["language_model_parameters"] == 4022468096
    # Vision tower, depth 24, hidden 1024, MLP 4096, patch 16, 2304 positions, out 2560:
    #   patch conv 3*2*16*16*1024 + 1024 = 1573888; position embedding 2304*1024 = 2359296
    #   per block: 2 LayerNorms 4096, qkv 1024*3072 + 3072, proj 1024*1024 + 1024,
    #   fc1 1024*4096 + 4096, fc2 4096*1024 + 1024 -> 12596224; x 24 = 302309376
    #   merger: LayerNorm(1024) 2048 + fc1 4096*4096 + 4096 + fc2 4096*2560 + 2560 = 27271680
    #   3 deepstack mergers, LayerNorm(4096) after the 2x2 shuffle: 3 * 27277824 = 81833472
    assert info["vision_parameters"] == 1573888 + 2359296 + 302309376 + 27271680 + 81833472  # 415347712
    assert info["parameters"] == 4022468096 + 415347712  # the public 4.44B
    assert info["parameter_bytes"] == 2 * info["parameters"] and info["dtype"] == ["bfloat16"]


def test_preset_token_budget(bench):
    settings = bench.preset_settings("online_mind2web_qwen3vl_4b")
    # the preset leaves learner.batching.token_budget at BatchingConfig's default
    from webrl.learner.config import BatchingConfig

    assert settings["token_budget"] == BatchingConfig().token_budget
    assert (settings["objective"], settings["temperature"]) == ("grpo", 0.8)
    assert settings["loss"]["clip_eps_high"] == 0.28


def test_bad_preset_names_the_choices(bench):
    with pytest.raises(ValueError, match="--preset must be one of .*online_mind2web_qwen3vl_4b"):
        bench.preset_settings("qwen3vl_8b")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--preset", "qwen3vl_8b"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "--preset" in proc.stderr and "online_mind2web_qwen3vl_4b" in proc.stderr


def test_without_cuda_exits_zero_with_a_message(tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "x.json")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "no CUDA device" in proc.stdout
    assert not (tmp_path / "x.json").exists()


BARE_IMPORT = """
import runpy, sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]  # drop the editable install
sys.path_hooks[:] = [h for h in sys.path_hooks if "editable" not in repr(h)]
runpy.run_path(sys.argv[1], run_name="gpu_check")
print(sys.modules["webrl"].__file__, sys.modules["webrl.kernels"].__file__, sys.modules["webrl.algos"].__file__)
print(sorted({m.split(".")[0] for m in sys.modules} & {"ray", "deepspeed", "playwright", "gymnasium", "omegaconf"}))
"""


def test_imports_from_a_bare_source_tree(tmp_path):
    proc = subprocess.run([sys.executable, "-c", BARE_IMPORT, str(SCRIPT)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files, heavy = proc.stdout.strip().splitlines()[-2:]
    assert files.split() == [str(REPO / "webrl" / "__init__.py"), str(REPO / "kernels" / "__init__.py"),
                             str(REPO / "algos" / "__init__.py")]
    assert heavy == "[]"


def test_nccl_section_is_cuda_only(tiny_report):
    assert tiny_report["nccl"]["skipped"] == "CUDA only"

"""`webrl plan`: shapes -> parameter counts, ZeRO bytes, activations, KV cache, the 4B preset's verdict.

Every expected number is worked out by hand in the comments (Qwen3-VL-4B's published shapes,
tests/fixtures/qwen3_vl_4b_config.json); the parameter formula is checked against models that
transformers builds on the meta device.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from webrl.config import ConfigError
from webrl.cli import main as cli_main
from webrl.run.memory import (GIB, layer_activation_bytes, learner_memory, load_shapes, rollout_memory, shapes_from_hf_config,
                              zero_state_bytes)
from webrl.run.plan import PlanSettings, launch_fraction, plan_memory
from webrl.run.plan_report import load_plan_config, plan_main

FIXTURE = str(Path(__file__).parent / "fixtures" / "qwen3_vl_4b_config.json")
PRESET = "online_mind2web_qwen3vl_4b"
# Language model, V=151936, H=2560, 32 heads / 8 kv heads of 128, I=9728, 36 layers, tied lm_head:
#   embedding 151936*2560 = 388956160
#   per layer: q 2560*4096 + k 2560*1024 + v 2560*1024 + o 4096*2560 = 26214400, q/k norms 2*128 = 256,
#   MLP 3*2560*9728 = 74711040, two RMSNorms 2*2560 = 5120 -> 100930816
#   388956160 + 36*100930816 + 2560 (final norm) = 4022468096
TEXT_4B = 4022468096
# Vision, depth 24, hidden 1024, MLP 4096, patch 16, 2304 positions, out 2560, 3 deepstack mergers:
#   patch conv 3*2*16*16*1024 + 1024 = 1573888; positions 2304*1024 = 2359296
#   per block: 2 LayerNorms 4096, qkv 1024*3072 + 3072, proj 1024*1024 + 1024, fc1 1024*4096 + 4096,
#   fc2 4096*1024 + 1024 -> 12596224; x 24 = 302309376
#   merger: LayerNorm(1024) 2048 + fc1 4096*4096 + 4096 + fc2 4096*2560 + 2560 = 27271680
#   deepstack: LayerNorm(4096) 8192 instead of 2048: 27277824 each, x 3 = 81833472
VISION_4B = 1573888 + 2359296 + 302309376 + 27271680 + 81833472  # 415347712
P_4B = TEXT_4B + VISION_4B  # 4437815808, the published 4.44B


def test_qwen3_vl_4b_parameters_from_its_config():
    shapes = load_shapes(FIXTURE)
    assert (shapes.hidden, shapes.layers, shapes.heads, shapes.kv_heads, shapes.head_dim) == (2560, 36, 32, 8, 128)
    assert (shapes.intermediate, shapes.vocab, shapes.tied, shapes.deepstack) == (9728, 151936, True, 3)
    assert shapes.text_parameters == TEXT_4B
    assert shapes.vision_parameters == VISION_4B
    assert load_shapes("qwen3-vl-4b") == shapes  # the built-in shape preset is the same config


def _meta_count(config) -> int:
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("family,tied", [("qwen3_vl", True), ("qwen3_vl", False), ("qwen2_5_vl", False)])
def test_parameter_formula_matches_transformers(family, tied):
    from transformers import Qwen2_5_VLConfig, Qwen3VLConfig

    text = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                intermediate_size=96, vocab_size=500, tie_word_embeddings=tied)
    vision = dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, in_channels=3)
    if family == "qwen3_vl":
        vision.update(num_position_embeddings=16, deepstack_visual_indexes=[0, 1])
        config = Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=tied)
    else:
        config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=tied)
    shapes = shapes_from_hf_config(config.to_dict())
    assert shapes.parameters == _meta_count(config)


def test_shipped_tiny_pointer_parameters_match_the_checkpoint():
    from webrl.models import load_model

    model, _ = load_model("webrl:tiny-webagent-pointer")
    assert load_shapes("webrl:tiny-webagent-pointer").parameters == sum(p.numel() for p in model.parameters())


def test_zero_stages_4b_bf16_over_4_ranks():
    P, n = P_4B, 4
    # stage 0 (DeepSpeed BF16_Optimizer): weights 2P, grads 2P + fp32 accumulators 4P, fp32 master + m + v 12P
    assert zero_state_bytes(P, P, n, 0, 2) == (2 * P, 6 * P, 12 * P)
    # stage 1: optimizer states partitioned: 12P / 4 = 3P
    assert zero_state_bytes(P, P, n, 1, 2) == (2 * P, 2 * P, 3 * P)
    # stage 2: + gradients partitioned: 2P / 4 = 0.5P
    assert zero_state_bytes(P, P, n, 2, 2) == (2 * P, 0.5 * P, 3 * P)
    # stage 3: + weights partitioned
    assert zero_state_bytes(P, P, n, 3, 2) == (0.5 * P, 0.5 * P, 3 * P)
    # fp32, stage 0: plain AdamW, m and v only: 8P; frozen vision tower: no grads / states for it
    assert zero_state_bytes(P, TEXT_4B, 1, 0, 4) == (4 * P, 4 * TEXT_4B, 8 * TEXT_4B)
    # stage 1 at 4 ranks in GiB: 2P = 8.27 GiB of weights, 3P = 12.40 GiB of states
    assert round(2 * P / GIB, 2) == 8.27 and round(3 * P / GIB, 2) == 12.40


def test_activations_4b_per_token_by_hand():
    shapes = load_shapes(FIXTURE)
    # bf16 (d=2): 8H = 20480; 4dH = 20480; (4+d)(Hq+Hkv) = 6*5120 = 30720;
    # d(3Hq + 2Hkv) = 2*(12288 + 2048) = 28672; 4dI = 8*9728 = 77824 -> 178176 bytes per token per layer
    assert layer_activation_bytes(shapes, 2) == 178176
    T = 16384
    lm = learner_memory(shapes, ranks=4, stage=1, dtype_bytes=2, tokens=T, response_tokens=4096)
    # final norm (4H + 2dH) = 20480, backward temporaries 2d(H + I) = 4*12288 = 49152 per token
    extra = (20480 + 49152) * T
    assert lm.activations == 36 * 178176 * T + extra  # ~114.2 GiB: no 80 GB GPU holds it
    # checkpointing: 36 block inputs of dH = 5120 bytes + one block recomputed
    assert lm.activations_checkpointed == 36 * 5120 * T + 178176 * T + extra  # ~8.1 GiB
    # chunked log-probs: d*H per response token + the 4 x 1024 x 8192 fp32 working block
    assert lm.logprobs == 2 * 2560 * 4096 + 4 * 1024 * 8192 * 4


def test_rollout_4b_kv_cache_and_logits_by_hand():
    shapes = load_shapes(FIXTURE)
    rm = rollout_memory(shapes, dtype_bytes=2, batch=16, prompt_tokens=4096, new_tokens=1024)
    # KV per token: 2 (K, V) * 36 layers * 8 kv heads * 128 * 2 bytes = 147456; 16 rows x 5120 tokens
    assert rm.kv_cache == 147456 * 16 * 5120  # 11.25 GiB
    # output_logits: 16 x 1024 x 151936 fp32 = 9957277696 bytes (the "about 10 GB")
    assert rm.logits_full == 9957277696
    assert rm.logits_sampled == 4 * 4 * 16 * 151936  # four (B, V) fp32 tensors: 39 MB
    assert rm.weights == 2 * P_4B and not rm.full_logits
    assert rm.total == rm.weights + rm.kv_cache + rm.prefill + rm.logits_sampled


@pytest.fixture(scope="module")
def preset_config():
    return load_plan_config(PRESET, [f"plan.model={FIXTURE}"])


def test_4b_preset_on_8x80gb_fits_and_its_sglang_servers_queue_at_max_prompt(preset_config):
    plan = plan_memory(preset_config, preset_config.plan)
    assert plan.refusal is None  # 4 learner GPUs + 4 launched SGLang servers, no evaluation worker
    lm = plan.learner
    assert lm.checkpointing and lm.reference == 0  # the preset: checkpointing on, kl_coef 0
    # ZeRO 3 over 4 ranks, bf16: weights and gradients 2P / 4 each, fp32 master + m + v 12P / 4
    assert lm.weights == lm.gradients == 0.5 * P_4B and lm.optimizer == 3 * P_4B
    # step temporaries: fp32 flat gradient partition + AdamW's denominator, 2 * 4P / 4 = 2P
    assert lm.step_buffers == 2 * P_4B
    # 0.5P + 0.5P + 3P + 2P = 6P = 24.80 GiB of model states, + 8.13 GiB checkpointed activations + 0.15 log-probs
    assert round(lm.total / GIB, 1) == 33.1
    assert lm.total < plan.gpu_bytes < lm.activations  # fits only because of checkpointing
    # rollout: 240 requests in flight (max_concurrency = inference.max_batch_size = 240) over 4 servers
    # = 60 rows a server, each (32768 + 1024) tokens of KV at 147456 bytes a token
    rm = plan.rollout
    assert rm.batch == 60 and rm.kv_cache == 147456 * 60 * (32768 + 1024)
    assert plan.queues == "pool" and plan.rollout_gpus == 1.0
    # SGLang keeps weights + KV pool in --mem-fraction-static 0.8 of the 80 GB GPU (64 GiB) and
    # queues what the pool cannot hold: a server needs the weights 2P (8.27 GiB) and one row's KV,
    # 147456 * 33792 bytes (4.64 GiB) = 12.91 GiB; (64 - 8.27) GiB / 4.64 GiB = 12.01 -> 12 rows of 60
    assert plan.pool_bytes == 0.8 * 80 * GIB
    one_row = 2 * P_4B + 147456 * 33792
    assert plan.rollout_need == pytest.approx(one_row) and round(one_row / GIB, 1) == 12.9
    assert plan.rows_held == (0.8 * 80 * GIB - 2 * P_4B) // (147456 * 33792) == 12
    assert plan.fits and not plan.warnings
    assert "holds about 12 of its 60 rows in flight at once" in plan.notes[0]


def test_launch_fraction_is_read_from_the_launch_args():
    assert launch_fraction(["--mem-fraction-static", "0.8", "--tp-size", "2"]) == 0.8
    assert launch_fraction(["--tp-size", "2", "--mem-fraction-static=0.55"]) == 0.55
    assert launch_fraction(["--tp-size", "2"]) is None
    for bad in ("abc", "0", "1.5"):
        with pytest.raises(ConfigError, match="--mem-fraction-static must be a number in"):
            launch_fraction(["--mem-fraction-static", bad])
    assert launch_fraction(["--gpu-memory-utilization", "0.7"], "vllm") == 0.7  # vLLM's flag for the same share
    assert launch_fraction(["--mem-fraction-static", "0.7"], "vllm") is None
    with pytest.raises(ConfigError, match="--gpu-memory-utilization must be a number in"):
        launch_fraction(["--gpu-memory-utilization=2"], "vllm")
    # without it the pool is planned as the usable GPU (78 GiB): (78 - 8.27) / 4.64 = 15.03 -> 15 rows
    config = load_plan_config(PRESET, [f"plan.model={FIXTURE}", "rollout.server.launch_args=[]"])
    plan = plan_memory(config, config.plan)
    assert plan.pool_bytes == 78 * GIB and plan.rows_held == 15
    assert "vLLM's own --gpu-memory-utilization" in plan.notes[0]


def test_4b_preset_fits_at_realistic_prompts_and_warns_without_checkpointing():
    config = load_plan_config(PRESET, [f"plan.model={FIXTURE}", "plan.prompt_tokens=4096"])
    assert plan_memory(config, config.plan).fits
    config = load_plan_config(PRESET, [f"plan.model={FIXTURE}", "plan.prompt_tokens=4096",
                                       "learner.gradient_checkpointing=false"])
    plan = plan_memory(config, config.plan)
    assert not plan.fits and "learner.gradient_checkpointing=true" in plan.warnings[0]
    assert "more resources.learner_ranks" in plan.warnings[0]  # already at ZeRO 3
    config = load_plan_config(PRESET, [f"plan.model={FIXTURE}", "plan.prompt_tokens=4096", "learner.zero_stage=1",
                                       "learner.gradient_checkpointing=false"])
    assert "learner.zero_stage=3" in plan_memory(config, config.plan).warnings[0]


def test_placement_refusal_and_cluster_file(tmp_path):
    config = load_plan_config(PRESET, [f"plan.model={FIXTURE}", "resources.learner_ranks=5"])
    plan = plan_memory(config, config.plan)
    assert "9 GPUs in all and the cluster has 8" in plan.refusal and not plan.fits
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"nodes": [{"CPU": 32, "GPU": 4}, {"CPU": 32, "GPU": 4}], "gpu_memory_gb": 24}))
    config = load_plan_config(PRESET, [f"plan.model={FIXTURE}", f"plan.cluster={cluster}", "plan.prompt_tokens=4096"])
    plan = plan_memory(config, config.plan)
    assert plan.refusal is None and plan.gpu_bytes == 22 * GIB  # 24 GiB less the 2 GiB reserve
    assert any("learner GPU" in w for w in plan.warnings)  # ~33 GiB per learner rank


def test_plan_main_prints_and_returns_the_verdict(capsys):
    assert cli_main(["plan", "--config", PRESET, f"plan.model={FIXTURE}", "plan.prompt_tokens=4096"]) == 0
    out = capsys.readouterr().out
    assert "learner rank" in out and "KV cache" in out and "\nFITS: learner GPU 33.1 of 78.0 GiB" in out
    # weights 8.27 GiB + one row of 4096 + 1024 tokens' KV (147456 * 5120 bytes, 0.70 GiB) in a 64 GiB pool
    assert "rollout GPU 9.0 of 64.0 GiB" in out and "holds all 60 rows in flight at once" in out
    # 16 GB GPUs: neither a learner rank (33.1 GiB of 14 usable) nor a server's weights and one
    # 32k-token row (12.9 GiB) in its pool of 0.8 x 16 = 12.8 GiB fits
    assert cli_main(["plan", "--config", PRESET, f"plan.model={FIXTURE}", "plan.gpu_memory_gb=16"]) == 1
    out = capsys.readouterr().out
    assert "WARNING: a learner GPU" in out and "WARNING: a rollout inference GPU needs 12.9 GiB of 12.8" in out


@pytest.mark.parametrize("override,key", [("plan.cluster=nodes.txt", "plan.cluster"),
                                          ("plan.gpu_memory_gb=0", "plan.gpu_memory_gb"),
                                          ("plan.nodes=0", "plan.nodes"),
                                          ("plan.model=/nonexistent/qwen", "plan.model")])
def test_bad_plan_settings_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        config = load_plan_config(PRESET, [f"plan.model={FIXTURE}", override])
        plan_memory(config, config.plan)


def test_wrong_model_type_is_refused():
    with pytest.raises(ConfigError, match="qwen2_5_vl or qwen3_vl"):
        shapes_from_hf_config({"model_type": "llama", "vision_config": {}})
    with pytest.raises(ConfigError, match="plan.cluster"):
        PlanSettings(cluster="cluster.csv")


def test_config_instance_route_and_keys(capsys):
    from webrl.run import plan_report
    from webrl.config import load_config
    from webrl.run.config import WebRLConfig

    schema = plan_report.PlanCommandConfig  # what webrl.cli's COMMANDS entry names
    assert issubclass(schema, WebRLConfig)
    config = load_config(schema, None, ["plan.gpus_per_node=0"])  # the CPU default: tiny pointer model
    assert plan_main(config) == 0  # no GPUs asked for, none to overfill
    out = capsys.readouterr().out
    assert "qwen2.5-vl" in out and "FITS (no GPUs asked for" in out
    assert cli_main(["plan", "--keys"]) == 0
    assert "plan.gpu_memory_gb (float, default 80.0)" in capsys.readouterr().out


def test_memory_plan_benchmark_recomputes_predictions_from_measurements(tmp_path):
    from tests.benchmarks.helpers import load_benchmark

    bench = load_benchmark("memory_plan")
    measured = {"args": {"tokens": 64, "samples": 2}, "rows": [
        {"model": "tiny", "path": "webrl:tiny-webagent-pointer", "checkpointing": False, "total_mib": 100.0,
         "step_mib": 50.0, "load_mib": 50.0}]}
    (tmp_path / "in.json").write_text(json.dumps(measured))
    assert bench.main(["--measured", str(tmp_path / "in.json"), "--out", str(tmp_path / "out")]) == 0
    row = json.loads((tmp_path / "out" / "results.json").read_text())["rows"][0]
    shapes = load_shapes("webrl:tiny-webagent-pointer")
    lm = learner_memory(shapes, ranks=1, stage=1, dtype_bytes=4, tokens=128, response_tokens=2 * 16)
    assert row["predicted"]["total_mib"] == pytest.approx(lm.total / 2 ** 20)
    assert row["ratio_total"] == pytest.approx(lm.total / 2 ** 20 / 100.0)
    # step = total - weights - the fp32 partition DeepSpeed builds at start-up (4P)
    assert row["predicted"]["step_mib"] == pytest.approx((lm.total - lm.weights - 4 * shapes.parameters) / 2 ** 20)
    assert "| tiny | False | 100 |" in (tmp_path / "out" / "README.md").read_text()


def test_the_reference_model_is_partitioned_only_at_zero3():
    shapes = load_shapes(FIXTURE)
    full = 2 * (TEXT_4B + VISION_4B)  # a bf16 copy of all 4,437,815,808 parameters
    for stage, expected in ((0, full), (1, full), (2, full), (3, full / 4)):
        lm = learner_memory(shapes, ranks=4, stage=stage, dtype_bytes=2, tokens=16, response_tokens=4, reference=True)
        assert lm.reference == expected, stage


def test_server_rollouts_are_planned_on_the_launched_servers_gpus():
    # launched `webrl serve` servers answer one request at a time: a server needs one whole row,
    # weights 8.27 + KV 4.64 + prefill 3 * 2 * 9728 * 32768 bytes (1.78) + sampled logits = 14.7 GiB of 78
    webrl_servers = [f"plan.model={FIXTURE}", "rollout.server.launch=webrl", "rollout.server.launch_args=[]"]
    plan = plan_memory(*_config_and_settings(webrl_servers))
    assert plan.rollout_gpus == 1.0 and plan.queues == "serial" and plan.rows_held == 1
    one_row = 2 * P_4B + 147456 * 33792 + 3 * 2 * 9728 * 32768 + 4 * 4 * 151936
    assert plan.rollout_need == pytest.approx(one_row) and plan.fits
    assert "answers one request at a time" in plan.notes[0] and "the other 59 of its 60 wait" in plan.notes[0]
    # on 12 GB GPUs (10 usable) that row does not fit, and the warning names the server keys
    plan = plan_memory(*_config_and_settings([*webrl_servers, "plan.gpu_memory_gb=12"]))
    assert not plan.fits and "rollout.server.max_concurrency (or add rollout.server.num_servers)" in plan.warnings[-1]
    # servers the user started: not planned, and said so (the preset's launch keys back at their defaults)
    urls = [f"plan.model={FIXTURE}", "rollout.server.launch=none", "rollout.server.urls=[http://127.0.0.1:1]",
            "rollout.server.num_servers=1", "rollout.server.gpus_per_server=0", "rollout.server.cpus_per_server=1",
            "rollout.server.launch_args=[]", "rollout.server.max_restarts=3", "plan.prompt_tokens=4096"]
    plan = plan_memory(*_config_and_settings(urls))
    assert plan.rollout_gpus == 0 and plan.fits and "not planned here" in plan.notes[0]
    # in-process inference GPUs take inference.max_batch_size rows (the model batches what the batcher does)
    in_process = [f"plan.model={FIXTURE}", "rollout.engine=transformers", "rollout.server.launch=none",
                  *urls[3:8], "rollout.server.max_concurrency=16", "inference.max_batch_size=16",
                  "resources.num_inference_workers=4", "resources.gpus_per_inference_worker=1"]
    plan = plan_memory(*_config_and_settings(in_process))
    assert plan.rollout.batch == 16 and plan.queues == "" and not plan.fits  # 111 GiB for 16 rows at once
    assert "inference.max_batch_size" in plan.warnings[0]


def test_a_cluster_file_excludes_the_node_keys(tmp_path):
    with pytest.raises(ConfigError, match=r"plan.nodes, plan.gpus_per_node describe the cluster only without plan.cluster"):
        PlanSettings(cluster=str(tmp_path / "c.yaml"), nodes=4, gpus_per_node=2)


def _config_and_settings(overrides):
    config = load_plan_config(PRESET, overrides)
    return config, config.plan


def test_plan_prints_the_engines_and_what_each_wrapper_adds(capsys, tmp_path):
    from webrl.policy.cascade.heads import DEFAULT_KINDS, DecisionHeads, HeadsConfig, save_heads

    from tests.skills.test_guided import LIBRARY

    heads = str(save_heads(DecisionHeads(8, HeadsConfig()), tmp_path / "heads"))
    library = str(LIBRARY.save(tmp_path / "skills"))
    assert cli_main(["plan", "--config", PRESET, f"plan.model={FIXTURE}", "plan.prompt_tokens=4096",
                     "policy.wrappers=[skills,loci,cascade]", f"policy.cascade.heads_dir={heads}",
                     f"policy.skills.library_dir={library}",
                     "policy.loci.max_rounds=2", "policy.loci.retries=1"]) == 0
    out = capsys.readouterr().out
    assert "capability" in out and "rollout.engine=transformers | rollout.engine=server" in out
    # heads at H=2560, d=128, query last+goal (5120), visual element features (2560), K=9 kinds:
    #   kind MLP 5120*128+128 + 128*9+9, target q 5120*128+128 and k 2560*128+128, value q and k
    #   the same, write 128 -> 3*655488 + 2*327808 + 128 + 129*9 = 2623369
    assert len(DEFAULT_KINDS) == 9 and "cascade: heads 2,623,369 parameters" in out
    # 4096 rows x 2560 x 4 bytes = 40 MiB, over HTTP: the preset's engine is the server
    assert "4096 x 2560 hidden rows returned over HTTP (40.0 MiB fp32)" in out
    assert "loci: no weights of its own; per decision up to 8 role requests" in out  # 2 rounds x 2 roles x 2
    assert "skills: no GPU bytes" in out

"""benchmarks/gui_libra.py plumbing: the two variants differ only in the SFT token weights."""
import argparse
import dataclasses
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("gui_libra", ROOT / "benchmarks" / "gui_libra.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_variants_share_the_recipe_and_differ_only_in_the_sft_weights(tmp_path):
    bench = _module()
    args = argparse.Namespace(epochs=2, batch_size=16, episodes=0)
    uniform = bench.recipe_config(tmp_path / "u", "/demos", args, "uniform")
    aware = bench.recipe_config(tmp_path / "u", "/demos", args, "action_aware")
    assert (uniform.sft.action_weight, uniform.sft.coordinate_factor) == (1.0, 1.0)
    assert (aware.sft.action_weight, aware.sft.coordinate_factor) == (2.0, 2.0)
    same = dataclasses.replace(aware.sft, action_weight=1.0, coordinate_factor=1.0)
    assert same == uniform.sft and aware.generator == uniform.generator and aware.model == uniform.model
    # the shipped recipe's model and prompt: pointer actions, 128 element tokens, lr 2e-3, batch 16
    assert uniform.generator.prompt.action_format == "pointer" and uniform.model.tiny_element_tokens == 128
    assert uniform.sft.lr == 2e-3 and uniform.sft.batch_size == 16 and uniform.sft.curriculum == []

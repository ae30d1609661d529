"""Engine factory: `cascade.heads_dir` wraps the rollout generator in the decision-heads cascade."""
import pytest
import torch

from webrl.policy.generator import GeneratorConfig, GeneratorPolicy, SamplingConfig
from webrl.policy.heads import DecisionHeads, HeadsConfig, save_heads
from webrl.policy.prompt import PromptConfig
from webrl.policy.synthetic_som import make_steps
from webrl.rollout.engines import GeneratorEngineFactory
from webrl.train_config import RolloutCascadeConfig


def _generator() -> GeneratorConfig:
    return GeneratorConfig(prompt=PromptConfig(action_format="som", think=False, min_pixels=1024,
                                               max_pixels=48 * 28 * 28),
                           sampling=SamplingConfig(greedy=True, max_new_tokens=8))


def test_heads_dir_wraps_the_generator_and_weight_sync_reaches_it(tiny_qwen25vl_path, tmp_path):
    plain = GeneratorEngineFactory(tiny_qwen25vl_path, _generator(), cascade=RolloutCascadeConfig())()
    assert isinstance(plain.policy, GeneratorPolicy)  # empty heads_dir: no cascade

    heads = DecisionHeads(plain.model.config.text_config.hidden_size, HeadsConfig())
    save_heads(heads, tmp_path / "heads", generator=tiny_qwen25vl_path)
    cascade = RolloutCascadeConfig(threshold=0.0, heads_dir=str(tmp_path / "heads"))
    engine = GeneratorEngineFactory(tiny_qwen25vl_path, _generator(), cascade=cascade)()
    # threshold 0: the heads decide every step of Set-of-Mark observations (text only for WRITE)
    decisions = engine.act([s.request for s in make_steps(2, seed=5)])
    assert [d.decided_by in ("heads", "heads+write") for d in decisions] == [True, True]

    name, param = next(iter(engine.model.named_parameters()))
    engine.load_weights({name: torch.zeros_like(param)})
    assert engine.policy.generator.model is engine.model and float(param.abs().sum()) == 0.0


def test_a_missing_heads_folder_is_named(tiny_qwen25vl_path, tmp_path):
    factory = GeneratorEngineFactory(tiny_qwen25vl_path, _generator(),
                                     cascade=RolloutCascadeConfig(heads_dir=str(tmp_path / "nowhere")))
    with pytest.raises(FileNotFoundError, match="nowhere"):
        factory()

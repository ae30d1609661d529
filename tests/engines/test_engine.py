"""Engine factory: the generator wrapped in `policy.wrappers`, and weight sync reaching the generator."""
import pytest
import torch

from webrl.policy.cascade.policy import CascadePolicy
from webrl.policy.generator import GeneratorConfig, GeneratorPolicy, SamplingConfig
from webrl.policy.cascade.heads import DecisionHeads, HeadsConfig, save_heads
from webrl.policy.loci.policy import LociConfig, LociPolicy
from webrl.policy.prompt import PromptConfig
from webrl.policy.stack import CascadeWrapperConfig, PolicyConfig
from webrl.policy.cascade.synthetic import make_steps
from webrl.engines.engine import GeneratorEngineFactory


def _generator() -> GeneratorConfig:
    return GeneratorConfig(prompt=PromptConfig(action_format="som", think=False, min_pixels=1024,
                                               max_pixels=48 * 28 * 28),
                           sampling=SamplingConfig(greedy=True, max_new_tokens=8))


def _zero_first_parameter(engine) -> torch.Tensor:
    name, param = next(iter(engine.model.named_parameters()))
    engine.load_weights({name: torch.zeros_like(param)})
    return param.detach()


def test_no_wrappers_is_the_plain_generator(tiny_qwen25vl_path):
    engine = GeneratorEngineFactory(tiny_qwen25vl_path, _generator())()
    assert isinstance(engine.policy, GeneratorPolicy) and engine.model is engine.policy.model
    assert float(_zero_first_parameter(engine).abs().sum()) == 0.0
    with pytest.raises(KeyError, match="parameters the model does not have"):
        engine.load_weights({"no.such.weight": torch.zeros(1)})


def test_the_stack_wraps_the_generator_and_weight_sync_reaches_it(tiny_qwen25vl_path, tmp_path):
    plain = GeneratorEngineFactory(tiny_qwen25vl_path, _generator())()
    heads = DecisionHeads(plain.model.config.text_config.hidden_size, HeadsConfig())
    save_heads(heads, tmp_path / "heads", generator=tiny_qwen25vl_path)
    stack = PolicyConfig(["loci", "cascade"], CascadeWrapperConfig(threshold=0.0, heads_dir=str(tmp_path / "heads")),
                         LociConfig(max_rounds=1))
    engine = GeneratorEngineFactory(tiny_qwen25vl_path, _generator(), policy=stack)()
    assert isinstance(engine.policy, LociPolicy) and isinstance(engine.policy.inner, CascadePolicy)
    generator = engine.policy.inner.generator
    assert generator.model is engine.model and engine.policy.locator.model is engine.model
    # LOCI searched first (one round, roles played by the generator's model); then, at threshold 0,
    # the heads decide every step of Set-of-Mark observations (text only for WRITE)
    decisions = engine.act([s.request for s in make_steps(2, seed=5)])
    assert [d.loci.rounds for d in decisions] == [1, 1] and [d.loci.locator_calls >= 1 for d in decisions] == [True] * 2
    assert [d.decided_by in ("heads", "heads+write") for d in decisions] == [True, True]

    zeroed = _zero_first_parameter(engine)
    # the cascade and the LOCI roles read the very tensor that was replaced
    first = next(iter(generator.model.parameters()))
    assert float(zeroed.abs().sum()) == 0.0 and first.data_ptr() == zeroed.data_ptr()

"""Vision placeholder tokens are never sampled (one in a response would break the learner)."""
import torch

from webrl.models import load_model
from webrl.policy import GeneratorConfig, GeneratorPolicy, Observation, PolicyRequest, SamplingConfig
from webrl.types import Image


def test_vision_tokens_are_never_generated_even_when_the_model_prefers_them(tiny_qwen25vl_path):
    model, processor = load_model(tiny_qwen25vl_path)
    vocab = processor.tokenizer.get_vocab()
    pad = vocab["<|image_pad|>"]
    with torch.no_grad():  # make <|image_pad|> by far the most likely next token everywhere
        model.lm_head.weight[pad] = model.lm_head.weight.abs().max() * 50
    policy = GeneratorPolicy(model, processor, GeneratorConfig(sampling=SamplingConfig(max_new_tokens=8)))
    shot = Image.from_array(torch.full((56, 84, 3), 200, dtype=torch.uint8).numpy())
    decisions = policy.act([PolicyRequest(Observation(goal="click the button", screenshot=shot))] * 2)
    for d in decisions:
        assert d.response_ids and not set(d.response_ids) & set(policy.backend.suppress_ids)

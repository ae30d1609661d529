"""The policy layer: observations in, actions out, with the exact tokens the learner trains on.

    Observation / PolicyRequest / Decision / Policy     webrl.policy.types
    PromptConfig / PromptBuilder (context modes, K screenshots, token budget)   webrl.policy.prompt
    make_format("som" | "computer_use" | "compact", family)   webrl.policy.formats
    smart_resize / ImageGeometry                          webrl.policy.images
    GeneratorPolicy (transformers) / EndpointPolicy (OpenAI-compatible HTTP)
    sft_samples_from_trajectory / load_sharegpt           webrl.policy.sft
    LociConfig / LociPolicy / loci_policy / loci_answer   webrl.policy.loci (Locator-Critic: policy, roles)
    CascadePolicy / DecisionHeads                         webrl.policy.cascade (policy, heads; import on use: torch)
    WRAPPERS / PolicyConfig / CascadeConfig / build_policy   webrl.policy.stack (the wrapper stack of a run)
"""
from webrl.policy.endpoint import EndpointConfig, EndpointPolicy
from webrl.policy.formats import FORMAT_NAMES, extract_call, make_format, strip_thinking
from webrl.policy.generator import GeneratorConfig, GeneratorPolicy, SamplingConfig
from webrl.policy.images import ImageGeometry, image_token_count, smart_resize
from webrl.policy.loci.policy import LociConfig, LociPolicy
from webrl.policy.loci.roles import loci_answer, loci_policy
from webrl.policy.prompt import CONTEXT_MODES, Message, PromptBuilder, PromptConfig, RenderedPrompt, render_chatml
from webrl.policy.sft import SFTSample, load_sharegpt, sft_samples_from_trajectory
from webrl.policy.stack import WRAPPERS, CascadeConfig, CascadeWrapperConfig, PolicyConfig, build_policy
from webrl.policy.types import Decision, DecisionStats, Observation, Policy, PolicyRequest

__all__ = [
    "EndpointConfig", "EndpointPolicy", "FORMAT_NAMES", "extract_call", "make_format", "strip_thinking",
    "GeneratorConfig", "GeneratorPolicy", "SamplingConfig", "ImageGeometry", "image_token_count", "smart_resize",
    "CONTEXT_MODES", "Message", "PromptBuilder", "PromptConfig", "RenderedPrompt", "render_chatml",
    "SFTSample", "load_sharegpt", "sft_samples_from_trajectory", "Decision", "DecisionStats", "Observation",
    "Policy", "PolicyRequest", "LociConfig", "LociPolicy", "loci_answer", "loci_policy",
    "WRAPPERS", "CascadeConfig", "CascadeWrapperConfig", "PolicyConfig", "build_policy",
]

"""`webrl plan`'s printed report and its command config: the placement table, the per-GPU
memory tables, the verdict with its warnings (`webrl.run.plan` computes them).

    webrl plan --config online_mind2web_qwen3vl_4b plan.model=qwen3-vl-4b plan.gpus_per_node=8 plan.gpu_memory_gb=80
    print(format_plan(plan_memory(config, config.plan)))   # what `webrl plan` prints
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from webrl.config import ConfigError
from webrl.run.memory import GIB, MODEL_SHAPES
from webrl.run.plan import MemoryPlan, PlanSettings, gpu_share, plan_memory


def format_plan(plan: MemoryPlan) -> str:
    """The placement table, the per-GPU memory table and the verdict with its warnings."""
    s, lm, rm = plan.shapes, plan.learner, plan.rollout
    gib = lambda b: f"{b / GIB:10.2f}"  # noqa: E731
    lines = [plan.placement, "",
             f"model {s.family}: {s.parameters / 1e9:.3f}B parameters (text {s.text_parameters:,}, vision "
             f"{s.vision_parameters:,}); L={s.layers} H={s.hidden} heads={s.heads}/{s.kv_heads}x{s.head_dim} "
             f"I={s.intermediate} V={s.vocab}", "",
             f"{'per learner GPU':<44}{'GiB':>10}"]
    ckpt = "counted" if lm.checkpointing else "not counted"
    for name, value in (("weights", lm.weights), ("gradients", lm.gradients), ("optimizer states", lm.optimizer),
                        ("optimizer step temporaries", lm.step_buffers), ("reference model", lm.reference),
                        (f"activations, no checkpointing ({'not counted' if lm.checkpointing else 'counted'})",
                         lm.activations),
                        (f"activations, checkpointing ({ckpt})", lm.activations_checkpointed),
                        ("log-prob path", lm.logprobs), ("total", lm.total)):
        lines.append(f"{name:<44}{gib(value)}")
    lines += ["", f"{f'per rollout inference GPU, {rm.batch} rows at once':<44}{'GiB':>10}"]
    for name, value in (("weights", rm.weights), ("KV cache", rm.kv_cache), ("prefill peak (one MLP)", rm.prefill),
                        (f"logits, SampledLogprobs ({'not counted' if rm.full_logits else 'counted'})",
                         rm.logits_sampled),
                        (f"logits, output_logits stack ({'counted' if rm.full_logits else 'not counted'})",
                         rm.logits_full), ("total", rm.total)):
        lines.append(f"{name:<44}{gib(value)}")
    lines.append(f"{'usable per GPU':<44}{gib(plan.gpu_bytes)}")
    lines.append("")
    if plan.refusal:
        lines.append(f"DOES NOT FIT: cannot be placed: {plan.refusal}")
    lines += plan.notes + plan.warnings
    lines += ["", *plan.engine_lines, ""] if plan.engine_lines else []
    usage = [f"{kind} GPU {total / GIB:.1f} of {capacity / GIB:.1f} GiB"
             for kind, total, capacity, gpus in (
                 ("learner", lm.total, plan.gpu_bytes * gpu_share(plan.learner_gpus or 1.0), plan.learner_gpus),
                 ("rollout", plan.rollout_need, plan.rollout_capacity, plan.rollout_gpus)) if gpus]
    lines.append(("FITS" if plan.fits else "DOES NOT FIT") + (f": {', '.join(usage)}" if usage else
                                                             " (no GPUs asked for: nothing to check)"))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _plan_command_schema():
    """`PlanCommandConfig`: built on first use, so importing the plan imports no training code."""
    from webrl.run.config import WebRLConfig

    @dataclass
    class PlanCommandConfig(WebRLConfig):
        """A training config plus the `plan.*` keys."""

        plan: PlanSettings = field(default_factory=PlanSettings)
        """Model shapes and the cluster to plan against."""

    return PlanCommandConfig


def __getattr__(name: str):
    if name == "PlanCommandConfig":  # "webrl.run.plan_report:PlanCommandConfig" for webrl.cli's COMMANDS
        return _plan_command_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_plan_config(preset: Optional[str], overrides: Sequence[str]):
    """The training config of `preset` + overrides, with `plan.*` keys. Keys a preset marks
    required (`???`) and the plan does not read are filled with a placeholder, so
    `webrl plan --config online_mind2web_qwen3vl_4b plan.model=qwen3-vl-4b` needs no task file or judge."""
    from omegaconf import OmegaConf

    from webrl.config import _preset_path, load_config

    given = {o.split("=", 1)[0] for o in overrides}
    fill = []
    if preset:
        for key in OmegaConf.missing_keys(OmegaConf.load(_preset_path(preset))):
            if key not in given:
                fill.append(f"{key}={_placeholder(key)}")
    return load_config(_plan_command_schema(), preset, [*fill, *overrides])


def _placeholder(key: str) -> str:
    """A value that passes validation for a required key the plan never reads."""
    if key == "model.path":
        return ""  # the shapes come from plan.model
    return "http://unset-by-webrl-plan.invalid" if key.endswith("url") else "unset-by-webrl-plan"




def plan_main(config: Any) -> int:
    """`webrl plan` on a `PlanCommandConfig` (`load_plan_config`): print the plan; 0 = fits, 1 = does not."""
    if not (config.plan.model or config.model.path):
        raise ConfigError("webrl plan needs model shapes: set plan.model (a shape preset: "
                          f"{', '.join(MODEL_SHAPES)}, a config.json path or a checkpoint folder) or model.path")
    plan = plan_memory(config, config.plan)
    print(format_plan(plan))
    return 0 if plan.fits else 1

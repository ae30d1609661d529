"""Stages a run composes besides the RL loop: `sft_stage` (webrl.recipes.sft)."""
from webrl.recipes.sft import demonstrations, sft_stage

__all__ = ["demonstrations", "sft_stage"]

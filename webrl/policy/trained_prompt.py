"""The prompt a checkpoint was trained with, read against `PromptConfig`.

A policy reads its prompts well only in the format it learned, so a checkpoint carries its
prompt settings (`hf/webrl_prompt.json`, plain data kept by `webrl.models.shipped`). Here they
are interpreted: keys that are not `PromptConfig` fields (written by another webrl version) are
left out, and a run's prompt is compared with them.
"""
from __future__ import annotations

from dataclasses import fields

from webrl.models.shipped import read_trained_prompt
from webrl.policy.prompt import PromptConfig


def trained_prompt(path: str) -> dict:
    """The `PromptConfig` fields a checkpoint at `path` was trained with ({} without a record)."""
    known = {f.name for f in fields(PromptConfig)}
    return {k: v for k, v in read_trained_prompt(path).items() if k in known}


def check_prompt_matches(path: str, prompt: PromptConfig) -> None:
    """Raise ValueError naming each `generator.prompt` key that differs from the settings the
    checkpoint at `path` was trained with (no record: nothing to check)."""
    wanted = trained_prompt(path)
    wrong = {k: (getattr(prompt, k), v) for k, v in wanted.items() if getattr(prompt, k) != v}
    if wrong:
        detail = ", ".join(f"generator.prompt.{k}={got!r} (trained with {v!r})" for k, (got, v) in sorted(wrong.items()))
        raise ValueError(f"{path} was trained with other prompt settings: {detail}")

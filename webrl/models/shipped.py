"""Checkpoints shipped inside the package (`webrl/assets/<name>/`), addressed as `webrl:<name>`.

    load_model("webrl:tiny-webagent-pointer")               # or model.path=webrl:tiny-webagent-pointer

`tiny-webagent-pointer` (the default's starting point) and `tiny-webagent` are ~1 M-parameter
Qwen2.5-VL-architecture policies trained by webrl's own SFT recipes on sandbox oracle
demonstrations (`webrl/configs/tiny_webagent_pointer_sft.yaml`: elements chosen by an element
pointer; `tiny_webagent_sft.yaml`: element ids generated as digits); each MODEL_CARD.md gives
the command, the seed, the data and its held-out success. Each shipped
folder also holds `webrl_prompt.json`, the prompt settings it was trained with: a policy reads
its prompts well only in that format (`check_prompt_matches`).
"""
from __future__ import annotations

import json
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"
PREFIX = "webrl:"


def shipped_names() -> list[str]:
    return sorted(p.name for p in ASSETS.iterdir() if (p / "config.json").exists()) if ASSETS.exists() else []


def resolve_shipped(path: str) -> str:
    """`webrl:<name>` -> the packaged folder; any other path is returned unchanged."""
    path = str(path)
    if not path.startswith(PREFIX):
        return path
    name = path[len(PREFIX):]
    folder = ASSETS / name
    if not (folder / "config.json").exists():
        raise FileNotFoundError(f"no shipped checkpoint {path!r}; shipped: "
                                f"{', '.join(PREFIX + n for n in shipped_names()) or '(none)'}")
    return str(folder)


def trained_prompt(path: str) -> dict:
    """The prompt settings a checkpoint was trained with (`webrl_prompt.json`), or {}; keys that
    are not `PromptConfig` fields (written by another webrl version) are left out."""
    from dataclasses import fields

    from webrl.policy.prompt import PromptConfig

    file = Path(resolve_shipped(path)) / "webrl_prompt.json"
    known = {field.name for field in fields(PromptConfig)}
    return {k: v for k, v in json.loads(file.read_text()).items() if k in known} if file.exists() else {}


def check_prompt_matches(path: str, prompt) -> None:
    """Raise ValueError naming each `generator.prompt` key that differs from the settings the
    checkpoint at `path` was trained with (no file: nothing to check)."""
    wanted = trained_prompt(path)
    wrong = {k: (getattr(prompt, k), v) for k, v in wanted.items() if getattr(prompt, k, v) != v}
    if wrong:
        detail = ", ".join(f"generator.prompt.{k}={got!r} (trained with {v!r})" for k, (got, v) in sorted(wrong.items()))
        raise ValueError(f"{path} was trained with other prompt settings: {detail}")

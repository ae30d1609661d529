"""Checkpoints shipped inside the package (`webrl/assets/<name>/`), addressed as `webrl:<name>`.

    load_model("webrl:tiny-webagent-pointer")               # or model.path=webrl:tiny-webagent-pointer

`tiny-webagent-pointer` (the default's starting point) and `tiny-webagent` are ~1 M-parameter
Qwen2.5-VL-architecture policies trained by webrl's own SFT recipes on sandbox oracle
demonstrations (`webrl/configs/tiny_webagent_pointer_sft.yaml`: elements chosen by an element
pointer; `tiny_webagent_sft.yaml`: element ids generated as digits); each MODEL_CARD.md gives
the command, the seed, the data and its held-out success. Each shipped
folder also holds `webrl_prompt.json`, the prompt settings it was trained with: a policy reads
its prompts well only in that format (`webrl.policy.trained_prompt.check_prompt_matches`).
"""
from __future__ import annotations

import json
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"
PREFIX = "webrl:"
PROMPT_FILE = "webrl_prompt.json"


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


def read_trained_prompt(path: str) -> dict:
    """The prompt settings a checkpoint was trained with, as written (`webrl_prompt.json`), or {}.
    Plain data: `webrl.policy.trained_prompt` interprets them against the prompt config."""
    file = Path(resolve_shipped(path)) / PROMPT_FILE
    return json.loads(file.read_text()) if file.exists() else {}


def write_trained_prompt(checkpoint: str | Path, settings: dict) -> None:
    """`<checkpoint>/hf/webrl_prompt.json`: the prompt settings these weights were trained with.
    Not in the checkpoint manifest: the weights are verified, this record is not."""
    (Path(checkpoint) / "hf" / PROMPT_FILE).write_text(json.dumps(settings, indent=1))

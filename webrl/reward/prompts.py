"""Versioned judge prompts, one file per prompt under `webrl/reward/prompts/<name>_v<N>.txt`.

File format: leading `#` comment lines, then a `[system]` section and a `[user]` section.
Fields are `$name` placeholders (`string.Template`): values are inserted verbatim and never
re-parsed, so a task or page text containing `$`, braces or "Verdict:" cannot change the
template. A changed prompt gets a new file (`_v2`); old versions stay so that published
numbers can be reproduced. The cache key includes each prompt's content hash, so editing a
file in place also invalidates its cached verdicts.
"""
from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

PROMPT_DIR = Path(__file__).parent / "prompts"


@dataclass(frozen=True)
class Prompt:
    """A system + user prompt pair; `name` is the file stem (e.g. "webjudge_outcome_v1")."""

    name: str
    system: str
    user: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(f"{self.system}\0{self.user}".encode()).hexdigest()[:16]

    @property
    def fields(self) -> set[str]:
        return {m.group(1) or m.group(2) for m in Template.pattern.finditer(self.system + self.user)
                if m.group(1) or m.group(2)}

    def render(self, **values: object) -> tuple[str, str]:
        """(system, user) with every field filled; a missing or unknown field raises KeyError."""
        unknown = set(values) - self.fields
        if unknown:
            raise KeyError(f"prompt {self.name} has no field(s) {sorted(unknown)}; fields: {sorted(self.fields)}")
        strs = {k: str(v) for k, v in values.items()}
        return Template(self.system).substitute(strs), Template(self.user).substitute(strs)


def available_prompts() -> list[str]:
    return sorted(p.stem for p in PROMPT_DIR.glob("*.txt"))


@functools.lru_cache(maxsize=None)
def load_prompt(name: str) -> Prompt:
    """Read `prompts/<name>.txt`. Unknown names list the available ones."""
    path = PROMPT_DIR / f"{name}.txt"
    if not path.exists():
        raise ValueError(f"unknown prompt {name!r}; available: {', '.join(available_prompts())}")
    text = path.read_text(encoding="utf-8")
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    m = re.fullmatch(r"\s*\[system\]\n(.*?)\n\[user\]\n(.*)", body, re.S)
    if not m:
        raise ValueError(f"{path}: expected a [system] section followed by a [user] section")
    return Prompt(name, m.group(1).strip(), m.group(2).strip())

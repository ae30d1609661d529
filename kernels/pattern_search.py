"""Offline per-head pattern search for the sparse prefill, and the `sparse_patterns.json` file.

    table = PatternTable(config=SparsePrefillConfig(budget=0.25))
    for layer, (q, k) in captured:            # q (H, T, D), k (Hkv, T, D) of one calibration prompt
        recalls = head_recalls(q, k, layout, table.config)
        table.add_recalls(layer, recalls)     # summed over prompts
    table.prompts += 1                        # once per prompt
    table.choose(min_recall=0.9).save(checkpoint_dir / PATTERNS_FILE)

For every (layer, head) and every sparse pattern, the recall is the share of the dense causal
softmax mass that falls on the keys the pattern's block mask keeps (averaged over queries and
over calibration prompts) at the table's budget. The chosen pattern is the one of highest mean
recall; a head whose best recall is below `min_recall` stays "dense". MMInference picks the
pattern whose recall beats the previous best by a margin, searching stride and shift too; here
the candidate set is fixed (`SEARCHED`) and ties go to the earlier, cheaper-to-build pattern.
Cost: one T x T probability matrix per head, so calibrate on prompts of a few thousand tokens.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from torch import Tensor

from webrl.kernels.sparse_prefill import (ModalityLayout, SparsePrefillConfig, SparsePrefillError,
                                          attention_recall, build_block_plan, check_pattern)

PATTERNS_FILE = "sparse_patterns.json"
SEARCHED = ("a_shape", "vertical_slash", "grid")
FORMAT_VERSION = 1


@dataclass
class PatternTable:
    """Per-(layer, head) patterns plus the block-mask settings they were searched with."""

    config: SparsePrefillConfig = field(default_factory=SparsePrefillConfig)
    default: str = "grid"
    """Pattern of heads the table does not list (e.g. "auto" without a searched file)."""
    layers: dict[int, list[str]] = field(default_factory=dict)
    """layer index -> one pattern name per query head."""
    recalls: dict[int, list[dict[str, float]]] = field(default_factory=dict)
    """layer -> per head {pattern: summed recall}; `prompts` counts the calibration prompts."""
    prompts: int = 0

    def __post_init__(self):
        check_pattern(self.default, "PatternTable.default")
        for layer, names in self.layers.items():
            for name in names:
                check_pattern(name, f"sparse_patterns.json layers[{layer}]")

    def for_layer(self, layer: int, heads: int) -> list[str]:
        names = self.layers.get(layer, [self.default] * heads)
        if len(names) != heads:
            raise SparsePrefillError(f"sparse_patterns.json layers[{layer}] has {len(names)} heads, the model {heads}")
        return names

    def add_recalls(self, layer: int, recalls: list[dict[str, float]]) -> None:
        """Accumulate one prompt's per-head recalls of `layer` (and add 1 to `prompts` per prompt)."""
        total = self.recalls.setdefault(layer, [{} for _ in recalls])
        for acc, head in zip(total, recalls):
            for name, value in head.items():
                acc[name] = acc.get(name, 0.0) + value

    def choose(self, min_recall: float = 0.9) -> "PatternTable":
        """Fill `layers` from the accumulated recalls (mean over `prompts`)."""
        if not self.prompts:
            raise SparsePrefillError("PatternTable.choose: no calibration prompts were counted")
        for layer, heads in self.recalls.items():
            picks = []
            for head in heads:
                best = max(SEARCHED, key=lambda name: (head.get(name, 0.0), -SEARCHED.index(name)))
                picks.append(best if head.get(best, 0.0) / self.prompts >= min_recall else "dense")
            self.layers[layer] = picks
        return self

    def save(self, path) -> Path:
        path = Path(path)
        data = {"format": FORMAT_VERSION, "config": dataclasses.asdict(self.config), "default": self.default,
                "prompts": self.prompts, "layers": {str(k): v for k, v in sorted(self.layers.items())},
                "mean_recalls": {str(k): [{n: r / max(self.prompts, 1) for n, r in h.items()} for h in v]
                                 for k, v in sorted(self.recalls.items())}}
        path.write_text(json.dumps(data, indent=1))
        return path

    @classmethod
    def load(cls, path) -> "PatternTable":
        data = json.loads(Path(path).read_text())
        if data.get("format") != FORMAT_VERSION:
            raise SparsePrefillError(f"{path}: format must be {FORMAT_VERSION}, got {data.get('format')!r}")
        unknown = set(data["config"]) - {f.name for f in dataclasses.fields(SparsePrefillConfig)}
        if unknown:
            raise SparsePrefillError(f"{path}: unknown config keys {sorted(unknown)}")
        return cls(config=SparsePrefillConfig(**data["config"]), default=data.get("default", "grid"),
                   layers={int(k): list(v) for k, v in data.get("layers", {}).items()})


def head_recalls(q: Tensor, k: Tensor, layout: ModalityLayout, config: SparsePrefillConfig,
                 candidates=SEARCHED) -> list[dict[str, float]]:
    """Per head {pattern: mean recall over the prompt's queries} at `config.budget`."""
    H = q.shape[0]
    out = [{} for _ in range(H)]
    for name in candidates:
        check_pattern(name, "pattern_search candidate")
        plan = build_block_plan(q, k, layout, [name] * H, config)
        recall = attention_recall(q, k, plan).mean(-1)  # (H,)
        for h in range(H):
            out[h][name] = float(recall[h])
    return out


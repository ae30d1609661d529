"""Decision heads on a frozen Qwen-VL generator: action type, Set-of-Mark target, value.

The heads read the hidden states that the generator computes while it prefills the prompt
(goal + history + current screenshot + element list), at one configurable layer, and answer
the three choices most of an action's text encodes:

- **action type** from the prompt state q (an MLP over `kinds`);
- **target**: for every numbered Set-of-Mark box j, the hidden states of the merged visual tokens
  whose image cells overlap the box are mean-pooled into e_j; score_j = <Wq q, Wk e_j> / sqrt(d);
- **value**: a pointer over the listed text options of the target (e.g. a select's options,
  each option's tokens in the element list mean-pooled) plus a learned WRITE slot that means
  "the generator writes new text".

Notation: P prompt tokens, H hidden size, N Set-of-Mark elements, M options of one element,
K action kinds, d = `head_dim`. Visual grid of the current screenshot: image_grid_thw = (t, gh, gw)
patches; merged tokens form a (gh / m) x (gw / m) grid, m = spatial merge (2), row-major, each
cell covering factor = patch * m pixels of the resized image (28 for Qwen2.5-VL, 32 for Qwen3-VL).

Design choices (the method's text is an abstract; everything below is ours and configurable):

- `layer`: index into transformers' `hidden_states` (0 = embeddings, -1 = last, post-norm).
- `query`: "last" = the last prompt position (as described); "last+goal" concatenates the mean
  hidden state over the goal's tokens. A tiny random generator mixes the goal into the last
  position weakly; the goal span gives the heads a direct view of it.
- `query_prefix`: the query is read after feeding this text through the prompt's cache. The
  last prompt position of a model trained on `<tool_call>click(...)` predicts the constant
  `<tool_call>`, not the kind: after the prefix it predicts the kind. The cascade reuses the
  prefix for a heads decision that starts with it and drops it from the cache otherwise, so the
  generator's own decoding is unchanged.
- `target_features`: "visual" pools visual tokens inside the box (as described); "text" pools
  the element's line in the element list; "both" concatenates the two. A box with no cell (off
  screen) gets a zero visual vector.
- `box_cells`: "overlap" = every cell whose area intersects the box (a box always covers at least
  one cell when on screen); "center" = cells whose centre lies inside the box, falling back to
  the cell under the box centre for boxes smaller than a cell.
- `kinds`: the classes of the type head; "other" absorbs actions the heads cannot express
  (press, goto, tabs, ...): it is never proposed, its mass lowers the heads' confidence.
- Heads see inputs through a parameter-free LayerNorm: hidden-state scales differ by layer.

Training (frozen generator, features cached once): `webrl.policy.cascade.train`. Inference and how
head-decided turns enter the policy-gradient batch: `webrl.policy.cascade.policy`. The heads need each
step's boxes and options: `webrl.policy.cascade.features.MarkedObservation` carries them.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch
from torch import nn

DEFAULT_KINDS = ("click", "type", "select", "scroll_down", "scroll_up", "back", "answer", "stop", "other")
KINDS_WITH_ELEMENT = ("click", "type", "select")
KINDS_WITH_TEXT = ("type", "select", "answer")
QUERY_MODES = ("last", "last+goal")
TARGET_FEATURES = ("visual", "text", "both")
BOX_CELLS = ("overlap", "center")
HEADS_FILE, CONFIG_FILE = "heads.pt", "heads_config.json"


@dataclass
class HeadsConfig:
    """Decision heads: which hidden states they read and how large they are."""

    layer: int = -1
    """Index into the generator's `hidden_states` (0 = embeddings, -1 = last layer)."""
    query: str = "last+goal"
    """Prompt state: "last" (last prompt position) or "last+goal" (plus the mean over the goal tokens)."""
    query_prefix: str = ""
    """Text fed after the prompt before the query is read ("" = the last prompt position). With
    "<tool_call>", the token every compact / pointer action starts with, the query is the state
    that predicts the action's first word, i.e. its kind (`head_features.prefill`)."""
    target_features: str = "visual"
    """Element representation: "visual" (box-pooled visual tokens), "text" (its list line) or "both"."""
    box_cells: str = "overlap"
    """Which merged cells belong to a box: "overlap" (any intersection) or "center" (centre inside)."""
    kinds: tuple[str, ...] = DEFAULT_KINDS
    """Classes of the action-type head; must contain "other"."""
    head_dim: int = 128
    """Width d of the heads' projections."""
    dropout: float = 0.0
    """Dropout on the heads' inputs while training."""
    scroll_amount: Optional[float] = None
    """Viewport fraction of a heads-decided scroll (None: the env's default)."""

    def __post_init__(self) -> None:
        self.kinds = tuple(self.kinds)
        if self.query not in QUERY_MODES:
            raise ValueError(f"HeadsConfig.query must be one of {QUERY_MODES}, got {self.query!r}")
        if self.target_features not in TARGET_FEATURES:
            raise ValueError(f"HeadsConfig.target_features must be one of {TARGET_FEATURES}, "
                             f"got {self.target_features!r}")
        if self.box_cells not in BOX_CELLS:
            raise ValueError(f"HeadsConfig.box_cells must be one of {BOX_CELLS}, got {self.box_cells!r}")
        unknown = set(self.kinds) - set(DEFAULT_KINDS)
        if unknown or "other" not in self.kinds or len(set(self.kinds)) != len(self.kinds):
            raise ValueError(f"HeadsConfig.kinds must be distinct names from {DEFAULT_KINDS} including "
                             f"'other', got {self.kinds}")
        if self.head_dim < 1 or not 0 <= self.dropout < 1:
            raise ValueError(f"HeadsConfig.head_dim must be >= 1 and dropout in [0, 1), "
                             f"got {self.head_dim}, {self.dropout}")


# ---------------------------------------------------------------------------------------------
# geometry: Set-of-Mark boxes -> merged visual token indices
# ---------------------------------------------------------------------------------------------
def merged_grid(grid_thw: Sequence[int], merge: int = 2) -> tuple[int, int, int]:
    """(t, rows, cols) of merged visual tokens for one image's `image_grid_thw` row (t, gh, gw)."""
    t, gh, gw = (int(v) for v in grid_thw)
    if gh % merge or gw % merge:
        raise ValueError(f"image_grid_thw {tuple(grid_thw)} is not divisible by the merge size {merge}")
    return t, gh // merge, gw // merge


def box_cells(bbox: Sequence[float], image_size: tuple[int, int], grid: tuple[int, int],
              mode: str = "overlap") -> list[int]:
    """Row-major merged-cell indices covered by `bbox` = [x, y, w, h] in screenshot pixels.

    image_size = (W, H) of the screenshot; grid = (rows, cols) of merged tokens. The resized
    image is a uniform rescale of the screenshot (smart_resize), so cell c spans screenshot
    pixels [c * W / cols, (c + 1) * W / cols) horizontally, likewise vertically.
    """
    if mode not in BOX_CELLS:
        raise ValueError(f"mode must be one of {BOX_CELLS}, got {mode!r}")
    (W, H), (rows, cols) = image_size, grid
    x0, y0, w, h = (float(v) for v in bbox)
    x1, y1 = min(x0 + w, W), min(y0 + h, H)
    x0, y0 = max(x0, 0.0), max(y0, 0.0)
    if x1 <= x0 or y1 <= y0:
        return []
    cw, ch = W / cols, H / rows
    if mode == "overlap":
        c0, c1 = int(x0 // cw), min(cols - 1, math.ceil(x1 / cw) - 1)
        r0, r1 = int(y0 // ch), min(rows - 1, math.ceil(y1 / ch) - 1)
        return [r * cols + c for r in range(r0, r1 + 1) for c in range(c0, c1 + 1)]
    cells = [r * cols + c for r in range(rows) for c in range(cols)
             if x0 <= (c + 0.5) * cw < x1 and y0 <= (r + 0.5) * ch < y1]
    if not cells:  # smaller than a cell: the cell under the box centre
        cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
        cells = [min(rows - 1, int(cy // ch)) * cols + min(cols - 1, int(cx // cw))]
    return cells


def image_token_spans(input_ids: Sequence[int], image_token_id: int,
                      image_grid_thw: Sequence[Sequence[int]], merge: int = 2) -> list[tuple[int, int]]:
    """(start, count) of each image's contiguous run of visual tokens in `input_ids`, in order.

    count = t * (gh / m) * (gw / m) from `image_grid_thw`; raises if the ids disagree.
    """
    positions = [i for i, t in enumerate(input_ids) if t == image_token_id]
    spans, k = [], 0
    for thw in image_grid_thw:
        t, rows, cols = merged_grid(thw, merge)
        n = t * rows * cols
        run = positions[k:k + n]
        if len(run) != n or run[-1] - run[0] != n - 1:
            raise ValueError(f"image {len(spans)}: expected {n} contiguous visual tokens, found {len(run)}")
        spans.append((run[0], n))
        k += n
    if k != len(positions):
        raise ValueError(f"{len(positions)} visual tokens in the ids, image_grid_thw accounts for {k}")
    return spans


def box_token_indices(bboxes: Sequence[Sequence[float]], image_size: tuple[int, int], span_start: int,
                      grid_thw: Sequence[int], merge: int = 2, mode: str = "overlap") -> list[list[int]]:
    """Prompt positions of the visual tokens inside each box, for the image whose run starts at span_start.

    A multi-frame image (t > 1) repeats the grid per frame; screenshots have t = 1 and only the
    first frame is used.
    """
    _, rows, cols = merged_grid(grid_thw, merge)
    return [[span_start + c for c in box_cells(b, image_size, (rows, cols), mode)] for b in bboxes]


# ---------------------------------------------------------------------------------------------
# the heads
# ---------------------------------------------------------------------------------------------
@dataclass
class HeadInputs:
    """A padded batch of per-step features (all float32 except masks).

    query: (B, Fq) prompt state; elements: (B, N, Fe), element_mask: (B, N) bool;
    options: (B, M, H) option pooled states of the step's (gold or proposed) target,
    option_mask: (B, M) bool. Fq = H or 2H (query mode), Fe = H or 2H (target features).
    """

    query: torch.Tensor
    elements: torch.Tensor
    element_mask: torch.Tensor
    options: torch.Tensor
    option_mask: torch.Tensor


@dataclass
class HeadOutputs:
    """Logits: kind (B, K); target (B, N) with -inf at padding; value (B, 1 + M), index 0 = WRITE."""

    kind: torch.Tensor
    target: torch.Tensor
    value: torch.Tensor


class DecisionHeads(nn.Module):
    """Three small heads over frozen generator features (about 5 H d parameters)."""

    def __init__(self, hidden_size: int, config: HeadsConfig):
        super().__init__()
        self.config, self.hidden_size = config, hidden_size
        H, d = hidden_size, config.head_dim
        fq = H * (2 if config.query == "last+goal" else 1)
        fe = H * (2 if config.target_features == "both" else 1)
        self.norm_q, self.norm_e, self.norm_o = (nn.LayerNorm(f, elementwise_affine=False) for f in (fq, fe, H))
        self.drop = nn.Dropout(config.dropout)
        self.kind_mlp = nn.Sequential(nn.Linear(fq, d), nn.GELU(), nn.Linear(d, len(config.kinds)))
        self.target_q, self.target_k = nn.Linear(fq, d), nn.Linear(fe, d)
        self.value_q, self.value_k = nn.Linear(fq, d), nn.Linear(H, d)
        self.write = nn.Parameter(torch.zeros(d))

    def forward(self, x: HeadInputs) -> HeadOutputs:
        q = self.drop(self.norm_q(x.query))  # (B, Fq)
        scale = self.config.head_dim ** -0.5
        kind = self.kind_mlp(q)  # (B, K)
        e = self.target_k(self.drop(self.norm_e(x.elements)))  # (B, N, d)
        target = torch.einsum("bd,bnd->bn", self.target_q(q), e) * scale
        target = target.masked_fill(~x.element_mask, float("-inf"))
        o = self.value_k(self.norm_o(x.options))  # (B, M, d)
        slots = torch.cat([self.write.expand(o.shape[0], 1, -1), o], dim=1)  # (B, 1 + M, d)
        value = torch.einsum("bd,bmd->bm", self.value_q(q), slots) * scale
        write_ok = torch.ones(x.option_mask.shape[0], 1, dtype=torch.bool, device=x.option_mask.device)
        mask = torch.cat([write_ok, x.option_mask], dim=1)  # (B, 1 + M); M may be 0
        value = value.masked_fill(~mask, float("-inf"))
        return HeadOutputs(kind, target, value)


def heads_loss(out: HeadOutputs, kind: torch.Tensor, target: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Sum of the three cross-entropies; target / value labels of -1 (not applicable) are ignored.

    kind, target, value: (B,) long labels; value 0 = WRITE, 1 + i = option i.
    """
    import torch.nn.functional as F

    loss = F.cross_entropy(out.kind, kind)
    for logits, labels in ((out.target, target), (out.value, value)):
        keep = labels >= 0
        if keep.any():
            loss = loss + F.cross_entropy(logits[keep], labels[keep])
    return loss


# ---------------------------------------------------------------------------------------------
# persistence: beside the generator checkpoint, never inside it
# ---------------------------------------------------------------------------------------------
def default_heads_dir(generator_path: str | Path) -> Path:
    """`<generator>-heads` next to the generator folder (the generator folder stays untouched)."""
    p = Path(generator_path).resolve()
    return p.parent / f"{p.name}-heads"


def save_heads(heads: DecisionHeads, out_dir: str | Path, generator: str = "", metrics: Optional[dict] = None) -> Path:
    """Write heads.pt (state dict) and heads_config.json (config, hidden size, generator, metrics)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(heads.state_dict(), out / HEADS_FILE)
    meta = {"config": asdict(heads.config), "hidden_size": heads.hidden_size, "generator": str(generator),
            "metrics": metrics or {}}
    (out / CONFIG_FILE).write_text(json.dumps(meta, indent=1))
    return out


def load_heads(heads_dir: str | Path) -> DecisionHeads:
    """Heads saved by `save_heads`, in eval mode."""
    d = Path(heads_dir)
    meta = json.loads((d / CONFIG_FILE).read_text())
    heads = DecisionHeads(int(meta["hidden_size"]), HeadsConfig(**meta["config"]))
    heads.load_state_dict(torch.load(d / HEADS_FILE, map_location="cpu"))
    return heads.eval()


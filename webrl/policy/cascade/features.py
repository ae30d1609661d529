"""From a prompt to the decision heads' inputs: one prefill, then pooling over token spans.

    prefill(policy, request, layer, query_prefix) -> Prefill     the heads' one backend request
    step_features(prefill, observation, config) -> StepFeatures
    action_labels(action, elements, kinds) -> (kind, target, value) class indices

Token spans. Visual tokens of the current screenshot (the prompt's last image) come from
`image_grid_thw` (`webrl.policy.cascade.heads.box_token_indices`). Text spans (the goal, an element's
line, each listed option) are character spans of the rendered prompt mapped to tokens through
the tokenizer's offsets on the prompt with every image placeholder expanded exactly as the
processor expands it; the ids are checked equal to the processor's before any offset is used.

Element lines follow the env's `element_line` layout (`[12] combobox "Size" selected="M"
options=["S", "M", "L"]`, envs/observation.py): options are the quoted strings after
`options=[` on the element's line in the current observation's element list.

Notation: P prompt tokens, H hidden size, N elements, M options of one element.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

from webrl.actions import Action
from webrl.models.tokens import IM_END
from webrl.policy.cascade.heads import (KINDS_WITH_ELEMENT, HeadsConfig, box_token_indices, image_token_spans)
from webrl.policy.images import image_grid
from webrl.policy.prompt import RenderedPrompt
from webrl.policy.types import MarkedObservation, PolicyRequest, SoMElement

ELEMENTS_HEADER = "Elements:\n"


@dataclass
class Prefill:
    """What the heads read of one prompt. hidden: (P', H) rows at the heads' layer for positions
    0 .. P' - 1 (the prompt, then any query prefix); query: (H,) the heads' prompt state (the last
    row: the prompt's last token, or a query prefix's last token, `HeadsConfig.query_prefix`).
    `complete` is False when the backend served the prompt's start from its cache and returned
    no rows for it (an SGLang server's hidden states start after its cached prefix): the heads
    cannot read it and the generator decides. cached_tokens: prompt tokens the backend reused."""

    prompt: RenderedPrompt
    input_ids: list[int]
    image_grid_thw: list[list[int]]
    hidden: torch.Tensor
    query: Optional[torch.Tensor] = None
    prefix_ids: list[int] = field(default_factory=list)
    complete: bool = True
    cached_tokens: int = 0
    cache_key: Optional[str] = None
    """The backend's prefix-cache namespace of this prefill: requests that continue it pass it on."""


def prefill(policy, request: PolicyRequest, layer: int = -1, query_prefix: str = "",
            cache_key: Optional[str] = None) -> Prefill:
    """Render and tokenise `request` as `policy` (a `GeneratorPolicy`, on any backend) does and
    ask its backend for the hidden states at `layer` of the prompt followed by `query_prefix`'s
    tokens (nothing is sampled). The backend keeps the prompt's KV cache: the request that decodes
    next with the same `cache_key` reuses it (`Generated.cached_tokens`); a fresh key (the
    cascade's, one per decision) makes the backend compute every row."""
    prompt = policy.builder.render(request)
    ids = policy.prompt_ids(prompt)
    prefix_ids = list(policy.tokenizer(query_prefix, add_special_tokens=False)["input_ids"]) if query_prefix else []
    row = policy.request(prompt, ids, forced_ids=prefix_ids, max_new_tokens=0, hidden_layer=layer, cache_key=cache_key)
    out = policy.backend.generate([row])[0]
    ip, cfg = policy.processor.image_processor, policy.config.prompt
    grid = [image_grid(*im.size, ip.patch_size, ip.merge_size, cfg.min_pixels, cfg.max_pixels) for im in prompt.images]
    hidden = out.hidden.float()
    return Prefill(prompt, ids, grid, hidden, query=hidden[-1], prefix_ids=prefix_ids,
                   complete=out.hidden_start == 0, cached_tokens=out.cached_tokens, cache_key=cache_key)


# ---------------------------------------------------------------------------------------------
# text spans
# ---------------------------------------------------------------------------------------------
def token_offsets(tokenizer, text: str, input_ids: Sequence[int], image_token: str,
                  image_counts: Sequence[int]) -> tuple[torch.Tensor, str]:
    """((P, 2) character offsets of every prompt token, the text with image placeholders expanded)."""
    pieces = text.split(image_token)
    if len(pieces) - 1 != len(image_counts):
        raise ValueError(f"{len(pieces) - 1} image placeholders for {len(image_counts)} images")
    expanded = pieces[0] + "".join(image_token * n + p for n, p in zip(image_counts, pieces[1:]))
    enc = tokenizer(expanded, add_special_tokens=False, return_offsets_mapping=True)
    if list(enc["input_ids"]) != list(input_ids):
        raise ValueError("tokenizer offsets do not reproduce the processor's prompt ids")
    return torch.tensor(enc["offset_mapping"], dtype=torch.long).reshape(-1, 2), expanded


def span_tokens(offsets: torch.Tensor, start: int, end: int) -> list[int]:
    """Positions of tokens whose characters intersect [start, end)."""
    hit = (offsets[:, 0] < end) & (offsets[:, 1] > start) & (offsets[:, 1] > offsets[:, 0])
    return hit.nonzero().flatten().tolist()


def element_line_spans(text: str, ids: Sequence[int]) -> dict[int, tuple[int, int]]:
    """Character span of each element's line in the current (last) element list of `text`.

    A line starts with `[12] ` (som / compact lists) or `<e12> ` (the pointer format's list).
    """
    head = text.rfind(ELEMENTS_HEADER)
    if head < 0:
        return {}
    start, spans = head + len(ELEMENTS_HEADER), {}
    end_block = text.find(IM_END, start)
    block_end = end_block if end_block >= 0 else len(text)
    for e in ids:
        for key in (f"[{e}] ", f"<e{e}> "):
            pos = start if text.startswith(key, start) else text.find("\n" + key, start, block_end)
            if pos >= 0:
                break
        if pos < 0:
            continue
        pos = pos if pos == start else pos + 1
        line_end = text.find("\n", pos, block_end)
        spans[e] = (pos, line_end if line_end >= 0 else block_end)
    return spans


def option_spans(text: str, line: tuple[int, int], options: Sequence[str]) -> list[Optional[tuple[int, int]]]:
    """Character span of each option's quoted text inside `options=[...]` on one element line."""
    at = text.find("options=[", line[0], line[1])
    out: list[Optional[tuple[int, int]]] = []
    for o in options:
        quoted = json.dumps(o, ensure_ascii=False)
        pos = text.find(quoted, at, line[1]) if at >= 0 else -1
        if pos < 0:
            out.append(None)
            continue
        out.append((pos + 1, pos + len(quoted) - 1))
        at = pos + len(quoted)
    return out


def mean_pool(hidden: torch.Tensor, positions: Sequence[int]) -> torch.Tensor:
    """(H,) mean of hidden[positions]; zeros when there are none."""
    if not positions:
        return hidden.new_zeros(hidden.shape[-1])
    return hidden[list(positions)].mean(0)


# ---------------------------------------------------------------------------------------------
# features and labels
# ---------------------------------------------------------------------------------------------
@dataclass
class StepFeatures:
    """Heads' inputs for one step. query (Fq,); elements (N, Fe); options[j]: (M_j, H)."""

    query: torch.Tensor
    elements: torch.Tensor
    element_ids: list[int]
    options: list[torch.Tensor] = field(default_factory=list)
    visual_cells: list[int] = field(default_factory=list)
    """Visual tokens pooled per element (0 = the box lies off the screenshot)."""


def step_features(pre: Prefill, observation: MarkedObservation, config: HeadsConfig, policy) -> StepFeatures:
    """Pool the prefill's hidden states into the heads' inputs for `observation`'s elements."""
    tok, model_cfg = policy.tokenizer, policy.model_config
    merge = policy.processor.image_processor.merge_size
    hidden, text, elements = pre.hidden, pre.prompt.text, observation.elements
    counts = [t * h * w // merge ** 2 for t, h, w in pre.image_grid_thw]
    image_token = tok.convert_ids_to_tokens(model_cfg.image_token_id)
    offsets, expanded = token_offsets(tok, text, pre.input_ids, image_token, counts)
    query = pre.query if pre.query is not None else hidden[-1]
    if config.query == "last+goal":
        g = expanded.find(f"Task: {observation.goal}")
        goal_pos = span_tokens(offsets, g + 6, g + 6 + len(observation.goal)) if g >= 0 else []
        query = torch.cat([query, mean_pool(hidden, goal_pos)])
    visual, cells = _visual_features(pre, observation, config, model_cfg.image_token_id, merge)
    lines = element_line_spans(expanded, [e.id for e in elements])
    rows, options = [], []
    for j, e in enumerate(elements):
        line = lines.get(e.id)
        text_vec = mean_pool(hidden, span_tokens(offsets, *line) if line else [])
        if config.target_features == "visual":
            rows.append(visual[j])
        elif config.target_features == "text":
            rows.append(text_vec)
        else:
            rows.append(torch.cat([visual[j], text_vec]))
        spans = option_spans(expanded, line, e.options) if line else [None] * len(e.options)
        options.append(torch.stack([mean_pool(hidden, span_tokens(offsets, *s) if s else []) for s in spans])
                       if e.options else hidden.new_zeros(0, hidden.shape[-1]))
    feat_dim = hidden.shape[-1] * (2 if config.target_features == "both" else 1)
    elems = torch.stack(rows) if rows else hidden.new_zeros(0, feat_dim)
    return StepFeatures(query, elems, [e.id for e in elements], options, cells)


def _visual_features(pre: Prefill, observation: MarkedObservation, config: HeadsConfig,
                     image_token_id: int, merge: int) -> tuple[list[torch.Tensor], list[int]]:
    """Per element: (H,) mean of the current screenshot's visual tokens inside its box."""
    hidden, elements = pre.hidden, observation.elements
    if not pre.image_grid_thw or observation.screenshot is None:
        return [hidden.new_zeros(hidden.shape[-1]) for _ in elements], [0] * len(elements)
    spans = image_token_spans(pre.input_ids, image_token_id, pre.image_grid_thw, merge)
    start, _ = spans[-1]  # the current screenshot is the prompt's last image
    positions = box_token_indices([e.bbox for e in elements], observation.screenshot.size, start,
                                  pre.image_grid_thw[-1], merge, config.box_cells)
    return [mean_pool(hidden, p) for p in positions], [len(p) for p in positions]


def action_kind(action: Action) -> str:
    """The heads' class of an action ("other" when the heads cannot express it)."""
    if action.kind == "click" and action.button == "left" and action.clicks == 1:
        return "click"
    if action.kind == "type" and action.element is not None and action.clear:
        return "type"
    if action.kind == "scroll" and action.element is None and action.direction in ("up", "down"):
        return f"scroll_{action.direction}"
    if action.kind in ("select", "back", "answer", "stop"):
        return action.kind
    return "other"


def action_labels(action: Action, elements: Sequence[SoMElement], kinds: Sequence[str]) -> tuple[int, int, int]:
    """(kind, target, value) labels; target = index in `elements`, value 0 = WRITE, 1 + i = option i.

    -1 means "not applicable" (no target for a scroll, no value for a click). An action whose
    element is not among `elements` is labelled "other" (the heads could not have produced it).
    """
    kind = action_kind(action)
    if kind not in kinds:
        kind = "other"
    target = value = -1
    if kind in KINDS_WITH_ELEMENT:
        index = next((j for j, e in enumerate(elements) if e.id == action.element), -1)
        if index < 0:
            return kinds.index("other"), -1, -1
        target = index
        if kind in ("type", "select"):
            opts = elements[index].options
            value = 1 + opts.index(action.text) if action.text in opts else 0
    elif kind == "answer":
        value = 0
    return kinds.index(kind), target, value

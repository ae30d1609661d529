"""Element pointer: the policy chooses a listed element by scoring the element's line, not by
generating its id digits.

Notation: B rows, T tokens, H hidden size, V vocabulary, K element tokens (`<e0>` .. `<e{K-1}>`).

With `action_format="pointer"` the prompt lists elements as `<e7> link "Blue mug"` (one added
token per id, at the start of its line) and the model answers `<tool_call>click(<e7>)</tool_call>`.
The logit of element token `<e_k>` at any position t is not `h_t . E[<e_k>]` (the LM head) but a
pointer score against the current list:

    key_k   = mean of the final hidden states over line k (from `<e_k>` to the line's end)
    logit_k = (W h_t) . key_k / sqrt(H) + b          (-1e4 when no line k is listed)

with W (H x H) and b (scalar) the pointer's parameters. Every other token keeps its LM-head
logit, so one softmax over V decides "an element now" against every other token and which
element; sampling, token log-probs, SFT cross-entropy and GRPO ratios need nothing else.
`benchmarks/sft_alternatives.py` measured why: the same tiny model learns the element a goal
names in minutes this way, and stays at chance for many times longer generating id digits.

A line is an element token right after a newline token (`newline_token_ids`: tokens ending in
"\\n"), in the prompt; when an id is listed more than once, the last list wins (the current
observation comes last in the prompt). Element tokens elsewhere (the answer, past actions in the
history) are ordinary inputs and never keys. Limit: a past response that itself starts with an
element token counts as a line (well-formed responses start with `<tool_call>`). -1e4 (not
-inf) keeps entropy terms finite (0 * -inf = nan).

Where the pointer runs: `attach_pointer` adds the module to a `...ForConditionalGeneration` model
as `element_pointer` (saved in its state_dict, synced by name like every weight) and hooks the
backbone (keys, computed on a forward that starts from an empty cache: the prefill of
`generate`, or any full forward) and the LM head (scores replace the element columns), so
`model(...)` and `model.generate(...)` use it. The learner computes hidden states itself and
calls `pointer_logits` directly (webrl/learner/model.py). Departure from a decoder-only LM: the
logits of a position depend on the prompt's element lines through W as well as through
attention. Not supported: vLLM engines (they cannot run the hooks; use the HF engine).
"""
from __future__ import annotations

import math
from typing import Any, Optional

import torch
from torch import Tensor, nn

CONFIG_KEY = "webrl_pointer"
NEG = -1.0e4


def element_token_names(count: int) -> list[str]:
    """The added tokens `<e0>` .. `<e{count-1}>`."""
    return [f"<e{i}>" for i in range(count)]


def pointer_spec(tokenizer, count: int) -> dict:
    """The model config entry (`config.webrl_pointer`) for a tokenizer holding `count` element
    tokens: their first id (they are consecutive) and the ids of tokens that end a line."""
    ids = tokenizer.convert_tokens_to_ids(element_token_names(count))
    if any(i is None or i == tokenizer.unk_token_id for i in ids) or ids != list(range(ids[0], ids[0] + count)):
        raise ValueError(f"the tokenizer must hold {count} consecutive element tokens <e0>..<e{count - 1}>")
    newline = [i for i in range(len(tokenizer)) if tokenizer.decode([i]).endswith("\n")]
    return {"first_token_id": ids[0], "count": count, "newline_token_ids": newline}


def line_keys(hidden: Tensor, input_ids: Tensor, first: int, count: int, newline: Tensor,
              prompt_mask: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """(keys (B, K, H), listed (B, K) bool): mean hidden state over each listed element line.

    hidden (B, T, H) final hidden states, input_ids (B, T), newline (V,) bool; prompt_mask (B, T)
    bool, where given: lines start only there (a response is never a list, even one that opens
    with an element token right after the assistant header's newline)."""
    B, T, H = hidden.shape
    ids = input_ids.clamp(min=0)
    is_el = (ids >= first) & (ids < first + count)  # (B, T)
    after_newline = torch.zeros_like(is_el)
    after_newline[:, 1:] = newline.to(ids.device)[ids[:, :-1]]
    starts = is_el & after_newline  # (B, T) line starts
    if prompt_mask is not None:
        starts &= prompt_mask.bool()
    ends_line = is_el | newline.to(ids.device)[ids]  # a line runs until the next newline or element token
    keys = hidden.new_zeros((B, count, H))
    listed = torch.zeros((B, count), dtype=torch.bool, device=hidden.device)
    for b, p in starts.nonzero().tolist():
        k = int(ids[b, p]) - first
        stop = ends_line[b, p + 1:].nonzero()
        end = p + 1 + (int(stop[0]) if len(stop) else T - p - 1)
        keys[b, k] = hidden[b, p:end].mean(dim=0)  # later lines overwrite earlier ones: last list wins
        listed[b, k] = True
    return keys, listed


class ElementPointer(nn.Module):
    """W (H x H) and b of the pointer, plus the config's token ids; see the module docstring."""

    def __init__(self, hidden: int, spec: dict):
        super().__init__()
        self.first, self.count = int(spec["first_token_id"]), int(spec["count"])
        self.proj = nn.Linear(hidden, hidden, bias=False)
        self.bias = nn.Parameter(torch.zeros(1))  # (1,): DeepSpeed cannot broadcast 0-d parameters
        self.newline_token_ids = list(spec["newline_token_ids"])
        self.list_keys: Optional[tuple[Tensor, Tensor]] = None
        """(keys, listed) of the last fresh forward's element lists, which the LM head hook scores
        against; a caller continuing another prompt's KV cache restores that prompt's."""
        self.hooks_on = True  # False while a caller computes keys itself (the learner: `pointer_logits`)

    def newline_mask(self, vocab: int, device) -> Tensor:
        mask = torch.zeros(vocab, dtype=torch.bool, device=device)
        mask[torch.tensor(self.newline_token_ids, dtype=torch.long, device=device)] = True
        return mask

    def keys(self, hidden: Tensor, input_ids: Tensor, vocab: int,
             prompt_mask: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
        return line_keys(hidden, input_ids, self.first, self.count, self.newline_mask(vocab, hidden.device),
                         prompt_mask)

    def forward(self, query: Tensor, keys: Tensor, listed: Tensor) -> Tensor:
        """(B, T, K) pointer logits for queries (B, T, H) against keys (B, K, H). (A forward, so
        DeepSpeed ZeRO-3 gathers W and b for it.)"""
        s = torch.einsum("bth,bkh->btk", self.proj(query), keys) / math.sqrt(query.shape[-1]) + self.bias
        return s.masked_fill(~listed[:, None, :], NEG)

    def replace_columns(self, logits: Tensor, query: Tensor, keys: Tensor, listed: Tensor) -> Tensor:
        """`logits` (B, T, V) with the element columns replaced by `scores` (new tensor)."""
        s = self(query, keys, listed).to(logits.dtype)
        return torch.cat([logits[..., :self.first], s, logits[..., self.first + self.count:]], dim=-1)


def pointer_logits(pointer: ElementPointer, hidden: Tensor, input_ids: Tensor, lm_weight: Tensor,
                   prompt_mask: Optional[Tensor] = None) -> Tensor:
    """(B, T, V) logits of a full forward: LM head, then element columns from the pointer.
    hidden (B, T, H) final hidden states (the LM head's input), input_ids (B, T), lm_weight (V, H),
    prompt_mask (B, T) as in `line_keys`."""
    logits = hidden @ lm_weight.t()
    keys, listed = pointer.keys(hidden, input_ids, lm_weight.shape[0], prompt_mask)
    return pointer.replace_columns(logits, hidden, keys, listed)


def get_pointer(model: nn.Module) -> Optional[ElementPointer]:
    return getattr(model, "element_pointer", None)


def _backbone_pre_hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
    if not module._webrl_pointer.hooks_on:
        object.__setattr__(module, "_webrl_pointer_ids", None)
        return
    cache = kwargs.get("past_key_values", kwargs.get("cache"))  # the name differs across transformers versions
    fresh = cache is None or (hasattr(cache, "get_seq_length") and cache.get_seq_length() == 0)
    ids = kwargs.get("input_ids", args[0] if args else None)
    if fresh and ids is None:  # keys come from the token ids: embeddings alone cannot give them
        raise ValueError("a model with an element pointer needs input_ids (not inputs_embeds) on a fresh forward")
    object.__setattr__(module, "_webrl_pointer_ids", ids if fresh else None)


def _backbone_hook(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
    pointer, ids = module._webrl_pointer, getattr(module, "_webrl_pointer_ids", None)
    if ids is not None:  # a fresh forward: (re)compute the list's keys
        hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
        pointer.list_keys = pointer.keys(hidden, ids, module._webrl_pointer_vocab)


def _lm_head_hook(module: nn.Module, args: tuple, output: Tensor) -> Tensor:
    pointer = module._webrl_pointer
    if pointer.list_keys is None or not pointer.hooks_on:
        return output
    keys, listed = pointer.list_keys
    if keys.shape[0] != output.shape[0]:
        raise RuntimeError(f"element pointer: {output.shape[0]} rows, but the cached element lists have "
                           f"{keys.shape[0]} (a decode step without its prefill?)")
    return pointer.replace_columns(output, args[0], keys, listed)


def attach_pointer(model: nn.Module, spec: Optional[dict] = None) -> Optional[ElementPointer]:
    """Add (or return) the element pointer of a Qwen-VL `...ForConditionalGeneration` whose config
    has `webrl_pointer` (or given `spec`, which is then written into the config). None if neither."""
    spec = spec or getattr(model.config, CONFIG_KEY, None)
    if not spec:
        return None
    if get_pointer(model) is not None:
        return model.element_pointer
    setattr(model.config, CONFIG_KEY, dict(spec))
    text = getattr(model.config, "text_config", model.config)
    weight = model.lm_head.weight
    pointer = ElementPointer(text.hidden_size, spec).to(device=weight.device, dtype=weight.dtype)
    model.element_pointer = pointer
    backbone = model.model
    # plain attributes (not submodules): no duplicate state_dict entries; deepcopy keeps them paired
    for mod in (backbone, model.lm_head):
        object.__setattr__(mod, "_webrl_pointer", pointer)
    object.__setattr__(backbone, "_webrl_pointer_vocab", weight.shape[0])
    backbone.register_forward_pre_hook(_backbone_pre_hook, with_kwargs=True)
    backbone.register_forward_hook(_backbone_hook, with_kwargs=True)
    model.lm_head.register_forward_hook(_lm_head_hook)
    return pointer


def load_pointer_weights(model: nn.Module, folder: str) -> None:
    """Read `element_pointer.*` from the folder's safetensors (transformers drops unknown keys)."""
    import glob
    import os

    from safetensors import safe_open

    pointer = get_pointer(model)
    wanted = {f"element_pointer.{k}" for k in pointer.state_dict()}
    found = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        with safe_open(path, framework="pt") as f:
            for key in wanted & set(f.keys()):
                found[key.removeprefix("element_pointer.")] = f.get_tensor(key)
    missing = sorted(wanted - {f"element_pointer.{k}" for k in found})
    if missing:
        raise ValueError(f"{folder}: config.json declares an element pointer ({CONFIG_KEY}) but the "
                         f"weights lack {missing}: an incomplete or corrupt checkpoint")
    pointer.load_state_dict({k: v.to(pointer.proj.weight.dtype) for k, v in found.items()})

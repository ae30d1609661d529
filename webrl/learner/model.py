"""The learner's module: a Qwen-VL policy that returns token log-probs, entropy and values.

Notation: B samples, T tokens, H hidden size, V vocabulary, I images, Np image patches.

`PolicyModule.forward` runs the multimodal backbone (`model.model`: vision tower, merger,
language model) to final hidden states (B, T, H) and hands them with the lm_head weight to
`webrl.kernels.token_logprobs`, so the (B, T, V) logits never exist. Only positions on the
loss mask are computed (the response); everything else returns 0.

ZeRO-3 notes. The lm_head weight is read outside `lm_head.forward`, so it is registered as an
external parameter of this module (DeepSpeed then gathers it for our forward / backward).
Every rank must run the same sequence of module calls, forward and backward, or a parameter
all-gather waits forever (NCCL) or aborts on a size mismatch (gloo): a micro-batch without images
still calls the vision tower, on one dummy image, at the point where the backbone calls it for
real images (a forward hook on the token embedding), and its output enters the embeddings
multiplied by 0. (Run before the backbone instead, the tower came first on one rank and after
the embedding on another: a 2-rank ZeRO-3 step with a text-only micro-batch on one rank and an
image micro-batch on the other crashed in its first all-gather.)
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from webrl.kernels import token_logprobs
from webrl.models.pointer import get_pointer, pointer_logits


def pointer_token_logprobs(pointer, hidden: Tensor, input_ids: Tensor, weight: Tensor, temperature: float,
                           mask: Tensor) -> tuple[Tensor, Tensor]:
    """(logprobs, entropy), each (B, T-1), of an element-pointer policy: the reference path of
    `token_logprobs` on `pointer_logits` (webrl.models.pointer); 0 off `mask` (B, T-1)."""
    prompt = torch.ones_like(input_ids, dtype=torch.bool)
    prompt[:, 1:] = ~mask  # mask (B, T-1) marks response tokens 1..T-1: lines come from the prompt only
    logits = pointer_logits(pointer, hidden, input_ids, weight, prompt)[:, :-1].float() / temperature  # (B, T-1, V)
    logp = torch.log_softmax(logits, dim=-1)
    lp = logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    ent = -(logp.exp() * logp).sum(-1)
    return lp * mask, ent * mask


def image_token_type_ids(input_ids: Tensor, image_token_id: int) -> Tensor:
    """(B, T) int: 1 on image placeholder tokens, 0 elsewhere (transformers' mm_token_type_ids,
    which Qwen-VL needs to build its 3-D rope positions)."""
    return (input_ids == image_token_id).int()


def last_prompt_index(loss_mask: Tensor) -> Tensor:
    """(B,) position of the last prompt token = first response position - 1 (0 for rows with
    no response tokens)."""
    has = loss_mask.bool().any(dim=1)
    first = loss_mask.bool().int().argmax(dim=1)  # (B,) first 1
    return torch.where(has, (first - 1).clamp(min=0), torch.zeros_like(first))


class PolicyModule(nn.Module):
    """A `...ForConditionalGeneration` Qwen-VL model plus an optional scalar value head."""

    def __init__(self, model: nn.Module, value_head: bool = False, always_run_vision: bool = False):
        super().__init__()
        self.model = model
        hidden = model.config.text_config.hidden_size
        self.value_head = nn.Linear(hidden, 1) if value_head else None
        if self.value_head is not None:
            nn.init.zeros_(self.value_head.weight)
            nn.init.zeros_(self.value_head.bias)
        self.always_run_vision = always_run_vision

    @property
    def visual(self) -> nn.Module:
        return self.model.model.visual

    def freeze_vision_tower(self) -> None:
        self.visual.requires_grad_(False)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, loss_mask: Tensor,
                pixel_values: Optional[Tensor] = None, image_grid_thw: Optional[Tensor] = None,
                temperature: float = 1.0) -> tuple[Tensor, Tensor, Optional[Tensor]]:
        """(logprobs (B, T), entropy (B, T), values (B,) or None).

        logprobs[b, t] = log softmax(z_{t-1} / temperature)[input_ids[b, t]] where loss_mask[b, t]
        is 1, else 0; z_{t-1} = logits from the hidden state of position t-1.
        """
        config = self.model.config
        backbone = self.model.model
        hook = None
        if pixel_values is None and self.always_run_vision:
            hook = backbone.get_input_embeddings().register_forward_hook(self._add_dummy_vision)
        pointer = get_pointer(self.model)
        if pointer is not None:  # keys come from `pointer_token_logprobs` below (prompt lines only)
            pointer.hooks_on = False
        try:
            out = backbone(input_ids=input_ids, attention_mask=attention_mask, pixel_values=pixel_values,
                           image_grid_thw=image_grid_thw, use_cache=False,
                           mm_token_type_ids=image_token_type_ids(input_ids, config.image_token_id))
        finally:
            if hook is not None:
                hook.remove()
            if pointer is not None:
                pointer.hooks_on = True
        hidden = out.last_hidden_state  # (B, T, H)
        mask = loss_mask[:, 1:].bool()  # (B, T-1): predicting token t from position t-1
        weight = self.model.lm_head.weight  # (V, H)
        if pointer is not None:  # element-pointer policy: full logits (tiny V), element columns replaced
            lp, ent = pointer_token_logprobs(pointer, hidden, input_ids, weight.to(hidden.dtype), temperature, mask)
        else:
            lp, ent = token_logprobs(hidden[:, :-1], weight.to(hidden.dtype), input_ids[:, 1:], temperature,
                                     mask=mask)  # (B, T-1) each
        zeros = lp.new_zeros((lp.shape[0], 1))
        logprobs, entropy = torch.cat([zeros, lp], dim=1), torch.cat([zeros, ent], dim=1)  # (B, T)
        values = None
        if self.value_head is not None:
            idx = last_prompt_index(loss_mask)  # (B,)
            state = hidden[torch.arange(hidden.shape[0], device=hidden.device), idx]  # (B, H)
            values = self.value_head(state).squeeze(-1).float()  # (B,)
        return logprobs, entropy, values

    def _add_dummy_vision(self, module: nn.Module, args, embeds: Tensor) -> Tensor:
        """Forward hook on the token embedding (one call per backbone forward): run the dummy
        vision pass where the backbone runs the real one (right after embedding the tokens) and
        add it x 0 to the embeddings (where real image features are scattered), so forward and
        backward visit the modules in the same order as a micro-batch with images."""
        return embeds + 0.0 * self._dummy_vision_output(embeds.device).to(embeds.dtype)

    def _dummy_vision_output(self, device: torch.device) -> Tensor:
        """Sum of the vision tower's outputs (merged tokens and, for Qwen3-VL, deepstack features) on
        one smallest image (grid 1 x m x m, m = merge): every vision parameter gets a gradient."""
        vcfg = self.model.config.vision_config
        merge = vcfg.spatial_merge_size
        patches = merge * merge
        width = vcfg.in_channels * vcfg.temporal_patch_size * vcfg.patch_size ** 2
        param = next(self.visual.parameters())
        pixels = torch.zeros((patches, width), dtype=param.dtype, device=device)
        grid = torch.tensor([[1, merge, merge]], dtype=torch.long, device=device)
        out = self.model.model.get_image_features(pixels, grid, return_dict=True)
        total = sum(f.float().sum() for f in out.pooler_output)
        for level in getattr(out, "deepstack_features", None) or []:  # Qwen3-VL's deepstack mergers
            total = total + sum(f.float().sum() for f in level)
        return total


def trainable_named_parameters(module: PolicyModule) -> list[tuple[str, nn.Parameter]]:
    """(name, param) of the trainable parameters of the HF model, named as in its state_dict
    (value head excluded: the inference side has none)."""
    return [(name, p) for name, p in module.model.named_parameters() if p.requires_grad]


def enable_checkpointing(model) -> None:
    """Non-reentrant activation checkpointing of every transformer block (transformers >= 5.x
    names it activation_checkpointing_enable; older releases gradient_checkpointing_enable)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def pad_id(processor, model) -> int:
    pad = getattr(processor.tokenizer, "pad_token_id", None)
    if pad is None:
        pad = model.config.text_config.pad_token_id
    return int(pad if pad is not None else 0)

"""A byte-level BPE tokenizer trained locally, with Qwen's special tokens and chat format.

Real Qwen2.5-VL / Qwen3-VL tokenizers cannot be downloaded here, so tiny models get their own,
trained in a second on `webrl.models.corpus.default_corpus` (or a user corpus) with the
`tokenizers` library. It mirrors what matters of Qwen's tokenizer:

- byte-level BPE, so every string encodes;
- a pre-tokenizer that isolates every digit (`\\p{N}`), as Qwen's does: otherwise `[17]` and
  `click(17)` would share no token (docs/LEARNING.md);
- the special tokens `<|endoftext|>` (pad), `<|im_start|>`, `<|im_end|>` (eos),
  `<|vision_start|>`, `<|vision_end|>`, `<|image_pad|>`, `<|video_pad|>`, and the added
  non-special tokens `<tool_call>`, `</tool_call>`, `<think>`, `</think>` (kept by
  `decode(skip_special_tokens=True)`, as in Qwen);
- a ChatML chat template (`CHAT_TEMPLATE`) with system / user / assistant / tool roles and
  image content items rendered as `<|vision_start|><|image_pad|><|vision_end|>`.

Departure from Qwen's templates: a `tool` message becomes its own
`<|im_start|>user\\n<tool_response>\\n...\\n</tool_response><|im_end|>` block (Qwen groups
consecutive tool messages into one user block; webrl has one tool response per step), and past
`<think>` blocks are never stripped (webrl's prompt builder decides what history keeps).
"""
from __future__ import annotations

from typing import Iterable, Optional

from webrl.models.tokens import (ADDED_TOKENS, END_OF_TEXT, IM_END, IM_START, IMAGE_PAD, SPECIAL_TOKENS, VIDEO_PAD,
                               VISION_END, VISION_PLACEHOLDER, VISION_START)

DEFAULT_SYSTEM = "You are a helpful assistant."

# Pre-tokenizer split: contractions, letter runs with one leading non-letter, single digits,
# punctuation runs, newlines, whitespace -- the same classes Qwen's regex uses.
_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if loop.first and message['role'] != 'system' -%}"
    "{{- '" + IM_START + "system\\n" + DEFAULT_SYSTEM + IM_END + "\\n' -}}"
    "{%- endif -%}"
    "{%- if message['role'] == 'tool' -%}{{- '" + IM_START + "user\\n<tool_response>\\n' -}}"
    "{%- else -%}{{- '" + IM_START + "' + message['role'] + '\\n' -}}{%- endif -%}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' or 'image' in item or 'image_url' in item -%}"
    "{{- '" + VISION_PLACEHOLDER + "' -}}"
    "{%- elif item['type'] == 'video' or 'video' in item -%}"
    "{{- '" + VISION_START + VIDEO_PAD + VISION_END + "' -}}"
    "{%- elif 'text' in item -%}{{- item['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- if message['role'] == 'tool' -%}{{- '\\n</tool_response>' -}}{%- endif -%}"
    "{{- '" + IM_END + "\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '" + IM_START + "assistant\\n' -}}{%- endif -%}"
)


def train_tokenizer(lines: Iterable[str], vocab_size: int = 1024, min_frequency: int = 2,
                    element_tokens: int = 0):
    """Train a byte-level BPE `PreTrainedTokenizerFast` on `lines`. Deterministic for fixed lines.

    vocab_size counts the 256 byte symbols, the 11 Qwen tokens and `element_tokens` added tokens
    `<e0>`, `<e1>`, ... (consecutive ids after the others, for the element pointer:
    `webrl.models.pointer`); the result has at most that many ids.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = list(SPECIAL_TOKENS) + list(ADDED_TOKENS)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - element_tokens, min_frequency=min_frequency, show_progress=False,
        special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(lines), trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    if element_tokens:
        from webrl.models.pointer import element_token_names

        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in element_token_names(element_tokens)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=IM_END, pad_token=END_OF_TEXT,
        padding_side="left", clean_up_tokenization_spaces=False, model_max_length=32768,
        extra_special_tokens={"image_token": IMAGE_PAD, "video_token": VIDEO_PAD,
                              "vision_start_token": VISION_START, "vision_end_token": VISION_END})
    fast.chat_template = CHAT_TEMPLATE
    return fast


def check_digits_split(tokenizer, sample: Optional[str] = "[1234] click(1234)") -> bool:
    """True when every digit of `sample` is its own token (the property docs/LEARNING.md asks for)."""
    pieces = [tokenizer.decode([i]) for i in tokenizer(sample, add_special_tokens=False)["input_ids"]]
    return all(not any(c.isdigit() for c in p) or len(p.strip()) == 1 for p in pieces)

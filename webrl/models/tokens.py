"""The Qwen2.5-VL / Qwen3-VL special tokens, spelled once for the whole library.

ChatML frames every message as `<|im_start|>role\\n...<|im_end|>\\n`; an image in a prompt is
`<|vision_start|><|image_pad|><|vision_end|>` before the processor expands `<|image_pad|>` to
the image's visual tokens. This module imports nothing, so the prompt builder, the tokenizer
trainer and the HTTP clients can share it without loading transformers.
"""

END_OF_TEXT = "<|endoftext|>"
"""Qwen's document end; the pad token, and a stop token."""
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
"""End of a ChatML message: the end-of-sequence token of a chat model."""
VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"
"""One visual token; the processor repeats it once per visual token of the image."""
VIDEO_PAD = "<|video_pad|>"
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
THINK_START = "<think>"
THINK_END = "</think>"

SPECIAL_TOKENS = (END_OF_TEXT, IM_START, IM_END, VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD)
"""Qwen's special tokens, in the order a trained tokenizer gives them ids."""
ADDED_TOKENS = (TOOL_CALL_START, TOOL_CALL_END, THINK_START, THINK_END)
"""Non-special added tokens: single ids that `decode(skip_special_tokens=True)` keeps."""
END_OF_TURN_TOKENS = (IM_END, END_OF_TEXT)
"""Tokens that end a reply: the message frame, not its content."""
STOP_TOKENS = (TOOL_CALL_END, *END_OF_TURN_TOKENS)
"""Where a policy's generation stops: right after its call, or at the end of its turn."""
VISION_TOKENS = (IMAGE_PAD, VIDEO_PAD, VISION_START, VISION_END)
"""Placeholders a model must never sample (each `<|image_pad|>` is counted against the images)."""
VISION_PLACEHOLDER = VISION_START + IMAGE_PAD + VISION_END
"""One image in ChatML text, before the processor expands it."""

"""Chat message validation and the token spellings everything else imports."""
import pytest

from webrl.chat import ChatMessage
from webrl.models import tokens
from webrl.types import Image


def test_chat_message_takes_one_part_or_several_and_names_what_is_wrong():
    img = Image(b"\x89PNG", "png")
    assert ChatMessage("user", "hi").content == ("hi",)
    message = ChatMessage("user", ["Look:", img])
    assert message.content == ("Look:", img) and message.images == [img]
    with pytest.raises(ValueError, match="role"):
        ChatMessage("tool", ("x",))
    with pytest.raises(ValueError, match="int"):
        ChatMessage("user", ("x", 3))


def test_token_spellings_and_orders():
    # The order of SPECIAL_TOKENS fixes the ids a trained tokenizer gives them: a reorder changes every model.
    assert tokens.SPECIAL_TOKENS == ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>",
                                     "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
    assert tokens.ADDED_TOKENS == ("<tool_call>", "</tool_call>", "<think>", "</think>")
    assert tokens.STOP_TOKENS == ("</tool_call>", "<|im_end|>", "<|endoftext|>")
    assert tokens.VISION_TOKENS == ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
    assert tokens.VISION_PLACEHOLDER == "<|vision_start|><|image_pad|><|vision_end|>"

"""Image-only Qwen-VL processors, registered with `AutoProcessor`.

transformers' stock `Qwen2_5_VLProcessor` / `Qwen3VLProcessor` also build a video processor,
which needs torchvision; PyPI's torchvision is a CUDA build that fails to import beside the CPU
torch build (`operator torchvision::nms does not exist`). Web agents never feed video, so these subclasses drop the video processor and keep
everything else (image placeholder expansion, `image_grid_thw`, `mm_token_type_ids`).

`AutoProcessor.from_pretrained` finds them only after `register_processors()` ran in the current
process (without it, it silently returns just the tokenizer). `webrl.models` calls it on import,
and `load_model` calls it again, so any process that imports `webrl.models` is covered.
"""
from __future__ import annotations

from transformers.models.qwen2_5_vl.processing_qwen2_5_vl import Qwen2_5_VLProcessor
from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor


class ImageOnlyQwen2_5_VLProcessor(Qwen2_5_VLProcessor):
    """`Qwen2_5_VLProcessor` with an image processor and a tokenizer, no video processor."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)


class ImageOnlyQwen3VLProcessor(Qwen3VLProcessor):
    """`Qwen3VLProcessor` with an image processor and a tokenizer, no video processor."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)


_REGISTERED = False


def register_processors() -> None:
    """Map the Qwen2.5-VL / Qwen3-VL configs to the image-only processors (idempotent).

    The stock processors stay usable where torchvision exists: registration only changes what
    `AutoProcessor` returns for checkpoints whose `processor_config.json` names our classes, or
    for Qwen-VL checkpoints when the stock class cannot be built (see `load_processor`).
    """
    global _REGISTERED
    if _REGISTERED:
        return
    from transformers import AutoProcessor, Qwen2_5_VLConfig, Qwen3VLConfig

    AutoProcessor.register(Qwen2_5_VLConfig, ImageOnlyQwen2_5_VLProcessor, exist_ok=True)
    AutoProcessor.register(Qwen3VLConfig, ImageOnlyQwen3VLProcessor, exist_ok=True)
    _REGISTERED = True


def image_only_processor_class(model_type: str):
    """The image-only processor class for a config `model_type` ("qwen2_5_vl" / "qwen3_vl")."""
    classes = {"qwen2_5_vl": ImageOnlyQwen2_5_VLProcessor, "qwen3_vl": ImageOnlyQwen3VLProcessor}
    if model_type not in classes:
        raise ValueError(f"model_type must be one of {sorted(classes)}, got {model_type!r}")
    return classes[model_type]


def load_processor(path: str, model_type: str, **kwargs):
    """Load the processor of a local checkpoint folder or hub id.

    Tries `AutoProcessor` first (stock classes where torchvision exists, ours after
    `register_processors`); falls back to building the image-only class from the checkpoint's
    image processor and tokenizer when the auto class fails or returns a bare tokenizer.
    """
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    register_processors()
    try:
        processor = AutoProcessor.from_pretrained(path, **kwargs)
        if hasattr(processor, "image_processor") and hasattr(processor, "tokenizer"):
            return processor
    except (ImportError, AttributeError, ValueError, OSError, TypeError):
        pass
    cls = image_only_processor_class(model_type)
    tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    image_processor = AutoImageProcessor.from_pretrained(path, backend="pil", **kwargs)
    return cls(image_processor, tokenizer, chat_template=tokenizer.chat_template)

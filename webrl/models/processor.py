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
    """`Qwen2_5_VLProcessor` with an image processor and a tokenizer, no video processor; saved
    under the stock class name (`write_servable_configs`)."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

    def save_pretrained(self, save_directory, *args, **kwargs):
        out = super().save_pretrained(save_directory, *args, **kwargs)
        write_servable_configs(save_directory, "Qwen2_5_VLProcessor", "Qwen2VLVideoProcessor")
        return out


class ImageOnlyQwen3VLProcessor(Qwen3VLProcessor):
    """`Qwen3VLProcessor` with an image processor and a tokenizer, no video processor; saved
    under the stock class name (`write_servable_configs`)."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

    def save_pretrained(self, save_directory, *args, **kwargs):
        out = super().save_pretrained(save_directory, *args, **kwargs)
        write_servable_configs(save_directory, "Qwen3VLProcessor", "Qwen3VLVideoProcessor")
        return out


def write_servable_configs(folder, processor_class: str, video_processor_type: str) -> None:
    """Make a saved processor loadable by any Qwen-VL server (vLLM, SGLang, plain transformers):
    the stock `processor_class` in processor_config.json and tokenizer_config.json, a
    `video_processor` entry (the image settings; web agents never send video, but the stock
    processors build one and vLLM refuses a checkpoint without it: "Can't load video processor"),
    and the legacy preprocessor_config.json older loaders read. webrl itself still loads the
    image-only class: the stock one needs torchvision here, and `load_processor` falls back."""
    import json
    from pathlib import Path

    folder = Path(folder)
    path = folder / "processor_config.json"
    if not path.is_file():
        return
    config = json.loads(path.read_text())
    image = dict(config.get("image_processor") or {})
    video = {k: v for k, v in image.items() if k != "image_processor_type"}
    video.update({"video_processor_type": video_processor_type, "do_sample_frames": False})
    config.update({"processor_class": processor_class, "video_processor": config.get("video_processor") or video})
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (folder / "preprocessor_config.json").write_text(
        json.dumps({**image, "processor_class": processor_class}, indent=2, sort_keys=True) + "\n")
    tokenizer_config = folder / "tokenizer_config.json"
    if tokenizer_config.is_file():
        tok = json.loads(tokenizer_config.read_text())
        if "processor_class" in tok:
            tok["processor_class"] = processor_class
            tokenizer_config.write_text(json.dumps(tok, indent=2, sort_keys=True) + "\n")


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

"""Qwen2.5-VL / Qwen3-VL model loading and tiny random-init models for CPU runs.

    load_model(path) -> (model, processor)      any Qwen-VL checkpoint, offline on a folder
    tiny_model(family, corpus=None, out_dir=None, seed=0) -> path   tokenizer + processor + model

Importing this package registers the image-only processors with `AutoProcessor`
(see `webrl.models.processor`), so every process that imports it can load the tiny models.
"""
from webrl.models.loading import load_model, model_family
from webrl.models.processor import (ImageOnlyQwen2_5_VLProcessor, ImageOnlyQwen3VLProcessor,
                                    register_processors)
from webrl.models.tiny import FAMILIES, TinyModelConfig, tiny_model

register_processors()

__all__ = ["load_model", "model_family", "tiny_model", "TinyModelConfig", "FAMILIES",
           "register_processors", "ImageOnlyQwen2_5_VLProcessor", "ImageOnlyQwen3VLProcessor"]

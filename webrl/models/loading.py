"""`load_model`: any Qwen2.5-VL / Qwen3-VL checkpoint through transformers' auto classes.

A local folder loads offline; a hub id works where the hub is reachable (set HF_HUB_OFFLINE=1
to forbid it, as the tests do). The processor is the stock one where it can be built and the
image-only one (`webrl.models.processor`) otherwise, e.g. without torchvision.
"""
from __future__ import annotations

import os
from typing import Any, Optional

DTYPES = ("float32", "bfloat16", "float16", "auto")


def _torch_dtype(dtype: Any):
    import torch

    if not isinstance(dtype, str):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES} or a torch.dtype, got {dtype!r}")
    return "auto" if dtype == "auto" else getattr(torch, dtype)


def load_model(name_or_path: str | os.PathLike, dtype: Any = "float32", device: Optional[str] = None,
               attn_implementation: Optional[str] = None, **kwargs):
    """Load `(model, processor)` from a checkpoint folder, a shipped checkpoint
    (`webrl:tiny-webagent`, `webrl.models.shipped`) or hub id.

    dtype: "float32" (default: CPU and exact log-prob checks), "bfloat16", "float16", "auto"
    or a torch.dtype. device: "cpu", "cuda", "cuda:1", ... (default: leave where loaded, CPU).
    The model is returned in eval mode; training code calls `.train()` itself.
    """
    from transformers import AutoConfig, AutoModelForImageTextToText

    from webrl.models.pointer import CONFIG_KEY as POINTER_KEY
    from webrl.models.pointer import attach_pointer, load_pointer_weights
    from webrl.models.processor import load_processor, register_processors
    from webrl.models.shipped import resolve_shipped

    torch_dtype = _torch_dtype(dtype)
    register_processors()
    path = resolve_shipped(str(name_or_path))
    _check_local_folder(path)
    config = AutoConfig.from_pretrained(path, **kwargs)
    if config.model_type not in ("qwen2_5_vl", "qwen3_vl"):
        raise ValueError(f"{path}: model_type {config.model_type!r} is not a Qwen2.5-VL / Qwen3-VL model "
                         f"(expected 'qwen2_5_vl' or 'qwen3_vl')")
    extra = {"attn_implementation": attn_implementation} if attn_implementation else {}
    if getattr(config, POINTER_KEY, None):  # its weights are read by load_pointer_weights, not reported
        from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING

        cls = MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING[type(config)]
        cls._keys_to_ignore_on_load_unexpected = list(cls._keys_to_ignore_on_load_unexpected or []) + [
            p for p in (r"^element_pointer\.",) if p not in (cls._keys_to_ignore_on_load_unexpected or [])]
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch_dtype, **extra, **kwargs)
    if attach_pointer(model) is not None:  # config.webrl_pointer: an element-pointer policy
        load_pointer_weights(model, path)
    if device is not None:
        model = model.to(device)
    model.eval()
    processor = load_processor(path, config.model_type, **kwargs)
    return model, processor


def model_family(model_or_config) -> str:
    """"qwen2.5-vl" or "qwen3-vl" for a model or config object."""
    config = getattr(model_or_config, "config", model_or_config)
    families = {"qwen2_5_vl": "qwen2.5-vl", "qwen3_vl": "qwen3-vl"}
    if config.model_type not in families:
        raise ValueError(f"not a Qwen-VL model: model_type {config.model_type!r}")
    return families[config.model_type]


def _check_local_folder(path: str) -> None:
    """A path that is meant as a local folder (absolute, relative with ./ or ~, or deeper than a
    hub id's `owner/name`) must exist and hold config.json; say so instead of a hub error."""
    local = os.path.isabs(path) or path.startswith((".", "~")) or path.count("/") > 1 or os.path.exists(path)
    if not local:
        return
    folder = os.path.expanduser(path)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"model folder not found: {path}")
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise FileNotFoundError(f"{os.path.join(path, 'config.json')} is missing: not a Hugging Face model folder")

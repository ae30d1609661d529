"""How a weight broadcast lays tensors out: `TensorSpec`s every member knows, and buckets of them.

Rank 0 broadcasts the weights in buckets: consecutive tensors, in the order of the `TensorSpec`s,
each bucket their bytes concatenated into one uint8 tensor (SGLang's "flattened_bucket" layout:
`FlattenedTensorBucket`, `tensor.flatten().view(torch.uint8)` in order, byte offsets with no
padding). A bucket holds one dtype: the receiver views each slice as its dtype, which fails on an
offset that is not a multiple of the element size (an odd-sized bf16 tensor before a float32
one), so `plan_buckets` starts a new bucket where the dtype changes and `unflatten_bucket` refuses
a misaligned offset as SGLang's receiver would. A tensor larger than the bucket size forms a
bucket alone. In-process receivers check a 3-number header first (`header_of`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor


@dataclass(frozen=True)
class TensorSpec:
    """What a receiver allocates for one tensor: name, full shape, dtype name ("float32", "bfloat16")."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch_dtype(self.dtype)

    @property
    def num_bytes(self) -> int:
        return _numel(self.shape) * torch.empty((), dtype=self.torch_dtype).element_size()


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def dtype_name(dtype: torch.dtype) -> str:
    """torch.bfloat16 -> "bfloat16" (SGLang's `dtypes` strings)."""
    return str(dtype).removeprefix("torch.")


def torch_dtype(name: str) -> torch.dtype:
    value = getattr(torch, str(name), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}: expected a torch dtype name such as 'float32' or 'bfloat16'")
    return value


def plan_buckets(specs: Sequence[TensorSpec], bucket_bytes: int) -> list[list[int]]:
    """Consecutive runs of tensor indices of one dtype and at most `bucket_bytes` each; a tensor
    larger than that forms a bucket alone. Every member computes the same plan from the same specs."""
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be >= 1, got {bucket_bytes}")
    buckets: list[list[int]] = []
    size = 0
    for i, spec in enumerate(specs):
        same_dtype = bool(buckets) and specs[buckets[-1][-1]].dtype == spec.dtype
        if same_dtype and size + spec.num_bytes <= bucket_bytes:
            buckets[-1].append(i)
            size += spec.num_bytes
        else:
            buckets.append([i])
            size = spec.num_bytes
    return buckets


def flatten_bucket(tensors: Sequence[Tensor]) -> Tensor:
    """(sum of bytes,) uint8: each tensor's bytes in order (SGLang's flattened_bucket layout)."""
    return torch.cat([t.detach().contiguous().reshape(-1).view(torch.uint8) for t in tensors])


def unflatten_bucket(flat: Tensor, specs: Sequence[TensorSpec]) -> list[Tensor]:
    """The inverse of `flatten_bucket` for tensors of `specs` (views into `flat`). Raises
    ValueError naming the tensor whose bytes do not start at a multiple of its element size, as
    SGLang's `FlattenedTensorBucket` does (its `view(dtype)` fails there): send such tensors in
    buckets of their own dtype (`plan_buckets`)."""
    out, start = [], 0
    for spec in specs:
        end = start + spec.num_bytes
        if start % spec.torch_dtype.itemsize:
            raise ValueError(f"{spec.name} ({spec.dtype}) starts at byte {start} of its bucket, not a multiple of "
                             f"its element size {spec.torch_dtype.itemsize}: a bucket must hold one dtype")
        out.append(flat[start:end].view(spec.torch_dtype).view(spec.shape))
        start = end
    if start != flat.numel():
        raise ValueError(f"bucket holds {flat.numel()} bytes, its {len(specs)} tensor specs {start}")
    return out


def header_of(version: int, specs: Sequence[TensorSpec]) -> tuple[int, int, int]:
    """(version, tensors, bytes): what in-process receivers check before a sync."""
    return int(version), len(specs), sum(s.num_bytes for s in specs)

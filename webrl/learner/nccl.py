"""A minimal NCCL communicator over the NCCL library's C API (ctypes), for the one peer
torch.distributed cannot join: vLLM's inference workers.

vLLM's NCCL weight transfer (vllm/distributed/weight_transfer/nccl_engine.py and nccl_common.py,
vLLM 0.32.0) forms its group with its own `PyNcclCommunicator`, from either a TCPStore of
vLLM's `StatelessProcessGroup` key layout or a pre-shared `ncclUniqueId`
(`NCCLWeightTransferInitInfo.nccl_unique_id_b64`, 128 raw bytes in standard base64). torch's
ProcessGroupNCCL takes its unique id only from torch's own store keys, so webrl uses the
unique-id way: learner rank 0 mints the id here, sends it over HTTP, and joins as rank 0 while the
workers join (there is no barrier: all ranks enter `ncclCommInitRank` together). Right after
init, every rank issues a one-element float32 all-reduce (vLLM's warm-up handshake,
`PyNcclCommunicator._init_comm`); then rank 0 broadcasts each tensor.

Signatures and enum values are NCCL's public `nccl.h` (the ones vLLM's
distributed/device_communicators/pynccl_wrapper.py binds). The library is the one torch's CUDA
build already loaded (libnccl.so.2), or $WEBRL_NCCL_LIBRARY. GPU only; run by
`benchmarks/gpu_check.py` and a `gpu`-marked test, never on CPU.
"""
from __future__ import annotations

import base64
import ctypes
import os

import torch

UNIQUE_ID_BYTES = 128
LIBRARY_VARIABLE = "WEBRL_NCCL_LIBRARY"
DTYPES = {torch.int8: 0, torch.uint8: 1, torch.int32: 2, torch.int64: 4, torch.float16: 6, torch.float32: 7,
          torch.float64: 8, torch.bfloat16: 9}
"""ncclDataType_t of each torch dtype (nccl.h: ncclInt8 = 0 ... ncclBfloat16 = 9)."""
SUM = 0  # ncclRedOp_t ncclSum


class NcclError(RuntimeError):
    """An NCCL call that did not return ncclSuccess (the message has NCCL's own string)."""


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * UNIQUE_ID_BYTES)]


def load_library(path: str = "") -> ctypes.CDLL:
    """libnccl: `path`, else $WEBRL_NCCL_LIBRARY, else libnccl.so.2 (loaded by torch's CUDA build)."""
    name = path or os.environ.get(LIBRARY_VARIABLE, "") or "libnccl.so.2"
    try:
        lib = ctypes.CDLL(name)
    except OSError as e:
        raise NcclError(f"cannot load the NCCL library {name!r} ({e}); set ${LIBRARY_VARIABLE} to its path") from None
    ptr, size, i32, stream = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p
    lib.ncclGetErrorString.restype, lib.ncclGetErrorString.argtypes = ctypes.c_char_p, [i32]
    lib.ncclGetUniqueId.restype, lib.ncclGetUniqueId.argtypes = i32, [ctypes.POINTER(UniqueId)]
    lib.ncclCommInitRank.restype = i32
    lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ptr), i32, UniqueId, i32]
    lib.ncclAllReduce.restype = i32
    lib.ncclAllReduce.argtypes = [ptr, ptr, size, i32, i32, ptr, stream]
    lib.ncclBroadcast.restype = i32
    lib.ncclBroadcast.argtypes = [ptr, ptr, size, i32, i32, ptr, stream]
    lib.ncclCommDestroy.restype, lib.ncclCommDestroy.argtypes = i32, [ptr]
    return lib


def new_unique_id(lib: ctypes.CDLL) -> bytes:
    """A fresh ncclUniqueId's 128 bytes (rank 0 mints it; every rank joins with it)."""
    uid = UniqueId()
    _check(lib, lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    return bytes(bytearray(uid.internal))


def encode_unique_id(raw: bytes) -> str:
    """Standard (not URL-safe) base64, as vLLM's `nccl_unique_id_b64` asks."""
    if len(raw) != UNIQUE_ID_BYTES:
        raise ValueError(f"an NCCL unique id is {UNIQUE_ID_BYTES} bytes, got {len(raw)}")
    return base64.b64encode(raw).decode("ascii")


class NcclComm:
    """One rank of an NCCL group on `device` (a CUDA device); `broadcast` and `all_reduce` run on
    the device's current stream and are waited for."""

    def __init__(self, lib: ctypes.CDLL, unique_id: bytes, rank: int, world_size: int, device: torch.device):
        if not 0 <= rank < world_size:
            raise ValueError(f"NCCL rank {rank} is outside world_size {world_size}")
        self.lib, self.rank, self.world_size, self.device = lib, rank, world_size, device
        uid = UniqueId()
        ctypes.memmove(ctypes.addressof(uid), unique_id, UNIQUE_ID_BYTES)
        self.comm = ctypes.c_void_p()
        with torch.cuda.device(device):
            _check(lib, lib.ncclCommInitRank(ctypes.byref(self.comm), world_size, uid, rank), "ncclCommInitRank")

    def _stream(self) -> ctypes.c_void_p:
        return ctypes.c_void_p(torch.cuda.current_stream(self.device).cuda_stream)

    def all_reduce(self, tensor: torch.Tensor) -> None:
        """Sum `tensor` over the group, in place (vLLM's warm-up is this on zeros(1) float32)."""
        self._on_device(tensor)
        p = ctypes.c_void_p(tensor.data_ptr())
        _check(self.lib, self.lib.ncclAllReduce(p, p, tensor.numel(), DTYPES[tensor.dtype], SUM, self.comm,
                                                self._stream()), "ncclAllReduce")
        torch.cuda.current_stream(self.device).synchronize()

    def broadcast(self, tensor: torch.Tensor, root: int = 0) -> None:
        """Root's `tensor` into every rank's (same shape and dtype, contiguous), in place."""
        self._on_device(tensor)
        if not tensor.is_contiguous():
            raise ValueError("NCCL broadcasts a contiguous tensor (it sends numel elements from data_ptr)")
        p = ctypes.c_void_p(tensor.data_ptr())
        _check(self.lib, self.lib.ncclBroadcast(p, p, tensor.numel(), DTYPES[tensor.dtype], root, self.comm,
                                                self._stream()), "ncclBroadcast")

    def synchronize(self) -> None:
        torch.cuda.current_stream(self.device).synchronize()

    def destroy(self) -> None:
        if self.comm:
            self.lib.ncclCommDestroy(self.comm)
            self.comm = ctypes.c_void_p()

    def _on_device(self, tensor: torch.Tensor) -> None:
        if tensor.device != self.device:
            raise ValueError(f"this NCCL communicator works on {self.device}, the tensor is on {tensor.device}")
        if tensor.dtype not in DTYPES:
            raise ValueError(f"NCCL has no data type for {tensor.dtype} (allowed: {sorted(map(str, DTYPES))})")


def _check(lib: ctypes.CDLL, result: int, what: str) -> None:
    if result != 0:
        raise NcclError(f"{what} failed: NCCL error {result} ({lib.ncclGetErrorString(result).decode()})")

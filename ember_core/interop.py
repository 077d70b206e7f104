"""Exchange with other array libraries through DLPack (Array API 2023.12): ``from_dlpack`` and the
capsules of ``Tensor.__dlpack__``.

Host memory goes through numpy: numpy consumes the producer's capsule (``numpy.from_dlpack``) and
``from_numpy`` wraps the result, so a C-contiguous, aligned, writeable producer buffer is shared,
not copied; the tensor keeps the producer's memory alive.

Device memory (a torch or CuPy GPU tensor, an ember tensor on cuda) is exchanged by the capsule
machinery below, written once for every backend: the core builds and parses the DLManagedTensor
structs (dlpack.h 1.0, legacy and versioned capsules) and a backend only translates between its
handles and device pointers (the ``ember_dlpack_*`` hooks).  Streams follow the protocol: the
consumer passes its stream to the producer's ``__dlpack__``, which makes that stream wait for the
producer's work.
"""

from __future__ import annotations

import ctypes
import itertools
import math
from typing import Any

import numpy as np

from ember_core import dtypes as dt
from ember_core.device import Device, as_device
from ember_core.errors import DeviceError, DTypeError

# DLPack device types whose memory the host can address: CPU, CUDA host (pinned), ROCm host,
# CUDA managed.  numpy accepts exactly these.
_HOST_DEVICE_TYPES = frozenset({1, 3, 11, 13})
# DLPack device types of device memory, and the ember device type each is (kDLCUDA, kDLVulkan, kDLROCM)
DLPACK_DEVICE_TYPES = {2: "cuda", 7: "vulkan", 10: "rocm"}

def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Any:
    """from_dlpack(x, /, *, device=None, copy=None) -> Tensor

    A tensor holding the data of ``x``, any object with ``__dlpack__`` and ``__dlpack_device__``:
    in host memory (numpy arrays, CPU torch tensors, ember tensors...), or in the memory of a
    device an installed backend imports (torch / CuPy CUDA tensors with ember-cuda), on the ember
    device of the same index (a CUDA tensor on GPU 1 gives a ``cuda:1`` tensor).

    * ``copy=None``: memory is shared when the producer's buffer is C-contiguous, aligned and
      writeable (any strides, for device memory), and copied otherwise.
    * ``copy=True``: always a fresh copy.
    * ``copy=False``: never a copy; raises ``BufferError`` where one would be needed.
    * ``device``: where the result lives; the data is imported where it is, then moved (a copy,
      so not with ``copy=False``).  An ember tensor keeps its own device when device is None.

    dtypes numpy cannot import through DLPack (bfloat16 from torch's CPU tensors, for one) or
    ember lacks (uint32...) raise DTypeError; convert them in the producer first.
    """
    from ember_core.creation import from_numpy
    from ember_core.tensor import Tensor

    if copy not in (None, True, False):
        raise TypeError(f"from_dlpack: copy must be True, False or None, got {copy!r}")
    target = None if device is None else as_device(device)
    if isinstance(x, Tensor):  # our own tensors: a view of the same storage, on its own device
        return _placed(x._view(x.shape, x.strides, x.offset), target, copy, shared=True)
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"from_dlpack needs an object with __dlpack__ (a numpy array, a torch tensor...), "
                        f"got {type(x).__name__}")
    if hasattr(x, "__dlpack_device__"):
        kind, index = (int(v) for v in x.__dlpack_device__())
        if kind not in _HOST_DEVICE_TYPES:
            return _placed(_import_device_memory(x, kind, index, copy), target, copy, shared=False)
    try:
        arr = np.from_dlpack(x)
    except (BufferError, RuntimeError, TypeError) as exc:
        if "dtype" not in str(exc).lower():
            raise
        raise DTypeError(f"from_dlpack: the {type(x).__name__}'s dtype cannot be imported through numpy ({exc}); "
                         f"convert it in its own library first (bfloat16: to float32)") from exc
    if copy:
        arr = np.array(arr, copy=True, order="C")
    elif copy is False and not (arr.flags.c_contiguous and arr.flags.aligned and arr.flags.writeable):
        why = "not C-contiguous" if not arr.flags.c_contiguous else "read-only" if not arr.flags.writeable else \
            "not aligned"
        raise BufferError(f"from_dlpack: the producer's buffer is {why}, so sharing it needs a copy, and copy=False")
    return _placed(from_numpy(arr), target, copy, shared=False)


def _placed(out: Any, target: Device | None, copy: bool | None, shared: bool) -> Any:
    """``out`` on ``target`` (moving is a copy, refused by copy=False); copied when copy=True asks
    for one and ``out`` still shares the producer's memory."""
    if target is not None and target is not out.device:
        if copy is False:
            raise BufferError(f"from_dlpack: moving {out.device} memory to {target} needs a copy, and copy=False")
        return out.to_device(target)
    return _copy(out) if copy and shared else out


def _copy(x: Any) -> Any:
    from ember_core.ops import call

    return call("copy", x)


# ---- DLPack capsules (dlpack.h 1.0) ---------------------------------------------------------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # void (*)(DLManagedTensor[Versioned] *)


class _DLManagedTensor(ctypes.Structure):  # the legacy capsule "dltensor"
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):  # the capsule "dltensor_versioned"
    _fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY
# capsule name -> (struct, the name a consumer gives it once it took ownership); the names are
# module constants because a capsule keeps a pointer to its name, not a copy
_CAPSULES = {b"dltensor_versioned": (_DLManagedTensorVersioned, b"used_dltensor_versioned"),
             b"dltensor": (_DLManagedTensor, b"used_dltensor")}
# DLDataType code per ember dtype kind (kDLInt 0, kDLUInt 1, kDLFloat 2, kDLComplex 5, kDLBool 6); bfloat16
# is kDLBfloat (4)
_KIND_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_BFLOAT = 4


def _capsule_api(name: str, restype: Any, *argtypes: Any) -> Any:
    fn = getattr(ctypes.pythonapi, name)
    fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


_capsule_new = _capsule_api("PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
_capsule_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid",
                                                                                    ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer",
                                                                                        ctypes.pythonapi))
_capsule_rename = _capsule_api("PyCapsule_SetName", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)

_exported: dict[int, tuple[Any, ...]] = {}  # manager_ctx -> what an exported struct points into
_next_ctx = itertools.count(1)


def _releaser(struct: type[ctypes.Structure]) -> Any:
    @_Deleter
    def release(managed: int) -> None:  # the consumer is done: drop what the struct keeps alive
        _exported.pop(struct.from_address(managed).manager_ctx, None)

    return release


_RELEASE = {struct: _releaser(struct) for struct, _ in _CAPSULES.values()}


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _destroy_capsule(capsule: int) -> None:
    """A capsule ember made is destroyed: release its struct unless a consumer took it (renamed it)."""
    for name, (struct, _) in _CAPSULES.items():
        if _capsule_valid(capsule, name):
            _RELEASE[struct](_capsule_pointer(capsule, name))
            return


def _dl_dtype(dtype: dt.DType) -> _DLDataType:
    code = _BFLOAT if dtype is dt.bfloat16 else _KIND_CODES[dtype.kind]
    return _DLDataType(code, dtype.itemsize * 8, 1)


def _ember_dtype(dl: _DLDataType) -> dt.DType:
    for dtype in dt.ALL_DTYPES:
        ours = _dl_dtype(dtype)
        if (ours.code, ours.bits) == (dl.code, dl.bits) and dl.lanes == 1:
            return dtype
    raise DTypeError(f"from_dlpack: DLPack dtype (code {dl.code}, {dl.bits} bits, {dl.lanes} lanes) has no ember "
                     f"dtype; convert it in its own library first")


def to_dlpack(t: Any, pointer: int, dl_device: tuple[int, int], versioned: bool) -> Any:
    """A capsule describing ``t``'s elements, the first at ``pointer`` on DLPack device ``dl_device``.
    The capsule keeps ``t`` (and so its memory) alive until its consumer calls the deleter."""
    ndim = len(t.shape)
    shape, strides = (ctypes.c_int64 * ndim)(*t.shape), (ctypes.c_int64 * ndim)(*t.strides)
    tensor = _DLTensor(pointer, _DLDevice(*dl_device), ndim, _dl_dtype(t.dtype), shape, strides, 0)
    ctx = next(_next_ctx)
    if versioned:
        managed = _DLManagedTensorVersioned(_DLPackVersion(1, 0), ctx, _RELEASE[_DLManagedTensorVersioned], 0, tensor)
    else:
        managed = _DLManagedTensor(tensor, ctx, _RELEASE[_DLManagedTensor])
    _exported[ctx] = (t, managed, shape, strides)
    name = b"dltensor_versioned" if versioned else b"dltensor"
    return _capsule_new(ctypes.addressof(managed), name, ctypes.cast(_destroy_capsule, ctypes.c_void_p))


class _Producer:
    """Owns an imported DLManagedTensor: calls its deleter when the last tensor over it is freed."""

    __slots__ = ("deleter", "managed")

    def __init__(self, managed: int, deleter: Any) -> None:
        self.managed, self.deleter = managed, deleter

    def __del__(self) -> None:
        if self.deleter:
            self.deleter(self.managed)


def _import_device_memory(x: Any, kind: int, index: int, copy: bool | None) -> Any:
    """A tensor over a producer's device memory (zero-copy unless a copy is asked for or needed)."""
    from ember_core.tensor import Storage, Tensor, contiguous_strides, span

    device_type = DLPACK_DEVICE_TYPES.get(kind)
    if device_type is None:
        raise DeviceError(f"from_dlpack: {type(x).__name__} lives in DLPack device ({kind}, {index}), not in host "
                          f"memory nor on a device ember knows; move it to the CPU in its own library first")
    device = Device(device_type, index)
    hooks = device.backend.hooks  # BackendUnavailableError when no backend serves it, with the fix
    if "ember_dlpack_import" not in hooks:
        raise DeviceError(f"from_dlpack: {type(x).__name__} lives in {device} memory (not in host memory), which "
                          f"{device.backend.package} cannot import; move it to the CPU in its own library first")
    stream = hooks["ember_dlpack_stream"](device) if "ember_dlpack_stream" in hooks else None
    try:
        capsule = x.__dlpack__(stream=stream, max_version=(1, 0))
    except TypeError:  # a producer older than DLPack 1.0
        capsule = x.__dlpack__(stream=stream)
    name = next((name for name in _CAPSULES if _capsule_valid(id(capsule), name)), None)
    if name is None:
        raise BufferError(f"from_dlpack: {type(x).__name__}.__dlpack__ returned no unconsumed DLPack capsule")
    struct, used = _CAPSULES[name]
    address = _capsule_pointer(id(capsule), name)
    managed = struct.from_address(address)
    dl = managed.dl_tensor
    if (dl.device.device_type, dl.device.device_id) != (kind, index):
        raise BufferError(f"from_dlpack: {type(x).__name__}'s capsule is on DLPack device ({dl.device.device_type}, "
                          f"{dl.device.device_id}), but its __dlpack_device__ said ({kind}, {index})")
    dtype = _ember_dtype(dl.dtype)
    shape = tuple(dl.shape[i] for i in range(dl.ndim))
    strides = tuple(dl.strides[i] for i in range(dl.ndim)) if dl.strides else contiguous_strides(shape)
    read_only = struct is _DLManagedTensorVersioned and managed.flags & _READ_ONLY
    if read_only and copy is False:
        raise BufferError(f"from_dlpack: {type(x).__name__}'s memory is read-only, so sharing it needs a copy, "
                          f"and copy=False")
    _capsule_rename(capsule, used)  # ours now: the deleter is called when the storage is freed
    owner = _Producer(address, managed.deleter)
    numel = math.prod(shape)
    lo, hi = span(shape, strides, 0) if numel else (0, -1)
    nbytes = (hi - lo + 1) * dtype.itemsize
    pointer = (dl.data or 0) + dl.byte_offset + lo * dtype.itemsize
    handle = hooks["ember_dlpack_import"](device, pointer, nbytes, owner)
    out = Tensor._make(Storage(device, nbytes, handle=handle), shape, strides, -lo, dtype)
    return _copy(out) if copy or read_only else out


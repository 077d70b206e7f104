"""The Tensor: a backend buffer plus shape, strides (elements), storage offset, dtype and device.

Views (reshape, permute, expand, basic slicing...) are metadata over the same Storage and live
here, once, for every backend.  Ops are attached to the class from the registry
(``ember_core.ops``), so this module holds only what is not an op.
"""

from __future__ import annotations

import copy
import math
import sys
from functools import lru_cache
from typing import Any

import numpy as np

from ember_core import dtypes as _dt
from ember_core import hotpath
from ember_core.device import Device, as_device
from ember_core.errors import DeviceError, DTypeError, ShapeError
from ember_core.hotpath import StorageBase, TensorBase, native

# No 64-bit CPU addresses more than 2**57 bytes (x86-64 and RISC-V with 5-level paging; ARM64: 2**52),
# so no allocation can be larger, and no op may walk more bytes in one operand, broadcast views included
# (ember_core.ops.families.run): a view allows the ops its dense copy would, refused before any kernel.
MAX_BYTES = 2**57
_SMALL_BLOCK = 1 << 16  # blocks up to this size are recycled by the core
_BLOCKS_PER_SIZE = 32  # how many freed blocks of one size a device keeps


class Storage(StorageBase):
    """One allocation of a backend.  ``version`` counts in-place writes (autograd checks it).

    Freed blocks of up to 64 KiB go back to a small per-device, per-size pool instead of the
    backend, so the op hot path usually skips both the alloc and the free hook (~20% of a small
    op).  ``ember_core.empty_cache()`` hands them to the backend's free hook.  With the compiled
    hot path (ember_core.hotpath) the fields and the release live in its StorageBase.
    """

    __slots__ = () if native else ("__weakref__", "blocks", "device", "free", "handle", "nbytes", "version")

    def __init__(self, device: Device, nbytes: int, handle: Any = None) -> None:
        self.free = None  # set last: a failed allocation must not be freed
        # blocks: the device's list of freed blocks of this size, where __del__ returns the handle
        self.blocks = blocks = None if handle is not None or nbytes > _SMALL_BLOCK else device._pool.get(nbytes)
        if blocks:
            try:
                handle = blocks.pop()
            except IndexError:  # another thread took the last one
                pass
        if handle is None:
            if nbytes > MAX_BYTES:
                raise MemoryError(f"cannot allocate {nbytes} bytes on {device}: beyond any address space (2**57 bytes)")
            alloc = device._alloc
            if alloc is None:
                device.backend  # noqa: B018  (resolves the backend and caches its hooks, or explains why not)
                alloc = device._alloc
            if blocks is None and nbytes <= _SMALL_BLOCK:
                self.blocks = device._pool.setdefault(nbytes, [])
            handle = alloc(device, nbytes)
        elif device._free is None:  # a caller's handle (from_numpy...) on a device not yet resolved
            device.backend  # noqa: B018
        self.device = device
        self.nbytes = nbytes
        self.version = 0
        self.handle = handle
        self.free = device._free

    if native is None:  # (the compiled StorageBase returns the block in C: ember_core.hotpath)
        def __del__(self) -> None:
            free = getattr(self, "free", None)  # unset when __init__ never ran (or failed before its first line)
            if free is not None:
                self.free = None
                blocks = self.blocks
                # (not into the pool if its backend was since unregistered: device._free changed)
                if blocks is not None and len(blocks) < _BLOCKS_PER_SIZE and self.device._free is free:
                    blocks.append(self.handle)
                    return
                try:
                    free(self.device, self.handle)
                except Exception:  # a finalizer must not raise; the backend is already told by contract
                    pass

    def __deepcopy__(self, memo: dict[int, Any]) -> Storage:
        """A new allocation on the same device holding a copy of the bytes, never a second owner of
        this handle (both would free it).  copy.deepcopy's memo gives tensors that shared this
        storage one shared copy."""
        copied = Storage(self.device, self.nbytes)
        if self.nbytes:
            self.device.backend.hooks["ember_copy_on_device"](self.device, copied.handle, 0, self.device,
                                                               self.handle, 0, self.nbytes)
        return copied

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        """Pickles as (device name, bytes through the host); see ember_core.serialization.pickling."""
        from ember_core.serialization.pickling import reduce_storage

        return reduce_storage(self)


@lru_cache(maxsize=4096)
def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def _is_contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    if 0 in shape:
        return True  # nothing to lay out
    expected = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def span(shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> tuple[int, int]:
    """First and last element offsets a layout touches in its storage."""
    lo = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s < 0 and n)
    hi = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s > 0 and n)
    return lo, hi


_new = object.__new__


class Tensor(TensorBase):
    __slots__ = () if native else (  # (fields of the compiled TensorBase, with its operators: ember_core.hotpath)
        "__weakref__", "_autograd", "_base", "_contig", "_device", "_dtype", "_native", "_numel", "_offset",
        "_requires_grad", "_shape", "_storage", "_strides", "grad", "grad_fn",
    )
    # _native: whatever the plugin owning the tensor's device builds from its layout for native calls
    # (ember-cpu: the ember.h descriptor), made on first use and kept, since a tensor's storage, shape,
    # strides, offset and dtype never change after construction

    # ---- construction (internal: users call ember_core.asarray / zeros / ...) -------------------
    @staticmethod
    def _make(storage: Storage, shape: tuple[int, ...], strides: tuple[int, ...], offset: int,
              dtype: _dt.DType) -> Tensor:
        t = Tensor._make_contiguous(storage, shape, strides, math.prod(shape), dtype)
        t._offset = offset
        t._contig = _is_contiguous(shape, strides)
        return t

    @staticmethod
    def _make_contiguous(storage: Storage, shape: tuple[int, ...], strides: tuple[int, ...], numel: int,
                         dtype: _dt.DType) -> Tensor:
        """_make for a fresh contiguous layout whose strides and size the caller already knows."""
        t = _new(Tensor)
        t._storage = storage
        t._shape = shape
        t._strides = strides
        t._offset = 0
        t._dtype = dtype
        t._device = storage.device
        t._numel = numel
        t._contig = True
        t._requires_grad = False
        t.grad = None
        t.grad_fn = None
        t._autograd = None
        t._base = None
        t._native = None
        return t

    def _view(self, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> Tensor:
        """A view of this tensor's storage (views share the storage, hence its version counter);
        ``_base`` is the tensor that owns the storage, which in-place autograd rebases."""
        t = Tensor._make(self._storage, shape, strides, offset, self._dtype)
        base = self._base
        t._base = self if base is None else base
        return t

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("create tensors with ember_core.asarray(...), zeros(...), from_numpy(...) etc.")

    # ---- the array object's attributes ---------------------------------------------------------
    @property
    def dtype(self) -> _dt.DType:
        return self._dtype

    @property
    def device(self) -> Device:
        return self._device

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def strides(self) -> tuple[int, ...]:
        """In elements, as the kernels see them (numpy's are in bytes)."""
        return self._strides

    @property
    def offset(self) -> int:
        """Storage offset in elements."""
        return self._offset

    @property
    def handle(self) -> Any:
        """The backend's allocation handle (for kernels)."""
        return self._storage.handle

    @property
    def is_contiguous(self) -> bool:
        return self._contig

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        return self._numel

    @property
    def nbytes(self) -> int:
        return self._numel * self._dtype.itemsize

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize

    @property
    def T(self) -> Tensor:
        if self.ndim != 2:
            raise ShapeError(f".T needs a 2-d tensor, got {self.ndim}-d; use .mT or permute_dims for batches")
        return self.permute_dims((1, 0))

    @property
    def mT(self) -> Tensor:
        if self.ndim < 2:
            raise ShapeError(f".mT needs at least 2 dimensions, got shape {self._shape}")
        axes = (*range(self.ndim - 2), self.ndim - 1, self.ndim - 2)
        return self.permute_dims(axes)

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __repr__(self) -> str:
        try:
            body = np.array2string(self._to_numpy_copy(), separator=", ", prefix="tensor(")
        except Exception as exc:  # never let repr fail while debugging
            body = f"<unreadable: {exc}>"
        extras = []
        if self._device.type != "cpu":
            extras.append(f"device='{self._device}'")
        if self._dtype not in (_dt.float32, _dt.int64, _dt.bool_):
            extras.append(f"dtype={self._dtype.name}")
        if self.grad_fn is not None:
            extras.append(f"grad_fn={self.grad_fn!r}")
        elif self._requires_grad:
            extras.append("requires_grad=True")
        return f"tensor({body}{''.join(', ' + e for e in extras)})"

    def __bool__(self) -> bool:
        return bool(self._scalar("bool"))

    def __int__(self) -> int:
        return int(self._scalar("int"))

    def __float__(self) -> float:
        return float(self._scalar("float"))

    def __complex__(self) -> complex:
        return complex(self._scalar("complex"))

    def __index__(self) -> int:
        if self._dtype.kind not in "iu":
            raise DTypeError(f"only integer tensors can be used as an index, got {self._dtype.name}")
        return int(self._scalar("__index__"))

    def _scalar(self, what: str) -> Any:
        if self._numel != 1:
            raise ShapeError(f"{what}() needs a tensor with one element, got shape {self._shape}")
        return self.item()

    def __hash__(self) -> int:
        return id(self)

    # ---- autograd ------------------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        if self.grad_fn is not None:
            if not flag:
                raise RuntimeError("requires_grad can only be switched off on leaves; use .detach() for a "
                                   "non-leaf tensor")
            return
        if flag and self._dtype.kind not in "fc":
            raise DTypeError(f"only floating and complex tensors can require gradients, got {self._dtype.name}")
        self._requires_grad = bool(flag)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        self.requires_grad = requires_grad
        return self

    @property
    def is_leaf(self) -> bool:
        """True for tensors not produced by a recorded op (their .grad is kept after backward)."""
        return self.grad_fn is None

    @property
    def retains_grad(self) -> bool:
        return self._autograd is not None and self._autograd.retains_grad

    def retain_grad(self) -> None:
        from ember_core.autograd.graph import retain_grad

        retain_grad(self)

    def register_hook(self, hook: Any) -> Any:
        """``hook(grad)`` runs when this tensor's gradient is computed; returning a tensor replaces it."""
        from ember_core.autograd.graph import register_hook

        return register_hook(self, hook)

    def backward(self, gradient: Any = None, retain_graph: bool | None = None, create_graph: bool = False,
                 inputs: Any = None) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad`` (``gradient`` for non-scalars)."""
        from ember_core.autograd.engine import backward

        backward(self, gradient, retain_graph, create_graph, inputs)

    def detach(self) -> Tensor:
        """The same data, outside the graph (shares storage and version counter)."""
        t = Tensor._make(self._storage, self._shape, self._strides, self._offset, self._dtype)
        t._base = self._base
        return t

    def detach_(self) -> Tensor:
        self.grad_fn = None
        self._requires_grad = False
        return self

    def clone(self) -> Tensor:
        from ember_core.ops import call

        return call("copy", self)

    def __copy__(self) -> Tensor:
        """copy.copy, as PyTorch's: a new leaf over the same memory (the storage object is shared,
        not its handle duplicated), keeping requires_grad."""
        t = self.detach()
        t._requires_grad = self._requires_grad
        return _as_original_kind(self, t)

    def __deepcopy__(self, memo: dict[int, Any]) -> Tensor:
        """copy.deepcopy, as PyTorch's: independent memory on the same device with the same layout,
        requires_grad and a deep copy of ``.grad``.  The storage is copied whole, once per deepcopy
        call, so tensors that shared memory (a tensor and its views) share the copy; each copy is
        its own base, no longer a view (PyTorch's copies are not views either)."""
        if self.grad_fn is not None:
            raise RuntimeError(
                f"deepcopy of a tensor computed by a recorded op (grad_fn={self.grad_fn!r}): only leaves can "
                f"be deep-copied, as in PyTorch, since a copy cannot take part in the original's graph; "
                f"deep-copy t.detach() instead"
            )
        t = Tensor._make(copy.deepcopy(self._storage, memo), self._shape, self._strides, self._offset,
                         self._dtype)
        t._requires_grad = self._requires_grad
        if self.grad is not None:
            t.grad = copy.deepcopy(self.grad, memo)
        return _as_original_kind(self, t)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        """Pickles as its storage and layout, loaded under em.load's device policy (the saved device when
        available, else cpu with a warning); see ember_core.serialization.pickling."""
        from ember_core.serialization.pickling import reduce_tensor

        return reduce_tensor(self)

    # ---- host interop ---------------------------------------------------------------------------
    def item(self) -> bool | int | float | complex:
        """The single element as a Python scalar (synchronizes with the device)."""
        if self._numel != 1:
            raise ShapeError(f"item() needs a tensor with one element, got shape {self._shape}")
        return self._to_numpy_copy().reshape(()).item()

    def tolist(self) -> Any:
        return self._to_numpy_copy().tolist()

    def numpy(self) -> np.ndarray:
        """A numpy view of a host tensor's memory (zero-copy); raises for device memory."""
        address = self._host_address()
        if address is None:
            raise DeviceError(f"numpy() needs a host tensor, this one is on {self._device}; "
                              f"call .to('cpu') first")
        if self._dtype.numpy is None:
            raise DTypeError(f"numpy has no {self._dtype.name}; call .astype(ember_core.float32) first")
        return _numpy_alias(self, address)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        arr = self._to_numpy_copy()
        return arr if dtype is None else arr.astype(dtype)

    def _host_address(self) -> int | None:
        hook = self._device.backend.hooks.get("ember_host_address")
        if hook is None:
            return None
        return hook(self._device, self._storage.handle)

    def _to_numpy_copy(self) -> np.ndarray:
        """A numpy copy of the elements, in C order (bfloat16 widens to float32)."""
        from ember_core import transfer

        arr = transfer.to_numpy_raw(self)
        if self._dtype is _dt.bfloat16:
            wide = arr.astype(np.uint32)
            wide <<= 16  # in place: keeps 0-d results arrays, not numpy scalars
            arr = wide.view(np.float32)
        return arr

    def __dlpack_device__(self) -> tuple[int, int]:
        if self._host_address() is not None:
            return (1, 0)  # kDLCPU
        return self._dlpack_export()(self._device, self._storage.handle, 0, -1)[1]

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: bool | None = None) -> Any:
        """A DLPack capsule of this tensor (zero-copy unless ``copy=True``).  Host memory goes
        through numpy's capsule; device memory through the backend's ``ember_dlpack_export``, after
        making the consumer's ``stream`` wait for the work queued on this tensor's device."""
        if self._host_address() is not None:
            arr = self.numpy()
            if copy:
                arr = arr.copy()
            return arr.__dlpack__() if max_version is None else arr.__dlpack__(max_version=max_version)
        export = self._dlpack_export()
        t = self.clone() if copy else self
        pointer, where = export(t._device, t._storage.handle, t._offset * t.itemsize, stream)
        if dl_device is not None and tuple(dl_device) != tuple(where):
            raise BufferError(f"__dlpack__: this tensor is on DLPack device {tuple(where)} ({t._device}); exporting to "
                              f"{tuple(dl_device)} needs a copy across devices: use .to_device() first")
        from ember_core.interop import to_dlpack

        versioned = max_version is not None and max_version[0] >= 1
        return to_dlpack(t, pointer, where, versioned)

    def _dlpack_export(self) -> Any:
        export = self._device.backend.hooks.get("ember_dlpack_export")
        if export is None:
            raise DeviceError(f"__dlpack__ needs host memory or a backend that exports device memory; "
                              f"{self._device.backend.package} does not: call .to_device('cpu') first")
        return export

    def __array_namespace__(self, *, api_version: str | None = None) -> Any:
        if api_version not in (None, "2023.12", "2022.12", "2021.12"):
            raise ValueError(f"unsupported Array API version {api_version!r}; ember implements 2023.12")
        import ember_core

        return ember_core

    # ---- views ---------------------------------------------------------------------------------
    def reshape(self, *shape: Any, copy: bool | None = None) -> Tensor:
        from ember_core import views

        return views.reshape(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape,
                             copy=copy)

    view = reshape

    def permute_dims(self, axes: Any) -> Tensor:
        from ember_core import views

        return views.permute_dims(self, axes)

    def permute(self, *axes: Any) -> Tensor:
        return self.permute_dims(axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes)

    def transpose(self, dim0: int = -2, dim1: int = -1) -> Tensor:
        from ember_core import views

        return views.swapaxes(self, dim0, dim1)

    def expand(self, *shape: Any) -> Tensor:
        from ember_core import views

        return views.broadcast_to(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        from ember_core import views

        return views.flatten(self, start_dim, end_dim)

    def squeeze(self, axis: Any = None) -> Tensor:
        from ember_core import views

        return views.squeeze(self, axis)

    def unsqueeze(self, axis: int) -> Tensor:
        from ember_core import views

        return views.expand_dims(self, axis=axis)

    def contiguous(self) -> Tensor:
        if self._contig:
            return self
        from ember_core.ops import call

        return call("copy", self)

    def __getitem__(self, key: Any) -> Tensor:
        from ember_core import indexing

        return indexing.getitem(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        from ember_core import indexing

        indexing.setitem(self, key, value)

    # ---- devices and dtypes --------------------------------------------------------------------
    def to_device(self, device: Any, /, *, stream: Any = None) -> Tensor:
        """A copy on ``device`` (self when it is there already).  Recorded by autograd, as PyTorch's
        ``.to``: the copy's gradient goes back to self's device."""
        from ember_core.autograd.grad_mode import MODE
        from ember_core.creation import copy_to_device

        device = as_device(device)
        if device is self._device:
            return self
        out = copy_to_device(self, device)
        if self._requires_grad and MODE.enabled:
            from ember_core.autograd.graph import FunctionNode, attach

            attach([out], FunctionNode("ToDevice", [self], lambda grads: grads))  # (the engine moves them back)
        return out

    def to(self, *args: Any, dtype: Any = None, device: Any = None) -> Tensor:
        """``t.to('vulkan')``, ``t.to(ember_core.float16)``, ``t.to(device, dtype)``."""
        for arg in args:
            if isinstance(arg, (_dt.DType, type)) or (isinstance(arg, str) and arg in _dt.BY_NAME):
                dtype = arg
            else:
                device = arg
        out = self
        if device is not None:
            out = out.to_device(device)
        if dtype is not None and _dt.as_dtype(dtype) is not out._dtype:
            out = out.astype(_dt.as_dtype(dtype))
        return out

    def cpu(self) -> Tensor:
        return self.to_device("cpu")

    def astype(self, dtype: Any, /, *, copy: bool = True) -> Tensor:
        from ember_core.ops import call

        dtype = _dt.as_dtype(dtype)
        if dtype is self._dtype and not copy:
            return self
        return call("astype", self, dtype)


if hotpath.configure(Tensor, Storage, _SMALL_BLOCK, _BLOCKS_PER_SIZE):  # their compiled constructors
    Tensor._make_contiguous = native.make_contiguous  # type: ignore[method-assign]
    new_storage = native.new_storage
else:
    new_storage = Storage


def _as_original_kind(original: Tensor, copied: Tensor) -> Tensor:
    """A copy of a Parameter is a Parameter.  ember_core.nn.parameter keeps that registry, and a
    tensor can be in it only once that module is loaded: the core looks, without importing nn."""
    parameters = sys.modules.get("ember_core.nn.parameter")
    if parameters is not None and isinstance(original, parameters.Parameter):
        parameters.remember(copied)
    return copied


def _numpy_alias(t: Tensor, address: int) -> np.ndarray:
    """An ndarray over a host tensor's memory that keeps the tensor's storage alive."""
    itemsize = t.itemsize
    low, high = span(t._shape, t._strides, 0)
    holder = _Holder(t._storage, address + (t._offset + low) * itemsize, (high - low + 1) * itemsize)
    if not t._numel:
        return np.empty(t._shape, t._dtype.numpy)
    flat = np.asarray(holder).view(t._dtype.numpy)  # the holder (and storage) stays the base
    return np.lib.stride_tricks.as_strided(
        flat[-low:], shape=t._shape, strides=tuple(s * itemsize for s in t._strides), writeable=True
    )


class _Holder:
    """Exposes host memory through the buffer protocol while holding its Storage."""

    def __init__(self, storage: Storage, address: int, nbytes: int) -> None:
        self.storage = storage
        self.__array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (address, False), "version": 3,
        }

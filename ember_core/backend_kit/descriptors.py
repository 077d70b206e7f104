"""``ember_tensor`` descriptors (ember.h) from tensors, for kernels compiled with cffi."""

from __future__ import annotations

from typing import Any

from ember_core.errors import ShapeError
from ember_core.views import coalesce


class Descriptors:
    """Builds descriptors with a plugin's own ``ffi`` (its cdef includes ember.h).

    ``address(handle)`` gives the host-visible address of an allocation; the default reads
    ``handle.address`` (``HostBlock``).
    """

    def __init__(self, ffi: Any, address: Any = None) -> None:
        self.ffi = ffi
        self.address = address or (lambda handle: handle.address)
        self.size = ffi.sizeof("ember_tensor")
        self.max_ndim = ffi.integer_const("EMBER_MAX_NDIM")

    def of(self, t: Any, shape: tuple[int, ...] | None = None, strides: tuple[int, ...] | None = None) -> Any:
        """The descriptor of ``t`` (with its own layout unless ``shape``/``strides`` are given)."""
        shape = t.shape if shape is None else shape
        strides = t.strides if strides is None else strides
        if len(shape) > self.max_ndim:
            raise ShapeError(f"a descriptor holds at most {self.max_ndim} dims, this layout has {len(shape)}; "
                             f"make the tensor contiguous first")
        data = self.ffi.cast("void *", self.address(t.handle))
        return self.ffi.new("ember_tensor *", (self.size, t.dtype.code, len(shape), 0, data, t.offset,
                                               list(shape), list(strides)))

    def same_shape(self, *tensors: Any) -> list[Any]:
        """Descriptors of operands sharing one shape (an elementwise call), with the dims that are
        contiguous in all of them merged: fewer loop levels in C."""
        shape, strides = coalesce(tensors[0].shape, *(t.strides for t in tensors))
        return [self.of(t, tuple(shape), tuple(st)) for t, st in zip(tensors, strides)]

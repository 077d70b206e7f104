"""The compiled per-op hot path: ``a + b`` on small tensors without running Python code.

A small op's time is the core's own work (checks, plan lookup, a Storage and a Tensor built and
later released, the call into the kernel), not the kernel's.  ``ember_core/_hotpath.c``, built when
ember is installed and optional (without it, or with ``EMBER_HOTPATH=0``, everything below is the
pure-Python path, which stays the reference), does that work in C for the common case.

What is fast: the forward of an elementwise op of the unary or binary family, called as
``a + b`` / ``a - b`` / ``a * b`` / ``a / b`` / ``-a`` or as the op itself (``ember_core.sin(x)``,
and the ops a backward runs), when
  - every operand is an ember Tensor, or one of two is a Python int or float;
  - they are on one device, already in the op's compute dtype, with one shape (or one is 0-d);
  - each is contiguous or one element repeated (a scalar operand);
  - the provider the dispatcher picks for (op, dtype, device) exports a direct entry (below);
  - no ``providers()`` / ``fallback_policy()`` / ``trace()`` block is open in any thread.
The plan for (op, dtypes, device) is the dispatcher's own choice, asked once and cached in C
(dropped whenever plugins or the configuration change); the result's block comes from the
device's pool of freed small blocks, as ``Storage`` takes it.

The compiled op is the op's public entry (``ember_core.ops.ENTRIES``, the Tensor operators), so
such a call runs no Python frame at all.  When autograd records the call (an operand requires
grad, grad mode on), the result is computed the same way and only the node is made in Python
(``attach`` in ember_core.autograd.formulas).

What defers: everything else runs the Python path, unchanged (broadcasting, casts, strided views,
composites, fallback, errors; for a recorded call, formulas' ``recorded``).  A failed kernel
status also defers, so the provider's Python kernel reports the error.

How a backend opts in: its kernel for a unary or binary op carries ``direct_entry = (address,
code)``: the address of a C function with the signature ``ember_unary_flat_fn`` or
``ember_binary_flat_fn`` (ember.h) and the provider's op code passed as its first argument.  Its
allocation handles must be cffi pointers (``ffi.cast("void *", ...)``, ``ffi.new``,
``ffi.from_buffer``), whose address the hot path reads; ember-cpu is the example.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

try:
    if os.environ.get("EMBER_HOTPATH", "1") == "0":
        raise ImportError("EMBER_HOTPATH=0")
    from ember_core import _hotpath as native
except ImportError:  # not built (no compiler at install) or switched off: the pure-Python path
    native = None

TensorBase: type = object if native is None else native.TensorBase
StorageBase: type = object if native is None else native.StorageBase

# the operators the C number slots serve, and the slot each one fills
_SLOTS = {"__add__": "__add__", "__radd__": "__add__", "__sub__": "__sub__", "__rsub__": "__sub__",
          "__mul__": "__mul__", "__rmul__": "__mul__", "__truediv__": "__truediv__",
          "__rtruediv__": "__truediv__", "__neg__": "__neg__"}
_configured = False


def configure(tensor: type, storage: type, small_block: int, blocks_per_size: int) -> bool:
    """Hand the compiled path the core's Tensor and Storage (ember_core.tensor calls this once they
    exist).  False (the pure-Python path) when it is absent or cffi's object layout is not the one
    it reads."""
    global _configured
    if native is None:
        return False
    import _cffi_backend
    import cffi

    from ember_core.autograd.grad_mode import MODE

    native.configure(tensor, storage, _cffi_backend._CDataBase, MODE, small_block, blocks_per_size)
    ffi = cffi.FFI()
    samples = (ffi.cast("void *", 0x12345678), ffi.new("char[8]"), ffi.from_buffer(bytearray(8)))
    _configured = all(native.cdata_address(p) == int(ffi.cast("uintptr_t", p)) for p in samples)
    return _configured


def serve_scalars(scalar_operand: Callable[[Any, Any], Any]) -> None:
    """Python scalar operands (``x * 1.5``) take the fast path as ``scalar_operand(value, partner)``."""
    if _configured:
        native.serve_scalars(scalar_operand)


_ARITY = {"unary": 1, "binary": 2}  # the families whose forward the C path runs


def fast(forward: Callable[..., Any], family: str, name: str) -> Any:
    """``forward`` with its fast case compiled, when the hot path is on and the family is one it
    runs (its builder's ``planned(x1[, x2]) -> (compute dtype, result dtype, choice, kernel)``
    gives the plan); else ``forward`` itself."""
    arity = _ARITY.get(family)
    planned = getattr(forward, "planned", None)
    if not _configured or arity is None or planned is None:
        return forward
    op = native.FastOp(forward, _planner(planned, arity), arity)
    op.__wrapped__ = forward  # signature and docs are the forward's
    op.__qualname__ = name  # (its repr)
    into = getattr(forward, "into", None)
    if into is not None:
        op.into = into
    return op


def _planner(planned: Callable[..., tuple[Any, ...]], arity: int) -> Callable[[Any, Any], Any]:
    def planner(x1: Any, x2: Any) -> tuple[Any, ...] | None:
        """What the C path needs for these operands' (dtypes, device), or None: Python runs it."""
        compute, out_dtype, _, kernel = planned(x1) if arity == 1 else planned(x1, x2, x1._device)
        direct = getattr(kernel, "direct_entry", None)
        if direct is None or x1._dtype is not compute or (x2 is not None and x2._dtype is not compute):
            return None
        address, code = direct
        return address, code, compute.code, out_dtype.itemsize, out_dtype, x1._device._pool

    return planner


def entry(fn: Callable[..., Any]) -> Any:
    """An op's public entry: its compiled forward itself when ``fn`` is formulas' one- or
    two-operand entry over it (which carries ``recorded``, the call that records), so that a call
    runs no Python frame unless autograd records it; else ``fn``.  A recorded call whose forward
    the C path computes only runs ``recorded.attach`` (the node), when formulas provides it."""
    forward, recorded = getattr(fn, "__wrapped__", None), getattr(fn, "recorded", None)
    if recorded is None or native is None or not isinstance(forward, native.FastOp):
        return fn
    native.record_with(forward, recorded, getattr(recorded, "attach", None))
    return forward


def serves(method: str, entry: Any) -> bool:
    """True when the compiled Tensor type serves this operator itself (so no Python method is
    bound for it): ``entry`` must be a compiled op."""
    slot = _SLOTS.get(method)
    return slot is not None and isinstance(entry, getattr(native, "FastOp", ())) and native.bind_slot(slot, entry)


def clear() -> None:
    """Forget every compiled plan (plugins or the configuration changed)."""
    if native is not None:
        native.clear()


def pause() -> None:
    """A preference block opened (in any thread): calls take the Python path until it closes."""
    if native is not None:
        native.pause()


def resume() -> None:
    if native is not None:
        native.resume()

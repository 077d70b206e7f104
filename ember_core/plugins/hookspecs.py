"""The backend contract: every hook a plugin may implement, with its exact signature.

A plugin is a module (or object) whose functions carry ``@ember_core.plugins.hookimpl`` and whose
names are the hooks below.  It is found through the entry-point group ``ember.backends`` or
registered explicitly with ``ember_core.plugins.register(module)``.

Three tiers of hooks:

* every plugin implements the REQUIRED hooks (``ember_plugin_info``, ``ember_kernels``);
* a plugin that owns a device type (``PluginInfo.device_types`` is non-empty) also implements
  every DEVICE hook: count, availability, properties, allocator, copies, synchronize;
* OPTIONAL hooks add capabilities; the core never assumes one exists.

A missing required or device hook is an error at registration: the plugin is listed as broken
(``ember backends``) and never half-works.  Hooks are plain Python; how a plugin reaches its
native code (cffi, ctypes, a driver) is its own business, but it must report the ember.h ABI it
was compiled against in ``PluginInfo.abi`` *before* the core calls any of its kernels.

Random numbers: there is no seeding hook on purpose.  Generator state (seed, offset) lives in the
core (``ember_core.random``), so seeding can never silently do nothing on a device; a backend
provides the ``random_*`` kernels, which reproduce one documented counter-based stream.

Tensors handed to kernels expose ``.shape``, ``.strides`` (elements), ``.offset`` (elements),
``.dtype`` (``.dtype.code`` is the ember.h code), ``.device``, ``.handle`` (the object your
``ember_alloc`` returned) and ``.is_contiguous``.  The core has validated them: shapes agree as
the op's family promises, indices are in range, dtypes are ones your manifest claims.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("ember")

REQUIRED_HOOKS = ("ember_plugin_info", "ember_kernels")
DEVICE_HOOKS = (
    "ember_device_count",
    "ember_device_unavailable_reason",
    "ember_device_properties",
    "ember_alloc",
    "ember_free",
    "ember_memory_stats",
    "ember_copy_from_host",
    "ember_copy_to_host",
    "ember_copy_on_device",
    "ember_synchronize",
)


# ---- required of every plugin ------------------------------------------------------------------

@hookspec
def ember_plugin_info() -> Any:
    """Identity: return an ``ember_core.plugins.PluginInfo``.

    Called first, before any other hook.  ``abi`` must be the (EMBER_ABI_MAJOR, EMBER_ABI_MINOR)
    your native code was compiled with (read it from your compiled module, not from a literal), so
    that a stale build is caught here rather than by a crash.
    """


@hookspec
def ember_kernels(device_type: str) -> Mapping[str, Callable[..., None]]:
    """The kernels this plugin provides for tensors on ``device_type``: op name -> callable.

    Exactly the ops your manifest lists for that device type.  A kernel is called with the output
    tensor(s) first, then the op's inputs, then its attributes as keywords; the signature per op
    family is documented in docs/writing-a-backend.md.  Return an empty mapping for device types
    you do not serve.
    """


# ---- required of plugins that own a device type --------------------------------------------------

@hookspec
def ember_device_count(device_type: str) -> int:
    """How many devices of this type are usable now (0 when none).  Must not raise."""


@hookspec
def ember_device_unavailable_reason(device_type: str) -> str | None:
    """None when at least one device works; otherwise why not, in words a user can act on
    ("no Vulkan driver found: apt-get install mesa-vulkan-drivers")."""


@hookspec
def ember_device_properties(device: Any) -> Mapping[str, Any]:
    """Facts about one device for reports: name, memory, driver, compute capability..."""


@hookspec
def ember_alloc(device: Any, nbytes: int) -> Any:
    """Allocate ``nbytes`` (0 allowed) on ``device``; return an opaque handle.

    Raise ``MemoryError`` when out of memory.  The core calls ``ember_free`` exactly once per
    handle, when it no longer needs it: it may keep a few freed blocks of up to 64 KiB for reuse
    (``ember_core.empty_cache()`` returns them), and it never frees a block it did not allocate.
    """


@hookspec
def ember_free(device: Any, handle: Any) -> None:
    """Release a handle from ``ember_alloc``.  Runs from a finalizer: must not raise."""


@hookspec
def ember_memory_stats(device: Any) -> Mapping[str, int]:
    """At least ``allocated_bytes`` (bytes in live handles) and ``peak_bytes`` (the most ever live);
    a caching allocator adds ``reserved_bytes`` (what it holds from the driver: live plus cached),
    and may add more (``cached_bytes``, ``live_allocations``...)."""


@hookspec
def ember_copy_from_host(device: Any, dst: Any, dst_offset: int, src: memoryview) -> None:
    """Copy the C-contiguous bytes of ``src`` into handle ``dst`` at byte offset ``dst_offset``."""


@hookspec
def ember_copy_to_host(device: Any, src: Any, src_offset: int, dst: memoryview) -> None:
    """Fill the writable C-contiguous ``dst`` from handle ``src`` starting at byte ``src_offset``.
    Returns once the bytes are in ``dst`` (synchronizes as needed)."""


@hookspec
def ember_copy_on_device(
    device: Any, dst: Any, dst_offset: int, src_device: Any, src: Any, src_offset: int, nbytes: int
) -> None:
    """Copy ``nbytes`` between two handles of this plugin's device type (possibly two devices)."""


@hookspec
def ember_synchronize(device: Any) -> None:
    """Block until all work queued on ``device`` has finished."""


# ---- optional capabilities ------------------------------------------------------------------------

@hookspec
def ember_host_address(device: Any, handle: Any) -> int | None:
    """The host address of a handle's first byte when the memory is host-addressable (a cpu
    backend), else None.  Enables zero-copy ``.numpy()``, ``__dlpack__`` and ``from_numpy``."""


@hookspec
def ember_wrap_host_memory(device: Any, obj: Any) -> Any:
    """A handle aliasing a writable C-contiguous host buffer ``obj`` (kept alive by the handle),
    for zero-copy ``from_numpy``; None when the device cannot alias host memory."""


@hookspec
def ember_op_declarations() -> list[str]:
    """Paths of TOML files declaring vendor ops (``myvendor.fused_gelu``), in the registry's format.
    They become callable as ``ember_core.ops.myvendor.fused_gelu``."""


@hookspec
def ember_set_num_threads(n: int) -> None:
    """The user asked for ``n`` host threads (``ember_core.set_num_threads``)."""


@hookspec
def ember_autocast_dtypes(device_type: str) -> list[str]:
    """Lower-precision dtypes autocast may use on this device type, most preferred first."""


@hookspec
def ember_profiler_events(device: Any) -> list[Mapping[str, Any]]:
    """Drain and return timing events recorded since the last call (name, start_ns, end_ns)."""


@hookspec
def ember_empty_cache(device: Any) -> None:
    """Return memory your allocator caches on ``device`` to the driver (``ember_core.empty_cache()``
    calls it for every device in use, after handing back the core's own recycled blocks).  Live
    handles stay valid."""


# DLPack for device memory (GPU backends).  The core builds and parses the DLPack capsules
# (ember_core.interop); a backend only translates between its handles and device pointers.

@hookspec
def ember_dlpack_export(device: Any, handle: Any, byte_offset: int, stream: Any) -> tuple[int, tuple[int, int]]:
    """``(pointer, (dlpack_device_type, dlpack_device_id))`` for the byte at ``byte_offset`` of
    ``handle``: the address a consumer reads, and its DLPack device (kDLCUDA = 2, kDLROCM = 10).

    ``stream`` is the consumer's, as ``__dlpack__`` received it (CUDA: an int handle, None for the
    legacy default stream, -1 for no synchronization): make it wait for the work queued on
    ``device`` so far (an event), without blocking the host.  The core keeps the tensor alive
    until the consumer releases the capsule."""


@hookspec
def ember_dlpack_import(device: Any, pointer: int, nbytes: int, owner: Any) -> Any:
    """A handle for ``nbytes`` of foreign device memory at ``pointer`` on ``device``, without
    copying (``ember_core.from_dlpack`` of a torch or CuPy GPU tensor).  Keep ``owner`` alive until
    ``ember_free`` of the handle, then drop it (that lets the producer free the memory); never free
    the memory yourself, and count it in no statistics."""


@hookspec
def ember_dlpack_stream(device: Any) -> int | None:
    """The stream a DLPack producer must order its work before, as the int its ``__dlpack__``
    takes: the stream ember queues ``device``'s work on (None: the device has no streams)."""


@hookspec
def ember_serialize_handle(device: Any, handle: Any, nbytes: int) -> bytes:
    """Optional fast path for saving tensors; without it the core copies to host."""

"""A fake of a vendor's driver library, for CI machines without a GPU.

``FakeGpu(vendor).lib`` has exactly the vendor symbols of the binding's cdef, each taking and
returning what the real function does (cffi out-parameters filled, a status returned), so the
runtime cannot tell it from the driver.  Behind them: device memory as bytearrays at fake device
addresses (with the stream-ordered pool's caching and ``reserved``/``used`` figures), pinned host
memory that is real host memory, streams and events as counters (work runs at once), modules that
accept any kernel name, recorded launches with their packed argument bytes, and failures on
demand:

* ``fail(name, status, skip=0, times=1)``: after ``skip`` successful calls, ``times`` calls of
  ``name`` (an ember_gpu name or the vendor symbol) return ``status`` (``times=None``: for ever);
* ``fault(status)``: what an illegal access in a kernel does: the next call reports ``status``,
  and so does every call after it (the context is poisoned).

``kernels[name] = fn(fake, launch)`` emulates a kernel: it runs at launch and may return a status.

``FakeGpu(vendor, host_kernels=<dir>)`` runs the real kernels: ``<dir>`` holds the host libraries
of ``ember_gpu.build.build_host_libraries`` (the very kernel sources, compiled by g++ with an
emulated grid), device memory is then real host memory (an allocation's address is a real
pointer, so kernels dereference it), a launch of a kernel in their index calls its
``<kernel>_host(args, grid, block)`` with the launch's argument bytes, and a kernel neither there
nor in ``kernels`` is not found in its module.  Every allocation keeps a guard of ``_GRANULE``
bytes on each side; a launch that wrote into the guards of an operand its arguments name fails as
an illegal address would (the context is poisoned).  Overruns past the guard are not caught (they
corrupt host memory, as they would another allocation on a GPU).
"""

from __future__ import annotations

import bisect
import os
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cffi

from ember_gpu.driver import SIGNATURES, Driver, cdef_for
from ember_gpu.vendor import Vendor

_GRANULE = 256  # allocations are aligned (and rounded) to this, as the real pools do
_GUARD = 0xFD  # the bytes around a host-memory allocation (never written by a correct kernel)
_OPERAND_WORDS = 4  # abi.h's argument structs start with their pointers: out and up to 3 inputs
_NEVER_FAIL = frozenset({"get_error_name", "get_error_string"})
_INVALID_VALUE, _INVALID_CONTEXT, _INVALID_DEVICE, _NOT_FOUND, _NOT_READY = 1, 201, 101, 500, 600


@dataclass(frozen=True)
class FakeLaunch:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    device: int
    args: bytes  # the argument buffer exactly as passed through ``extra``


@dataclass
class _Device:
    capacity: int
    reserved: int = 0  # bytes the pool holds from the "driver"
    used: int = 0  # bytes in live allocations
    cached: list[tuple[int, Any]] = field(default_factory=list)  # freed blocks the pool keeps: (size, host memory)
    release_threshold: int = 0


@dataclass
class _Block:
    device: int
    size: int  # rounded
    data: Any  # bytearray, or (host_kernels) a cffi buffer over ``memory``
    memory: Any = None  # host_kernels: the host allocation holding the block and its guards


class _HostKernels:
    """The host libraries of a kernel build, opened per image on first use."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        from ember_gpu.build import read_index

        self.directory = Path(directory)
        self.image_of = read_index(self.directory)  # kernel -> library file
        if not self.image_of:
            raise ValueError(f"{self.directory} holds no host kernel libraries (kernels.json): build them with "
                             f"ember_gpu.build.build_host_libraries")
        self._functions: dict[str, Any] = {}
        self._libraries: dict[str, tuple[cffi.FFI, Any]] = {}

    def function(self, kernel: str) -> Any:
        found = self._functions.get(kernel)
        if found is None:
            file = self.image_of[kernel]
            if file not in self._libraries:
                ffi = cffi.FFI()
                ffi.cdef("".join(f"void {name}_host(const void *, unsigned int, unsigned int);\n"
                                 for name, image in self.image_of.items() if image == file))
                self._libraries[file] = ffi, ffi.dlopen(str(self.directory / file))
            found = self._functions[kernel] = getattr(self._libraries[file][1], kernel + "_host")
        return found


@dataclass
class _Failure:
    status: int
    skip: int
    times: int | None


class FakeGpu:
    """The fake driver of ``devices`` identical GPUs with ``memory_bytes`` each."""

    def __init__(self, vendor: Vendor, *, devices: int = 1, memory_bytes: int = 1 << 30,
                 compute_capability: tuple[int, int] = (9, 0), driver_version: int | None = None,
                 name: str = "ember fake GPU", multiprocessors: int = 132,
                 host_kernels: str | os.PathLike[str] | None = None) -> None:
        self.vendor = vendor
        self.host_kernels = None if host_kernels is None else _HostKernels(host_kernels)
        self.ffi = cffi.FFI()
        self.ffi.cdef(cdef_for(vendor))
        self.name = name
        self.driver_version = vendor.min_driver_version if driver_version is None else driver_version
        self.devices = [_Device(memory_bytes) for _ in range(devices)]
        self.attribute_values: dict[str, int] = {
            "max_threads_per_block": 1024, "max_block_dim_x": 1024, "max_block_dim_y": 1024, "max_block_dim_z": 64,
            "max_grid_dim_x": 2**31 - 1, "max_grid_dim_y": 65535, "max_grid_dim_z": 65535,
            "max_shared_memory_per_block": 48 << 10, "warp_size": vendor.warp_size,
            "multiprocessor_count": multiprocessors, "compute_capability_major": compute_capability[0],
            "compute_capability_minor": compute_capability[1], "memory_pools_supported": 1,
        }
        self.device_attributes: list[dict[str, int]] = [{} for _ in range(devices)]  # per-device overrides
        self.calls: list[str] = []  # every call, by ember_gpu name
        self.launches: list[FakeLaunch] = []
        self.kernels: dict[str, Callable[[FakeGpu, FakeLaunch], int | None]] = {}
        self.kernel_names: set[str] | None = None  # None: every module has every kernel
        self.stream_flags: dict[int, int] = {}  # created streams' flags, by handle
        self.modules_loaded = 0
        self.opened = 0  # drivers handed to a runtime (``open``)
        self._failures: dict[str, list[_Failure]] = {}
        self._pending_fault = 0
        self._poisoned = 0
        self._blocks: dict[int, _Block] = {}
        self._addresses: list[int] = []  # sorted block addresses
        self._next_address = [(index + 1) << 40 for index in range(devices)]
        self._host: dict[int, Any] = {}  # pinned buffers by address
        self._handles: dict[int, tuple[str, Any]] = {}  # opaque handle -> (kind, payload)
        self._next_handle = 0x1000
        self._current = threading.local()
        self._strings: dict[bytes, Any] = {}
        by_symbol = {symbol: name for name, symbol in vendor.symbols.items()}
        self._attribute_names = {code: name for name, code in vendor.attributes.items()}
        self._pool_attribute_names = {code: name for name, code in vendor.pool_attributes.items()}
        self.lib = _FakeLib(self, by_symbol)

    # ---- what tests use -------------------------------------------------------------------------

    def open(self, vendor: Vendor) -> Driver:
        """The runtime's driver opener: this fake as a Driver, with a fake BLAS on its memory (when
        the vendor has a BLAS table)."""
        from ember_gpu.fake_blas import FakeBlas

        self.opened += 1
        return Driver(vendor, self.lib, self.ffi, blas_opener=FakeBlas(self).open if vendor.blas else None)

    def fail(self, name: str, status: int, *, skip: int = 0, times: int | None = 1) -> None:
        name = {symbol: n for n, symbol in self.vendor.symbols.items()}.get(name, name)
        if name not in SIGNATURES:
            raise ValueError(f"no driver function {name!r}")
        self._failures.setdefault(name, []).append(_Failure(status, skip, times))

    def fault(self, status: int) -> None:
        self._pending_fault = status

    def count(self, name: str) -> int:
        return self.calls.count(name)

    def read(self, pointer: int, nbytes: int) -> bytes:
        block, offset = self._find(pointer, nbytes)
        return bytes(block.data[offset:offset + nbytes])

    def write(self, pointer: int, data: bytes) -> None:
        block, offset = self._find(pointer, len(data))
        block.data[offset:offset + len(data)] = data

    def used_bytes(self, device: int = 0) -> int:
        return self.devices[device].used

    def reserved_bytes(self, device: int = 0) -> int:
        return self.devices[device].reserved

    # ---- dispatch ---------------------------------------------------------------------------------

    def _invoke(self, name: str, args: tuple[Any, ...]) -> int:
        self.calls.append(name)
        if name not in _NEVER_FAIL:
            if self._pending_fault:
                self._poisoned, self._pending_fault = self._pending_fault, 0
            if self._poisoned:
                return self._poisoned
            for failure in self._failures.get(name, ()):
                if failure.times == 0:
                    continue
                if failure.skip:
                    failure.skip -= 1
                    continue
                if failure.times is not None:
                    failure.times -= 1
                return failure.status
        return getattr(self, "_" + name)(*args) or 0

    def _handle(self, kind: str, payload: Any) -> Any:
        self._next_handle += 16
        self._handles[self._next_handle] = (kind, payload)
        return self.ffi.cast("void *", self._next_handle)

    def _lookup(self, handle: Any, kind: str) -> Any:
        found = self._handles.get(int(self.ffi.cast("uintptr_t", handle)))
        return found[1] if found is not None and found[0] == kind else None

    def _current_device(self) -> int | None:
        return getattr(self._current, "device", None)

    def _find(self, pointer: int, nbytes: int) -> tuple[_Block, int]:
        at = bisect.bisect_right(self._addresses, pointer) - 1
        if at >= 0:
            base = self._addresses[at]
            block = self._blocks[base]
            if pointer + nbytes <= base + len(block.data):
                return block, pointer - base
        raise _Status(_INVALID_VALUE)

    def _text(self, text: str) -> Any:
        data = text.encode()
        if data not in self._strings:
            self._strings[data] = self.ffi.new("char[]", data)
        return self._strings[data]

    # ---- initialisation and devices ---------------------------------------------------------------

    def _init(self, flags: int) -> None:
        pass

    def _driver_get_version(self, version: Any) -> None:
        version[0] = self.driver_version

    def _device_get_count(self, count: Any) -> None:
        count[0] = len(self.devices)

    def _device_get(self, device: Any, ordinal: int) -> int:
        if not 0 <= ordinal < len(self.devices):
            return _INVALID_DEVICE
        device[0] = ordinal
        return 0

    def _device_get_name(self, buffer: Any, length: int, device: int) -> None:
        data = self.name.encode()[: length - 1]
        self.ffi.memmove(buffer, data + b"\0", len(data) + 1)

    def _device_get_attribute(self, value: Any, attribute: int, device: int) -> int:
        name = self._attribute_names.get(attribute)
        found = self.device_attributes[device].get(name, self.attribute_values.get(name))
        if found is None:
            return _INVALID_VALUE
        value[0] = found
        return 0

    def _device_total_mem(self, nbytes: Any, device: int) -> None:
        nbytes[0] = self.devices[device].capacity

    def _primary_ctx_retain(self, context: Any, device: int) -> None:
        context[0] = self._handle("context", device)

    def _primary_ctx_release(self, device: int) -> None:
        pass

    def _ctx_set_current(self, context: Any) -> int:
        device = self._lookup(context, "context")
        if device is None:
            return _INVALID_CONTEXT
        self._current.device = device
        return 0

    def _mem_get_info(self, free: Any, total: Any) -> int:
        device = self._current_device()
        if device is None:
            return _INVALID_CONTEXT
        state = self.devices[device]
        free[0], total[0] = state.capacity - state.reserved, state.capacity
        return 0

    # ---- streams and events -----------------------------------------------------------------------

    def _stream_create(self, stream: Any, flags: int) -> int:
        device = self._current_device()
        if device is None:
            return _INVALID_CONTEXT
        stream[0] = self._handle("stream", device)
        self.stream_flags[int(self.ffi.cast("uintptr_t", stream[0]))] = flags
        return 0

    def _stream_device(self, stream: Any) -> int:
        device = self._lookup(stream, "stream")
        if device is None:
            raise _Status(_INVALID_VALUE)
        return device

    def _stream_destroy(self, stream: Any) -> None:
        self._stream_device(stream)

    def _stream_synchronize(self, stream: Any) -> None:
        self._stream_device(stream)

    def _stream_wait_event(self, stream: Any, event: Any, flags: int) -> int:
        # the null stream (every vendor's default), CUDA's legacy / per-thread default streams
        special = int(self.ffi.cast("uintptr_t", stream)) in (0, 1, 2)
        if not special:
            self._stream_device(stream)
        return 0 if self._lookup(event, "event") is not None else _INVALID_VALUE

    def _event_create(self, event: Any, flags: int) -> int:
        if self._current_device() is None:
            return _INVALID_CONTEXT
        event[0] = self._handle("event", {"flags": flags, "time": None})
        return 0

    def _event(self, event: Any) -> dict[str, Any]:
        state = self._lookup(event, "event")
        if state is None:
            raise _Status(_INVALID_VALUE)
        return state

    def _event_record(self, event: Any, stream: Any) -> None:
        self._stream_device(stream)
        self._event(event)["time"] = time.perf_counter()

    def _event_synchronize(self, event: Any) -> None:
        self._event(event)

    def _event_elapsed_time(self, milliseconds: Any, start: Any, end: Any) -> int:
        first, last = self._event(start)["time"], self._event(end)["time"]
        if first is None or last is None:
            return _NOT_READY
        milliseconds[0] = (last - first) * 1e3
        return 0

    def _event_destroy(self, event: Any) -> None:
        self._event(event)

    # ---- memory -------------------------------------------------------------------------------------

    def _device_get_default_mem_pool(self, pool: Any, device: int) -> None:
        pool[0] = self._handle("pool", device)

    def _pool(self, pool: Any) -> _Device:
        device = self._lookup(pool, "pool")
        if device is None:
            raise _Status(_INVALID_VALUE)
        return self.devices[device]

    def _mem_pool_set_attribute(self, pool: Any, attribute: int, value: Any) -> int:
        if self._pool_attribute_names.get(attribute) != "release_threshold":
            return _INVALID_VALUE
        self._pool(pool).release_threshold = self.ffi.cast("uint64_t *", value)[0]
        return 0

    def _mem_pool_get_attribute(self, pool: Any, attribute: int, value: Any) -> int:
        state = self._pool(pool)
        figures = {"release_threshold": state.release_threshold, "reserved_mem_current": state.reserved,
                   "used_mem_current": state.used}
        name = self._pool_attribute_names.get(attribute)
        if name not in figures:
            return _INVALID_VALUE
        self.ffi.cast("uint64_t *", value)[0] = figures[name]
        return 0

    def _mem_pool_trim_to(self, pool: Any, keep_bytes: int) -> None:
        state = self._pool(pool)
        while state.cached and state.reserved > keep_bytes:
            state.reserved -= state.cached.pop()[0]

    def _mem_alloc_async(self, pointer: Any, nbytes: int, stream: Any) -> int:
        device = self._stream_device(stream)
        if nbytes == 0:
            return _INVALID_VALUE
        state = self.devices[device]
        size = -(-nbytes // _GRANULE) * _GRANULE
        reuse = next((i for i, (cached, _) in enumerate(state.cached) if cached >= size), None)
        memory = None
        if reuse is not None:
            size, memory = state.cached.pop(reuse)
        elif state.reserved + size > state.capacity:
            return self.vendor.out_of_memory
        else:
            state.reserved += size
        state.used += size
        if self.host_kernels is None:
            address = self._next_address[device]
            self._next_address[device] += size + _GRANULE  # a gap: no two blocks touch
            block = _Block(device, size, bytearray(b"\xcd" * nbytes))  # never zeroed, as on a GPU
        else:
            address, block = self._host_block(device, size, nbytes, memory)
        self._blocks[address] = block
        bisect.insort(self._addresses, address)
        pointer[0] = address
        return 0

    def _mem_free_async(self, pointer: int, stream: Any) -> int:
        self._stream_device(stream)
        block = self._blocks.pop(pointer, None)
        if block is None:
            return _INVALID_VALUE
        self._addresses.remove(pointer)
        state = self.devices[block.device]
        state.used -= block.size
        state.cached.append((block.size, block.memory))  # host memory stays allocated, as a pool keeps it
        return 0

    # ---- host memory (host_kernels) ------------------------------------------------------------------

    def _host_block(self, device: int, size: int, nbytes: int, memory: Any) -> tuple[int, _Block]:
        """A block of real host memory (its address, the block): ``size`` bytes aligned to
        _GRANULE between two guards."""
        if memory is None:
            memory = self.ffi.new("char[]", size + 3 * _GRANULE)
        start = -(-int(self.ffi.cast("uintptr_t", memory)) // _GRANULE) * _GRANULE + _GRANULE
        whole = self.ffi.buffer(self.ffi.cast("char *", start - _GRANULE), size + 2 * _GRANULE)
        whole[:] = bytes([_GUARD]) * len(whole)
        whole[_GRANULE:_GRANULE + nbytes] = b"\xcd" * nbytes  # never zeroed, as on a GPU
        return start, _Block(device, size, self.ffi.buffer(self.ffi.cast("char *", start), nbytes), memory)

    def _guards_intact(self, address: int) -> bool:
        block = self._blocks[address]
        before = self.ffi.buffer(self.ffi.cast("char *", address - _GRANULE), _GRANULE)
        after = self.ffi.buffer(self.ffi.cast("char *", address + len(block.data)),
                                block.size + _GRANULE - len(block.data))
        guard = bytes([_GUARD])
        return before[:] == guard * len(before) and after[:] == guard * len(after)

    def _run_host_kernel(self, launch: FakeLaunch) -> int:
        """Run a launch on the host libraries; an operand whose guards it overwrote poisons the
        context as the illegal address would on a GPU."""
        arguments = self.ffi.new("char[]", launch.args)
        self.host_kernels.function(launch.kernel)(arguments, launch.grid[0], launch.block[0])
        words = struct.unpack_from(f"<{_OPERAND_WORDS}Q", launch.args.ljust(8 * _OPERAND_WORDS, b"\0"))
        for word in words:
            at = bisect.bisect_right(self._addresses, word) - 1
            if at >= 0 and not self._guards_intact(self._addresses[at]):
                self._poisoned = min(self.vendor.lost_device_errors)
                return self._poisoned
        return 0

    def _mem_host_alloc(self, pointer: Any, nbytes: int, flags: int) -> int:
        if self._current_device() is None:
            return _INVALID_CONTEXT
        buffer = self.ffi.new("char[]", nbytes)
        self._host[int(self.ffi.cast("uintptr_t", buffer))] = buffer
        pointer[0] = buffer
        return 0

    def _mem_free_host(self, pointer: Any) -> int:
        return 0 if self._host.pop(int(self.ffi.cast("uintptr_t", pointer)), None) is not None else _INVALID_VALUE

    def _host_bytes(self, pointer: Any, nbytes: int) -> Any:
        return self.ffi.buffer(self.ffi.cast("char *", pointer), nbytes)

    def _memcpy_htod_async(self, dst: int, src: Any, nbytes: int, stream: Any) -> None:
        self._stream_device(stream)
        self.write(dst, self._host_bytes(src, nbytes)[:])

    def _memcpy_dtoh_async(self, dst: Any, src: int, nbytes: int, stream: Any) -> None:
        self._stream_device(stream)
        self._host_bytes(dst, nbytes)[:] = self.read(src, nbytes)

    def _memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        self._stream_device(stream)
        self.write(dst, self.read(src, nbytes))

    def _memcpy_peer_async(self, dst: int, dst_context: Any, src: int, src_context: Any, nbytes: int,
                           stream: Any) -> int:
        self._stream_device(stream)
        for pointer, context in ((dst, dst_context), (src, src_context)):
            device = context if self.vendor.peer_copy_by_ordinal else self._lookup(context, "context")
            if device is None or self._find(pointer, nbytes)[0].device != device:
                return _INVALID_VALUE
        self.write(dst, self.read(src, nbytes))
        return 0

    def _memset_d8_async(self, dst: int, value: int, count: int, stream: Any) -> None:
        self._stream_device(stream)
        self.write(dst, bytes([value]) * count)

    # ---- modules and launches -----------------------------------------------------------------------

    def _module_load_data(self, module: Any, image: Any) -> int:
        if self._current_device() is None:
            return _INVALID_CONTEXT
        self.modules_loaded += 1
        module[0] = self._handle("module", self._current_device())
        return 0

    def _module_unload(self, module: Any) -> None:
        if self._lookup(module, "module") is None:
            raise _Status(_INVALID_VALUE)

    def _module_get_function(self, function: Any, module: Any, name: Any) -> int:
        kernel = (name if isinstance(name, bytes) else self.ffi.string(self.ffi.cast("char *", name))).decode()
        if self._lookup(module, "module") is None:
            return _INVALID_VALUE
        if self.kernel_names is not None and kernel not in self.kernel_names:
            return _NOT_FOUND
        if self.host_kernels is not None and kernel not in self.host_kernels.image_of and kernel not in self.kernels:
            return _NOT_FOUND  # running real kernels, the fake has no other code to run
        function[0] = self._handle("function", kernel)
        return 0

    def _launch_kernel(self, function: Any, gx: int, gy: int, gz: int, bx: int, by: int, bz: int,
                       shared_bytes: int, stream: Any, params: Any, extra: Any) -> int:
        device = self._stream_device(stream)
        kernel = self._lookup(function, "function")
        limits = self.attribute_values
        if kernel is None or params != self.ffi.NULL or extra == self.ffi.NULL:
            return _INVALID_VALUE
        if not (0 < gx <= limits["max_grid_dim_x"] and 0 < gy <= limits["max_grid_dim_y"]
                and 0 < gz <= limits["max_grid_dim_z"] and 0 < bx * by * bz <= limits["max_threads_per_block"]):
            return _INVALID_VALUE
        launch = FakeLaunch(kernel, (gx, gy, gz), (bx, by, bz), shared_bytes, device, self._arguments(extra))
        self.launches.append(launch)
        emulate = self.kernels.get(kernel)
        if emulate is not None:
            return emulate(self, launch) or 0
        if self.host_kernels is not None and kernel in self.host_kernels.image_of:
            return self._run_host_kernel(launch)
        return 0

    def _arguments(self, extra: Any) -> bytes:
        markers = self.vendor.launch_markers
        buffer, size, at = None, None, 0
        while (tag := int(self.ffi.cast("uintptr_t", extra[at]))) != markers.end:
            if tag == markers.pointer:
                buffer = extra[at + 1]
            elif tag == markers.size:
                size = self.ffi.cast("size_t *", extra[at + 1])[0]
            else:
                raise _Status(_INVALID_VALUE)
            at += 2
        if buffer is None or size is None:
            raise _Status(_INVALID_VALUE)
        return bytes(self._host_bytes(buffer, size))

    # ---- errors -------------------------------------------------------------------------------------

    def _describe(self, status: int, out: Any, text: Callable[[Any], str]) -> Any:
        """Into ``out`` with a status (CUDA), or returned (HIP: out is None, an unknown status NULL)."""
        known = self.vendor.error(status)
        if self.vendor.error_text_returned:
            return self.ffi.NULL if known is None else self._text(text(known))
        if known is None:
            return _INVALID_VALUE
        out[0] = self._text(text(known))
        return 0

    def _get_error_name(self, status: int, name: Any = None) -> Any:
        return self._describe(status, name, lambda known: known.name)

    def _get_error_string(self, status: int, text: Any = None) -> Any:
        return self._describe(status, text, lambda known: known.meaning)


class _Status(Exception):
    """Raised inside a fake function to return a status."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _FakeLib:
    """The vendor symbols, as attributes, like a cffi library opened with dlopen."""

    def __init__(self, fake: FakeGpu, by_symbol: dict[str, str]) -> None:
        self._fake = fake
        self._by_symbol = by_symbol

    def __getattr__(self, symbol: str) -> Callable[..., int]:
        name = self._by_symbol.get(symbol)
        if name is None:
            raise AttributeError(f"function/symbol {symbol!r} not found in the fake driver")
        fake = self._fake

        def call(*args: Any) -> int:
            try:
                return fake._invoke(name, args)
            except _Status as status:
                return status.status

        call.__name__ = symbol
        return call

"""Vulkan devices: which physical devices can run ember's shaders (and, when none can, why), and
per device the logical device, its pipelines, and the batch of recorded work.

Work is recorded into one command buffer and submitted when the host needs a result (a download,
``synchronize``) or the batch fills (``MAX_BATCH`` commands, or no room left for the parameter
blocks or staged uploads the batch references); every command waits for the ones before it.
Tensors live in device-local memory. Where that is a heap of its own (a discrete GPU's VRAM beside
the host's memory), every upload and download goes through a host-visible staging ring, its copy
recorded in order with the kernels; where memory is unified (integrated GPUs, lavapipe) uploads go
straight into mapped memory when nothing is pending. ``EMBER_VULKAN_STAGING=1`` forces the staging
path anywhere (how CI tests it on lavapipe's single heap).
"""

from __future__ import annotations

import os
import struct
import threading
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ember_core.errors import KernelError
from ember_vulkan import denormals
from ember_vulkan._native import ffi, lib
from ember_vulkan.memory import Allocation, Pool

MAX_BATCH = 256  # commands recorded before the batch is submitted anyway
ARENA_BYTES = 1 << 20  # parameter blocks of one batch
STAGING_BYTES = 16 << 20  # uploads and downloads that cannot map device memory
WORKGROUP = 256  # threads per workgroup of the 1-d shaders (WG in common.glsl)
MAX_ELEMENTS = 2**31 - 1  # shaders index with 32-bit ints
STAGING_ENV = "EMBER_VULKAN_STAGING"  # "1": copy through the staging ring even where memory is unified
APT_HINT = "apt-get install mesa-vulkan-drivers (or your GPU vendor's Vulkan driver)"
REQUIRED_FEATURES = {
    "buffer_device_address": "bufferDeviceAddress",
    "storage_8bit": "storageBuffer8BitAccess",
    "storage_16bit": "storageBuffer16BitAccess",
    "shader_int64": "shaderInt64",
}
DEVICE_TYPES = {0: "other", 1: "integrated GPU", 2: "discrete GPU", 3: "virtual GPU", 4: "CPU"}


@dataclass(frozen=True)
class Discovery:
    usable: tuple[tuple[int, Any], ...]  # (physical index, evk_device_info) of each ember device
    reason: str | None  # why there is no usable device


_lock = threading.Lock()
_discovery: Discovery | None = None
_devices: dict[int, VulkanDevice] = {}


def _text(buf: Any) -> str:
    return ffi.string(buf).decode(errors="replace")


def discover() -> Discovery:
    """Opens the loader once; never raises (the hooks turn problems into a reason)."""
    global _discovery
    with _lock:
        if _discovery is None:
            _discovery = _probe()
        return _discovery


def _probe() -> Discovery:
    err = ffi.new("char[512]")
    count = lib.evk_init(err, len(err))
    if count < 0:
        return Discovery((), f"{_text(err)}; install a Vulkan driver: {APT_HINT}")
    usable, problems = [], []
    for index in range(count):
        info = ffi.new("evk_device_info *")
        lib.evk_device_info_get(index, info)
        missing = [feature for field, feature in REQUIRED_FEATURES.items() if not getattr(info, field)]
        if info.compute_queue_family == 0xFFFFFFFF:
            missing.append("a compute queue")
        if missing:
            problems.append(f"{_text(info.name)} lacks {', '.join(missing)} (Vulkan 1.2 features ember needs)")
        else:
            usable.append((index, info))
    if usable:
        return Discovery(tuple(usable), None)
    if not problems:
        return Discovery((), f"the Vulkan loader found no physical device; install a driver: {APT_HINT}")
    return Discovery((), "no usable Vulkan device: " + "; ".join(problems))


def device(index: int) -> VulkanDevice:
    """The open device ``vulkan:<index>`` (opened on first use)."""
    dev = _devices.get(index)
    if dev is None:
        found = discover()
        with _lock:
            dev = _devices.get(index)
            if dev is None:
                physical, info = found.usable[index]
                dev = _devices[index] = VulkanDevice(physical, info)
    return dev


def separate_device_heap(info: Any) -> bool:
    """Whether device-local memory is a heap apart from the host's (a discrete GPU): mapping it, where a
    driver allows that at all, reads back slowly over the bus, so copies are staged instead."""
    local = [bool(info.heap_device_local[i]) for i in range(info.heap_count)]
    return any(local) and not all(local)


def staging_forced() -> bool:
    value = os.environ.get(STAGING_ENV, "")
    if value not in ("", "0", "1"):
        raise ValueError(f"ember-vulkan: {STAGING_ENV} must be 0 or 1 (1 copies through staging buffers), "
                         f"got {value!r}")
    return value == "1"


class _Ring:
    """A host-visible block handed out front to back during one batch, reset after each flush."""

    def __init__(self, pool: Pool, nbytes: int) -> None:
        self.block = pool.new_block(nbytes, host=True)
        self.size = nbytes
        self.used = 0
        self.base = ffi.cast("char *", self.block.mapped)

    def take(self, nbytes: int) -> int | None:
        """The offset of ``nbytes`` fresh bytes (16-aligned), or None when the ring is full."""
        start = -(-self.used // 16) * 16
        if start + nbytes > self.size:
            return None
        self.used = start + nbytes
        return start


class VulkanDevice:
    """One logical device with one compute queue.  Every method holds the device's lock."""

    def __init__(self, physical: int, info: Any) -> None:
        forced_staging = staging_forced()  # a bad setting fails before anything is opened
        err = ffi.new("char[512]")
        native = lib.evk_open(physical, err, len(err))
        if native == ffi.NULL:
            raise KernelError(f"ember-vulkan: opening {_text(info.name)} failed: {_text(err)}")
        self.native = native
        self.info = info
        self.name = _text(info.name)
        self.lock = threading.RLock()
        self.max_groups = tuple(int(n) for n in info.max_group_count)
        self.has_float64 = bool(info.shader_float64)
        self.is_cpu = DEVICE_TYPES.get(info.device_type) == "CPU"  # lavapipe: shaders without barriers win
        self.pool = Pool(native, int(info.max_allocation) or 1 << 31)
        self.arena = _Ring(self.pool, ARENA_BYTES)
        self.staging = _Ring(self.pool, STAGING_BYTES)
        # The float widths whose subnormals the shaders ask the driver to keep (tests change it to run
        # the other variants); a device that cannot keep float32's reports that it flushes them.
        self.keep_subnormals = denormals.preserved_widths(info)
        self.subgroup_sum = bool(info.subgroup_arithmetic)  # sum reduces with subgroupAdd
        self.matmul_tiles = (4, 4, 16)  # matmul.comp's (RM, RN, STEP): see kernels.set_matmul_tiles
        self._pipelines: dict[tuple[str, int, tuple[int, ...], tuple[int, ...]], Any] = {}
        self._spirv: dict[str, bytes] = {}
        self.submissions = 0  # batches submitted (tests check that work is batched)
        # Copy through mapped device memory where memory is unified and the driver maps it (integrated
        # GPUs, lavapipe); False takes the staging path a discrete GPU's device-local heap needs.
        self.map_host = not separate_device_heap(info) and not forced_staging

    # ---- pipelines --------------------------------------------------------------------------------

    def pipeline(self, variant: str, op: int = 0, spec: tuple[int, ...] = ()) -> Any:
        """The pipeline of ``variant`` with specialization constants (op, *spec)."""
        key = (variant, op, spec, self.keep_subnormals)
        found = self._pipelines.get(key)
        if found is None:
            code = self._spirv.get(variant)
            if code is None:
                try:
                    code = resources.files("ember_vulkan").joinpath("spirv", f"{variant}.spv").read_bytes()
                except FileNotFoundError:
                    raise KernelError(f"ember-vulkan: shader {variant}.spv is missing; reinstall the plugin "
                                      f"(pip install --force-reinstall ember-vulkan)") from None
                self._spirv[variant] = code
            if self.keep_subnormals:
                code = denormals.with_denorm_preserve(code, self.keep_subnormals)
            err = ffi.new("char[512]")
            constants = ffi.new("uint32_t[]", [op, *spec])
            found = lib.evk_pipeline_create(self.native, ffi.from_buffer("uint32_t[]", code), len(code), constants,
                                            1 + len(spec), err, len(err))
            if found == ffi.NULL:
                raise KernelError(f"ember-vulkan: building the pipeline {variant} failed: {_text(err)}")
            self._pipelines[key] = found
        return found

    # ---- recording -------------------------------------------------------------------------------

    def groups_for(self, items: int, workgroup: int = WORKGROUP) -> int:
        """Workgroups of a grid-stride 1-d kernel over ``items`` (capped by the device limit)."""
        return max(1, min(-(-items // workgroup), self.max_groups[0]))

    def dispatch(self, variant: str, groups: tuple[int, int, int], fmt: str, fields: tuple[Any, ...],
                 params: list[int] | None = None, op: int = 0, spec: tuple[int, ...] = ()) -> None:
        """Record one dispatch.  ``fields`` fill the push-constant struct ``fmt``; the placeholder
        PARAMS among them becomes the device address of ``params`` (int32s) copied to the arena."""
        with self.lock:
            pipeline = self.pipeline(variant, op, spec)
            if params is not None:
                data = struct.pack(f"<{len(params)}i", *params)
                at = self.arena.take(len(data))
                if at is None:
                    self.flush()
                    at = self.arena.take(len(data))
                ffi.memmove(self.arena.base + at, data, len(data))
                address = int(self.arena.block.address) + at
                fields = tuple(address if f is PARAMS else f for f in fields)
            push = struct.pack(fmt, *fields)
            self._check(lib.evk_dispatch(self.native, pipeline, push, len(push), *groups), variant)
            if lib.evk_recorded(self.native) >= MAX_BATCH:
                self.flush()

    def pending(self) -> bool:
        return lib.evk_recorded(self.native) > 0

    def flush(self) -> None:
        """Submit the recorded batch and wait for it."""
        with self.lock:
            if not self.pending():
                return
            status = lib.evk_flush(self.native)
            self.submissions += 1
            self.arena.used = self.staging.used = 0
            self.pool.after_flush()
            self._check(status, "submission")

    def _check(self, status: int, what: str) -> None:
        if status:
            lost = " (device lost)" if status == -4 else ""
            raise KernelError(f"ember-vulkan: {what} failed on {self.name} with VkResult {status}{lost}")

    # ---- memory and copies -------------------------------------------------------------------------

    def alloc(self, nbytes: int) -> int:
        with self.lock:
            return self.pool.alloc(nbytes)

    def free(self, handle: int) -> None:
        with self.lock:
            self.pool.free(handle, pending_work=self.pending())

    def checked(self, handle: Any, offset: int, nbytes: int) -> Allocation:
        """The allocation behind ``handle``, after checking that [offset, offset + nbytes) lies in it."""
        alloc = self.pool.lookup(handle)
        if offset < 0 or nbytes < 0 or offset + nbytes > alloc.nbytes:
            raise KernelError(f"ember-vulkan: bytes [{offset}, {offset + nbytes}) are outside an allocation of "
                              f"{alloc.nbytes} bytes")
        return alloc

    def upload(self, handle: Any, offset: int, src: memoryview) -> None:
        nbytes = src.nbytes
        with self.lock:
            alloc = self.checked(handle, offset, nbytes)
            at = alloc.offset + offset
            if alloc.block.host_visible and self.map_host and not self.pending():
                ffi.memmove(ffi.cast("char *", alloc.block.mapped) + at, src, nbytes)
                return
            data = src.cast("B") if src.format != "B" else src
            done = 0
            while done < nbytes:
                chunk = min(nbytes - done, self.staging.size)
                start = self.staging.take(chunk)
                if start is None:
                    self.flush()
                    continue
                ffi.memmove(self.staging.base + start, data[done:done + chunk], chunk)
                self._check(lib.evk_copy(self.native, self.staging.block, start, alloc.block, at + done, chunk),
                            "upload")
                done += chunk
            if lib.evk_recorded(self.native) >= MAX_BATCH:
                self.flush()

    def download(self, handle: Any, offset: int, dst: memoryview) -> None:
        nbytes = dst.nbytes
        with self.lock:
            alloc = self.checked(handle, offset, nbytes)
            at = alloc.offset + offset
            self.flush()
            if alloc.block.host_visible and self.map_host:
                ffi.memmove(dst, ffi.cast("char *", alloc.block.mapped) + at, nbytes)
                return
            out = dst.cast("B") if dst.format != "B" else dst
            for done in range(0, nbytes, self.staging.size):
                chunk = min(nbytes - done, self.staging.size)
                self._check(lib.evk_copy(self.native, alloc.block, at + done, self.staging.block, 0, chunk),
                            "download")
                self.flush()
                ffi.memmove(out[done:done + chunk], self.staging.base, chunk)

    def copy(self, dst: Any, dst_offset: int, src: Any, src_offset: int, nbytes: int) -> None:
        """A device-to-device copy within this device, recorded in the batch."""
        if nbytes == 0:
            return
        with self.lock:
            d = self.checked(dst, dst_offset, nbytes)
            s = self.checked(src, src_offset, nbytes)
            self._check(lib.evk_copy(self.native, s.block, s.offset + src_offset, d.block, d.offset + dst_offset,
                                     nbytes), "copy")
            if lib.evk_recorded(self.native) >= MAX_BATCH:
                self.flush()


class _Placeholder:
    def __repr__(self) -> str:
        return "PARAMS"


PARAMS = _Placeholder()  # where a dispatch's parameter-block address goes among its push fields

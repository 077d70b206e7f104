"""ember-gpu's op layer: the kernel table a vendor plugin returns from ``ember_kernels``, built from
the kernel index of its build (``kernels.json``), and what every family's kernels share: tensor
validation, launch selection and a cache of ``launch.Kernel`` objects per device.

Families plug in as modules (``FAMILIES``): each has ``kernels(layer) -> {op: (kernel, dtypes)}``,
the kernels in the core's calling convention (docs/writing-a-backend.md, section 4) and, per op,
the dtypes it serves, which are exactly those whose kernels the build produced.  The manifest is
derived from the same table (``manifest_text``), so the two cannot disagree.

Launch selection for the elementwise families (``elementwise``): when every operand is
contiguous, or an input is one element read for every output (``scalar_inputs``), the flat kernel
runs (the common case, decided from the tensors' flags alone); otherwise the dims of all operands
are merged (``ember_core.views.coalesce``) and the flat kernel runs if that made them so, else the
strided one; the 32-bit forms when abi.h's conditions hold; a layout of more than ``MAX_DIMS`` dims
is split along its first dims into several launches; nothing is launched for an empty output.
"""

from __future__ import annotations

import importlib
import itertools
import json
import math
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from ember_core.errors import KernelError
from ember_core.ops.families import empty
from ember_core.tensor import span
from ember_core.views import coalesce
from ember_gpu import abi
from ember_gpu.build import read_index
from ember_gpu.codegen import BY_NAME
from ember_gpu.launch import Kernel

FAMILIES = ("ember_gpu.ops_elementwise", "ember_gpu.ops_creation", "ember_gpu.ops_matmul", "ember_gpu.ops_sort",
            "ember_gpu.ops_index", "ember_gpu.ops_reduce", "ember_gpu.ops_nn",
            "ember_gpu.ops_optim", "ember_gpu.ops_norm", "ember_gpu.ops_conv",
            "ember_gpu.ops_pool")  # one module per kernel family
ELEMENTWISE_VARIANTS = ("flat32", "flat64", "strided32", "strided64")  # the order ``elementwise`` indexes
FLAT_VARIANTS = ("flat32", "flat64")
VECTOR_BYTES = 16  # the flat kernels move 16 bytes of the widest operand per thread and step
BLOCKS_PER_SM = 2048 // abi.BLOCK  # resident blocks of EG_BLOCK threads on one multiprocessor
WAVES = 4  # grid-stride kernels get at most this many waves of resident blocks
BLOCK_SHAPE = (abi.BLOCK, 1, 1)  # the block of every EG_BLOCK-thread launch

Entry = tuple[Callable[..., Any], frozenset[str]]  # a kernel and the dtypes it serves


class FlatLaunch(NamedTuple):
    """An elementwise op's flat kernels on one device, for 32- and 64-bit indices, and how many
    elements one thread moves per step (VECTOR_BYTES of the widest operand)."""

    narrow: Kernel
    wide: Kernel
    vector: int


class DeviceOps:
    """What the op layer keeps per open device: its launch.Kernel objects, its elementwise ops'
    flat launches (the small-op hot path: found with one lookup) and its grid limit."""

    __slots__ = ("device", "flat", "grid_limit", "kernels")

    def __init__(self, device: Any) -> None:
        self.device = device
        self.kernels: dict[str, Kernel] = {}
        self.flat: dict[tuple[str, ...], FlatLaunch] = {}
        self.grid_limit = min(device.attributes["multiprocessor_count"] * BLOCKS_PER_SM * WAVES, device.max_grid[0])

    def grid(self, items: int) -> tuple[int, int, int]:
        """A 1-d grid of EG_BLOCK-thread blocks for a grid-stride loop over ``items``."""
        return (max(1, min(-(-items // abi.BLOCK), self.grid_limit)), 1, 1)


class OpLayer:
    """The kernels of a build whose kernel index is ``index`` (kernel name -> image name), launched
    on the devices of ``runtime`` (``ember_gpu.runtime.Runtime``; None: a table to read, not run)."""

    def __init__(self, index: Mapping[str, str], runtime: Any = None) -> None:
        self.index = index
        self.runtime = runtime
        self.package = runtime.vendor.package if runtime is not None else "ember-gpu"
        self._devices: dict[int, DeviceOps] = {}

    # ---- the table --------------------------------------------------------------------------

    def variants(self, prefix: str) -> dict[str, set[str]]:
        """For the kernels named ``<prefix>_<key>_<variant>``: key -> the variants built."""
        found: dict[str, set[str]] = {}
        for name in self.index:
            if name.startswith(prefix + "_"):
                key, variant = name[len(prefix) + 1:].rsplit("_", 1)
                found.setdefault(key, set()).add(variant)
        return found

    def served(self, prefix: str) -> frozenset[str]:
        """The dtypes of the kernels ``<prefix>_<dtype>`` in the build (not those of a longer prefix)."""
        return frozenset(name[len(prefix) + 1:] for name in self.index
                         if name.startswith(prefix + "_") and name[len(prefix) + 1:] in BY_NAME)

    def table(self) -> dict[str, Entry]:
        """op -> (kernel, dtypes) over every family."""
        entries: dict[str, Entry] = {}
        for family in FAMILIES:
            for op, entry in importlib.import_module(family).kernels(self).items():
                if op in entries:
                    raise ValueError(f"{family}: the op {op!r} is served by two families")
                entries[op] = entry
        return entries

    # ---- devices, kernels, tensors ------------------------------------------------------------

    def device_ops(self, t: Any) -> DeviceOps:
        """The op layer's state of the device t lives on (opening it on first use)."""
        index = t._device.index
        device = self.runtime.device(index)
        found = self._devices.get(index)
        if found is None or found.device is not device:  # (a reset runtime opens new devices)
            found = self._devices[index] = DeviceOps(device)
        return found

    def kernel(self, ops: DeviceOps, name: str) -> Kernel:
        found = ops.kernels.get(name)
        if found is None:
            found = ops.kernels[name] = Kernel(ops.device, self.index[name], name, abi.ffi, _argument_type(name))
        return found

    def address(self, ops: DeviceOps, t: Any) -> int:
        """The device address of t's element 0, after checking that t's storage is a live
        allocation of this device and that every element t's view reaches lies inside it (the span
        check is done once per tensor: its layout never changes; the address is kept in _native)."""
        handle = t._storage.handle
        if handle not in ops.device.memory.live:
            raise KernelError(f"{self.package}: a tensor handed to a kernel on {ops.device} is not a live "
                              f"allocation of that device ({handle!r}; a bug in the caller)")
        found = t._native
        if found is None and t._contig and not t._offset and t._numel * t._dtype.itemsize <= handle.nbytes:
            found = t._native = handle.pointer  # a whole allocation from its start (every op's output)
        elif found is None:
            lo, hi = span(t._shape, t._strides, t._offset)
            itemsize = t._dtype.itemsize
            if lo < 0 or (hi + 1) * itemsize > handle.nbytes:
                raise KernelError(f"{self.package}: a view (shape {t._shape}, strides {t._strides}, offset "
                                  f"{t._offset}) reaches elements {lo}..{hi} of an allocation of {handle.nbytes} "
                                  f"bytes (a bug in the caller)")
            found = t._native = handle.pointer + t._offset * itemsize
        return found

    # ---- launches ---------------------------------------------------------------------------------

    def elementwise(self, names: tuple[str, str, str, str], out: Any, *inputs: Any) -> None:
        """One elementwise op (unary, binary, where, copy) over out's elements: ``names`` are its
        kernels in ELEMENTWISE_VARIANTS order; every operand has out's shape (inputs broadcast)."""
        n = out._numel
        if not n:
            return
        ops = self.device_ops(out)
        address = self.address
        scalars = _contiguous_scalars(out, inputs)
        if scalars is None:  # not the common case: merged dims may still be flat
            tensors = (out, *inputs)
            shape, strides = coalesce(out._shape, *[t._strides for t in tensors])
            scalars = _flat_scalars(strides) if len(shape) < 2 else None
            if scalars is None:
                self._strided(ops, names, tensors, [address(ops, t) for t in tensors], shape, strides)
                return
        flat = ops.flat.get(names) or self._flat_launch(ops, names, (out, *inputs))
        kernel = flat.narrow if n <= abi.INDEX32_MAX else flat.wide
        kernel.launch(ops.grid(-(-n // flat.vector)), BLOCK_SHAPE,  # eg_flat_args: out, in, n, scalar_inputs
                      address(ops, out), [address(ops, t) for t in inputs], n, scalars)

    def _flat_launch(self, ops: DeviceOps, names: tuple[str, ...], tensors: tuple[Any, ...]) -> FlatLaunch:
        vector = max(1, VECTOR_BYTES // max(t._dtype.itemsize for t in tensors))
        found = ops.flat[names] = FlatLaunch(self.kernel(ops, names[0]), self.kernel(ops, names[1]), vector)
        return found

    def _strided(self, ops: DeviceOps, names: tuple[str, str, str, str], tensors: tuple[Any, ...],
                 pointers: list[int], shape: list[int], strides: list[list[int]]) -> None:
        """The strided launches of a coalesced layout: one, or one per index of the leading dims
        past EG_MAX_DIMS (pointers advanced to it)."""
        split = max(0, len(shape) - abi.MAX_DIMS)
        inner = shape[split:]
        inner_strides = [st[split:] for st in strides]
        count = math.prod(inner)
        narrow = count <= abi.INDEX32_MAX and all(
            sum((size - 1) * abs(step) for size, step in zip(inner, st)) <= abi.INDEX32_MAX for st in inner_strides)
        kernel = self.kernel(ops, names[2] if narrow else names[3])
        grid = ops.grid(count)
        layout = {"shape": inner, "strides": inner_strides, "ndim": len(inner)}
        itemsizes = [t._dtype.itemsize for t in tensors]
        for at in itertools.product(*[range(size) for size in shape[:split]]):  # () once when nothing is split
            moved = [p + sum(i * step for i, step in zip(at, st)) * size
                     for p, st, size in zip(pointers, strides, itemsizes)]
            kernel(grid, (abi.BLOCK, 1, 1), {"out": moved[0], "in": moved[1:], "n": count, "layout": layout})

    def contiguous(self, t: Any) -> Any:
        """t itself when contiguous, else a contiguous copy on its device (its dtype's copy kernel):
        for the kernels that take fewer layouts than the core hands them."""
        if t._contig:
            return t
        dense = empty(t._shape, t._dtype, t._device)
        name = t._dtype.name
        self.elementwise(kernel_names(f"eg_copy_{name}_to_{name}"), dense, t)
        return dense

    def optional_address(self, ops: DeviceOps, t: Any) -> int:
        """t's address, or 0 (NULL) for None or an empty tensor, neither of which a kernel reads."""
        return self.address(ops, t) if t is not None and t._numel else 0

    def flat_output(self, ops: DeviceOps, out: Any) -> int:
        """The address of a kernel's contiguous output (fill, random write n elements from it)."""
        if not out._contig:
            raise KernelError(f"{self.package}: this kernel writes a contiguous output, got strides {out._strides} "
                              f"(a bug in the caller)")
        return self.address(ops, out)


def _contiguous_scalars(out: Any, inputs: tuple[Any, ...]) -> int | None:
    """The scalar_inputs bits when out is contiguous and each input is either contiguous (with
    out's shape, as the core broadcasts it) or one element broadcast (every stride 0), else None."""
    if not out._contig:
        return None
    scalars = 0
    for j, t in enumerate(inputs):
        if not t._contig:
            if any(t._strides):
                return None
            scalars |= 1 << j
    return scalars


def _flat_scalars(strides: list[list[int]]) -> int | None:
    """For a coalesced layout of at most one dim: the scalar_inputs bits when every operand is
    contiguous or (an input) one element broadcast, else None (out reversed, an input strided)."""
    scalars = 0
    for k, st in enumerate(strides):
        step = st[0] if st else 1
        if step == 1:
            continue
        if step != 0 or k == 0:
            return None
        scalars |= 1 << (k - 1)
    return scalars


def _argument_type(kernel: str) -> str:
    family = kernel.split("_", 2)[1]
    if family not in ("unary", "binary", "copy", "where"):  # every family but the elementwise ones has its own
        return f"eg_{family}_args"
    return "eg_strided_args" if "_strided" in kernel else "eg_flat_args"


def kernel_names(prefix: str, variants: tuple[str, ...] = ELEMENTWISE_VARIANTS) -> tuple[str, ...]:
    """``<prefix>_<variant>`` for each variant, in order."""
    return tuple(f"{prefix}_{v}" for v in variants)


# ---- the vendor package's side: its index, its table, its manifest --------------------------------


MANIFEST = "manifest.toml"  # written beside kernels.json by the vendor package's build


def kernel_index(directory: str | Path) -> dict[str, str]:
    """kernel -> image name, from the ``kernels.json`` of a build (package files only)."""
    return {kernel: Path(file).stem for kernel, file in read_index(directory).items()}


def package_kernels(package: str) -> Path:
    """The ``kernels/`` directory of a vendor package (its images, kernels.json, manifest.toml)."""
    return Path(str(resources.files(package).joinpath("kernels")))


def claimed(table: Mapping[str, Entry]) -> dict[str, list[str]]:
    """op -> the dtypes its kernels serve (sorted in ember.h's order): what the manifest lists."""
    from ember_core import dtypes

    order = {d.name: d.code for d in dtypes.ALL_DTYPES}
    return {op: sorted(served, key=order.__getitem__) for op, (_, served) in sorted(table.items()) if served}


def manifest_text(device_type: str, table: Mapping[str, Entry], priority: int = 0) -> str:
    """The capability manifest (TOML) claiming exactly the op x dtype pairs of ``table``, each declared
    deterministic: no kernel uses atomics or lets timing pick an order (sums are fixed trees, gradients
    gathers), and the vendor BLAS's GEMMs give the same bits on one GPU model with one library version."""
    ops = claimed(table)
    lines = ["# Generated by ember_gpu.ops from the kernel index of the build: do not edit.",
             "", "[plugin]", f"priority = {priority}", "", f"[kernels.{device_type}]"]
    lines += [f"{op} = {json.dumps(names)}" for op, names in ops.items()]
    lines += ["", f"[deterministic.{device_type}]"] + [f"{op} = true" for op in ops]
    return "\n".join(lines) + "\n"


def write_manifest(directory: str | Path, device_type: str) -> Path:
    """Write ``directory/manifest.toml`` for the build whose kernels.json is there (the vendor
    package's build calls this after ``ember_gpu.build.build_images``)."""
    path = Path(directory) / MANIFEST
    path.write_text(manifest_text(device_type, OpLayer(kernel_index(directory)).table()))
    return path

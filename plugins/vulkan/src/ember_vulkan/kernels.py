"""ember-vulkan's kernel table: op name -> a function ``kernel(out, *inputs, **attrs)`` (the core's
calling convention) that validates its tensors, writes the shapes and strides a shader needs, and
records one dispatch (two for long reductions) on the tensors' device.

Every tensor is checked before anything reaches the driver: its handle must be a live allocation
of this device and the elements its view touches must lie inside it, with offsets a 32-bit shader
index can reach.  Adjacent dims that are contiguous in every operand are merged first, so the
shaders' index arithmetic is usually one division per operand.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ember_core.errors import ShapeError, UnsupportedOpError
from ember_core.tensor import span
from ember_core.views import coalesce
from ember_vulkan import catalog, runtime
from ember_vulkan.catalog import name_of
from ember_vulkan.runtime import MAX_ELEMENTS, PARAMS, VulkanDevice

REDUCE_CHUNK = 4096  # elements of one row a workgroup reduces before a second pass combines them
SERIAL_CHUNK = 256  # elements one invocation of reduce_serial.comp sums in order (and rows that short use it)
ELEMENTWISE_RUN = 16  # innermost-dim elements one elementwise invocation walks on CPU devices (1 on GPUs)
SCAN_WG = 64  # workgroup size of scan.comp
SCAN_CHUNK = 32768  # elements one invocation of scan.comp walks (llvmpipe stops loops after 65535 iterations)
SERIAL_WG = 64  # workgroup size of reduce_serial.comp
SUM = catalog.op_code(catalog.REDUCE, "sum")
ADD = catalog.op_code(catalog.BINARY, "add")
LOOP_LIMIT = 32768  # iterations one invocation may loop: llvmpipe ends an invocation's loops after 65535 in all
SORT_BLOCK = 512  # (key, index) pairs sort_network.comp sorts in shared memory (two per invocation)
SORT_MERGE_WG = 64  # workgroup size of sort_merge.comp
SORT_MERGE_CHUNK = 256  # outputs one invocation of sort_merge.comp writes (a power of two)
MATMUL_THREADS = 16  # matmul.comp's workgroup is MATMUL_THREADS x MATMUL_THREADS
MATMUL_DIRECT_WG = 16  # workgroup size of matmul_direct.comp (small: lavapipe spreads workgroups over its threads)


# ---- validation and layout --------------------------------------------------------------------

def _device(t: Any) -> VulkanDevice:
    return runtime.device(t.device.index)


def _address(dev: VulkanDevice, t: Any) -> int:
    """The device address of t's storage, after checking every element t's view touches."""
    if t.size == 0:
        return 0
    lo, hi = span(t.shape, t.strides, t.offset)
    if lo < 0 or hi > MAX_ELEMENTS:
        raise ShapeError(f"ember-vulkan addresses at most {MAX_ELEMENTS + 1} elements per storage; "
                         f"this view reaches element {hi}")
    dev.checked(t.handle, lo * t.itemsize, (hi - lo + 1) * t.itemsize)
    return t.handle


def _flat_address(dev: VulkanDevice, t: Any) -> int:
    """The address of t's first element, for the contiguous outputs shaders index from 0."""
    return _address(dev, t) + t.offset * t.itemsize


def _elementwise(variant: str, op: int, out: Any, *ins: Any, extra: tuple[str, tuple[Any, ...]] = ("", ())) -> None:
    """One strided dispatch over out's elements: params are [ndim, shape, then offset and strides
    of out and of each input]; an invocation walks up to ``run`` elements of the innermost dim.
    ``extra`` (struct format, values) follows those fields in the push constants."""
    n = out.size
    if n == 0:
        return
    if n > MAX_ELEMENTS:
        raise ShapeError(f"ember-vulkan handles at most {MAX_ELEMENTS} elements per op, got {n}")
    dev = _device(out)
    tensors = (out, *ins)
    addresses = [_address(dev, t) for t in tensors]
    shape, strides = coalesce(out.shape, *(t.strides for t in tensors))
    params = [len(shape), *shape]
    for t, st in zip(tensors, strides):
        params += [t.offset, *st]
    inner = shape[-1] if shape else 1
    run = ELEMENTWISE_RUN if dev.is_cpu else 1
    items = n // inner * -(-inner // run)
    fmt = "<" + "Q" * (len(tensors) + 1) + "II" + extra[0]
    dev.dispatch(variant, (dev.groups_for(items), 1, 1), fmt, (*addresses, PARAMS, n, run, *extra[1]), params, op)


# ---- elementwise families ------------------------------------------------------------------------

def _unary(name: str) -> Callable[..., None]:
    op = catalog.op_code(catalog.UNARY, name)

    def kernel(out: Any, x: Any) -> None:
        _elementwise(name_of("unary", A=x.dtype.name, O=out.dtype.name), op, out, x)

    return kernel


def _binary(name: str) -> Callable[..., None]:
    op = catalog.op_code(catalog.BINARY, name)

    def kernel(out: Any, a: Any, b: Any) -> Any:
        if a.dtype.name in catalog.WIDE and not _device(out).has_float64:
            return NotImplemented  # float64 variants need shaderFloat64: the next provider serves them
        return _elementwise(name_of("binary", A=a.dtype.name, B=b.dtype.name, O=out.dtype.name), op, out, a, b)

    return kernel


_integer_pow = _binary("pow")


def pow_kernel(out: Any, a: Any, b: Any) -> Any:
    """Integers in binary.comp; floats in pow.comp, which computes in double precision: declined (the next
    provider serves it) on a device without shaderFloat64."""
    d = out.dtype.name
    if d not in catalog.FLOATS:
        return _integer_pow(out, a, b)
    if not _device(out).has_float64:
        return NotImplemented
    return _elementwise(name_of("pow", A=d, B=d, O=d), 0, out, a, b)


def where(out: Any, cond: Any, a: Any, b: Any) -> None:
    d = out.dtype.name
    _elementwise(name_of("where", A="bool", B=d, C=d, O=d), 0, out, cond, a, b)


def copy(out: Any, x: Any) -> None:
    """copy / astype into any strided view; a dtype without shaders (complex..., float64 on a device
    without shaderFloat64) converts on the host and is written back through the transfer hooks."""
    names = (x.dtype.name, out.dtype.name)
    shaded = all(n in catalog.STORAGE or n in catalog.WIDE for n in names)
    if shaded and (_device(out).has_float64 or not any(n in catalog.WIDE for n in names)):
        _elementwise(name_of("copy", A=x.dtype.name, O=out.dtype.name), 0, out, x)
        return
    from ember_core import transfer

    transfer.write_from_host(out, transfer.host_view(x).astype(out.dtype))


def full(out: Any, *, value: Any) -> None:
    n = out.size
    if n == 0:
        return
    dev = _device(out)
    bits = np.asarray(value, dtype=out.dtype.numpy).reshape(1).view(f"u{out.itemsize}")[0]
    dev.dispatch(f"fill.w{out.itemsize}", (dev.groups_for(n), 1, 1), "<QQII",
                 (_address(dev, out), int(bits), out.offset, n))


# ---- reductions ----------------------------------------------------------------------------------

def _reduce(name: str) -> Callable[..., None]:
    op = catalog.op_code(catalog.REDUCE, name)
    result = catalog.REDUCE[name][1]

    def kernel(out: Any, x: Any, *, axes: tuple[int, ...]) -> Any:
        rows, row_len = out.size, math.prod(x.shape[x.ndim - len(axes):])
        if rows == 0:
            return None
        dev = _device(out)
        if x.dtype.name in catalog.WIDE and not dev.has_float64:
            return NotImplemented  # float64 variants need shaderFloat64: the next provider serves them
        kept = x.ndim - len(axes)
        outer, (outer_strides,) = coalesce(x.shape[:kept], x.strides[:kept])
        inner, (inner_strides,) = coalesce(x.shape[kept:], x.strides[kept:])
        params = [len(outer), len(inner), x.offset, *outer, *outer_strides, *inner, *inner_strides]
        src, dst = x.dtype.name, out.dtype.name
        x_at, out_at = _address(dev, x), _flat_address(dev, out)
        if dev.is_cpu or row_len <= SERIAL_CHUNK:
            _reduce_serial(dev, op, src, dst, catalog.partial_dtype(src, result), out_at, x_at, params, rows, row_len)
        elif row_len <= REDUCE_CHUNK:
            _reduce_pass(dev, _tree(dev, op, src, dst), op, out_at, x_at, params, rows, 1, row_len, row_len)
        else:
            chunks = -(-row_len // REDUCE_CHUNK)
            partial = catalog.partial_dtype(src, result)
            with _scratch(dev, rows * chunks * catalog.itemsize(partial)) as scratch:
                _reduce_pass(dev, _tree(dev, op, src, partial), op, scratch, x_at, params, rows, chunks,
                             REDUCE_CHUNK, row_len)
                _reduce_pass(dev, _tree(dev, op, partial, dst), op, out_at, scratch,
                             [1, 1, 0, rows, chunks, chunks, 1], rows, 1, chunks, chunks)

    return kernel


def _tree(dev: VulkanDevice, op: int, src: str, dst: str) -> str:
    """reduce.comp's variant: sum with subgroup operations where the device has them, else the
    shared-memory tree."""
    if op == SUM and dev.subgroup_sum and (src, dst) in catalog.SUBGROUP_SUM_PAIRS:
        return name_of("reduce_subgroup", A=src, O=dst)
    return name_of("reduce", A=src, O=dst)


@contextlib.contextmanager
def _scratch(dev: VulkanDevice, nbytes: int) -> Iterator[int]:
    """A device buffer for partial results; its free waits for the work recorded with it."""
    with dev.lock:
        handle = dev.alloc(nbytes)
        try:
            yield handle
        finally:
            dev.free(handle)


def _reduce_serial(dev: VulkanDevice, op: int, src: str, dst: str, partial: str, out_at: int, x_at: int,
                   params: list[int], rows: int, row_len: int) -> None:
    """Rows longer than SERIAL_CHUNK reduce in chunks whose partials reduce again, pass after pass,
    so no invocation sums more than SERIAL_CHUNK values in a row (float error stays that of short sums)."""
    if row_len <= SERIAL_CHUNK:
        _reduce_pass(dev, name_of("reduce_serial", A=src, O=dst), op, out_at, x_at, params, rows, 1, row_len,
                     row_len, SERIAL_WG)
        return
    chunks = -(-row_len // SERIAL_CHUNK)
    with _scratch(dev, rows * chunks * catalog.itemsize(partial)) as scratch:
        _reduce_pass(dev, name_of("reduce_serial", A=src, O=partial), op, scratch, x_at, params, rows, chunks,
                     SERIAL_CHUNK, row_len, SERIAL_WG)
        _reduce_serial(dev, op, partial, dst, partial, out_at, scratch, [1, 1, 0, rows, chunks, chunks, 1], rows,
                       chunks)


def _reduce_pass(dev: VulkanDevice, variant: str, op: int, out_at: int, x_at: int, params: list[int], rows: int,
                 chunks: int, chunk_len: int, row_len: int, invocations_per_item: int = 0) -> None:
    """One dispatch over rows * chunks items: a workgroup each (reduce.comp), or one invocation each
    in workgroups of ``invocations_per_item`` (reduce_serial.comp)."""
    items = rows * chunks
    groups = dev.groups_for(items, invocations_per_item) if invocations_per_item else min(items, dev.max_groups[0])
    dev.dispatch(variant, (groups, 1, 1), "<QQQIIII", (out_at, x_at, PARAMS, items, chunks, chunk_len, row_len),
                 params, op)


def _scan(name: str) -> Callable[..., None]:
    op = catalog.SCAN.index(name)

    def kernel(out: Any, x: Any) -> Any:
        """Running sum / product along the last dim (scan.comp)."""
        if out.dtype.name != catalog.scan_dtype(x.dtype.name):
            return NotImplemented  # a requested dtype (dtype=int32...): shaders exist for numpy's result dtype only
        if out.size == 0:
            return None
        dev = _device(out)
        if x.ndim == 0:
            x, out = x.reshape((1,)), out.reshape((1,))
        outer, (x_outer, out_outer) = coalesce(x.shape[:-1], x.strides[:-1], out.strides[:-1])
        rows = math.prod(outer)
        params = [len(outer), x.shape[-1], x.offset, x.strides[-1], out.offset, out.strides[-1], *outer, *x_outer,
                  *out_outer]
        _run_scan(dev, name_of("scan", A=x.dtype.name, O=out.dtype.name), op, _address(dev, out), _address(dev, x),
                  params, rows, x.shape[-1])
        return None

    return kernel


def _run_scan(dev: VulkanDevice, variant: str, op: int, out_at: int, x_at: int, params: list[int], rows: int,
              row_len: int) -> None:
    """scan.comp over rows: an invocation walks a row in order, or a chunk of SCAN_CHUNK elements of a
    longer one, whose chunk totals and their running values (two more passes) come first."""
    chunks = -(-row_len // SCAN_CHUNK)

    def phase(number: int, items: int, scratch: int) -> None:
        dev.dispatch(variant, (dev.groups_for(items, SCAN_WG), 1, 1), "<QQQQIII",
                     (out_at, x_at, PARAMS, scratch, rows, chunks, SCAN_CHUNK), params, op, spec=(number,))

    if chunks == 1:
        phase(0, rows, 0)
        return
    with _scratch(dev, rows * chunks * 8) as scratch:
        phase(1, rows * chunks, scratch)
        phase(2, rows, scratch)
        phase(0, rows * chunks, scratch)


def _arg_reduce(name: str) -> Callable[..., None]:
    op = catalog.ARG_REDUCE.index(name)

    def kernel(out: Any, x: Any) -> Any:
        rows, row_len = out.size, x.shape[-1]
        if rows == 0:
            return None
        dev = _device(out)
        groups = min(rows, dev.max_groups[0])
        if dev.is_cpu and -(-rows // groups) * -(-row_len // runtime.WORKGROUP) > LOOP_LIMIT:
            return NotImplemented  # llvmpipe would stop the loop early: the next provider serves it
        outer, (outer_strides,) = coalesce(x.shape[:-1], x.strides[:-1])
        params = [len(outer), 1, x.offset, *outer, *outer_strides, row_len, x.strides[-1]]
        dev.dispatch(name_of("argreduce", A=x.dtype.name), (groups, 1, 1), "<QQQII",
                     (_flat_address(dev, out), _address(dev, x), PARAMS, rows, row_len), params, op)

    return kernel


def _sort(name: str) -> Callable[..., None]:
    argsort = int(name == "argsort")

    def kernel(out: Any, x: Any, *, descending: bool) -> None:
        """Stable sort / argsort along the last dim: (key, index) pairs per row, padded to a power of two,
        sorted by the bitonic network (sort_network.comp; merge passes on CPU devices), then gathered."""
        if out.size == 0:
            return
        dev = _device(out)
        if x.ndim == 0:
            x, out = x.reshape((1,)), out.reshape((1,))
        row_len = x.shape[-1]
        outer, (x_outer, out_outer) = coalesce(x.shape[:-1], x.strides[:-1], out.strides[:-1])
        rows, span = math.prod(outer), max(2, 1 << (row_len - 1).bit_length())
        if rows * span > MAX_ELEMENTS:
            raise ShapeError(f"ember-vulkan sorts at most {MAX_ELEMENTS} elements at once (rows padded to a power "
                             f"of two); this sort needs {rows * span}")
        x_at, out_at = _address(dev, x), _address(dev, out)
        with contextlib.ExitStack() as stack:
            keys, index = (stack.enter_context(_scratch(dev, rows * span * size)) for size in (8, 4))
            dev.dispatch(name_of("sort_keys", A=x.dtype.name), (dev.groups_for(rows * span), 1, 1), "<QQQQIII",
                         (keys, index, x_at, PARAMS, rows, span, int(descending)),
                         [len(outer), row_len, x.offset, x.strides[-1], *outer, *x_outer])
            if dev.is_cpu:
                spare = tuple(stack.enter_context(_scratch(dev, rows * span * size)) for size in (8, 4))
                index = _merge_passes(dev, (keys, index), spare, rows, span)
            else:
                _bitonic(dev, keys, index, rows, span)
            dev.dispatch(name_of("sort_gather", A=x.dtype.name, O=x.dtype.name), (dev.groups_for(out.size), 1, 1),
                         "<QQQQII", (out_at, index, x_at, PARAMS, rows, span),
                         [len(outer), row_len, x.offset, x.strides[-1], out.offset, out.strides[-1], *outer,
                          *x_outer, *out_outer], argsort)

    return kernel


def _merge_passes(dev: VulkanDevice, pairs: tuple[int, int], spare: tuple[int, int], rows: int, span: int) -> int:
    """CPU devices: bottom-up merge passes (sort_merge.comp) between the two buffer pairs, runs doubling
    from 1 to span; returns the index buffer that holds the sorted order."""
    width = 1
    while width < span:
        chunk = min(2 * width, SORT_MERGE_CHUNK)
        chunks = rows * span // chunk
        dev.dispatch(catalog.SORT_MERGE, (dev.groups_for(chunks, SORT_MERGE_WG), 1, 1), "<QQQQIII",
                     (*pairs, *spare, chunks, width, chunk))
        pairs, spare = spare, pairs
        width *= 2
    return pairs[1]


def _bitonic(dev: VulkanDevice, keys: int, index: int, rows: int, span: int) -> None:
    """Every stage of the network: those within a block of SORT_BLOCK pairs in shared memory, the
    longer-range ones (j >= SORT_BLOCK) one global dispatch each."""
    pairs, block = rows * span // 2, min(span, SORT_BLOCK)

    def stages(local: int, k_lo: int, k_hi: int, j_hi: int) -> None:
        groups = min(pairs // (SORT_BLOCK // 2), dev.max_groups[0]) if local else dev.groups_for(pairs)
        dev.dispatch(catalog.SORT_NETWORK, (max(groups, 1), 1, 1), "<QQIIIII", (keys, index, pairs, k_lo, k_hi, j_hi,
                                                                              span), op=local)

    if span < SORT_BLOCK:  # a row shorter than a block: one invocation per pair, global stages
        k = 2
        while k <= span:
            j = k // 2
            while j >= 1:
                stages(0, k, k, j)
                j //= 2
            k *= 2
        return
    stages(1, 2, block, block // 2)
    k = 2 * block
    while k <= span:
        j = k // 2
        while j >= block:
            stages(0, k, k, j)
            j //= 2
        stages(1, k, k, block // 2)
        k *= 2


def searchsorted(out: Any, x1: Any, x2: Any, *, right: bool) -> None:
    """A binary search per element of x2 (and of out) over the sorted 1-d x1 (searchsorted.comp)."""
    dev = _device(out)
    _elementwise(name_of("searchsorted", A=x1.dtype.name), 0, out, x2,
                 extra=("QIIii", (_address(dev, x1), x1.shape[0], int(right), x1.offset, x1.strides[0])))


NONZERO_CHUNK = 256  # elements of x one invocation of nonzero.comp counts and then writes
NONZERO_WG = 64


def nonzero(out: Any, x: Any) -> Any:
    """Per-chunk counts, their running sum (scan.comp), then each chunk writes its coordinates into
    out (count, ndim), contiguous as the core makes it."""
    n, count = x.size, out.shape[0]
    if count == 0 or n == 0:
        return None
    if out.strides != (x.ndim, 1):
        return NotImplemented
    if n > MAX_ELEMENTS:
        raise ShapeError(f"ember-vulkan handles at most {MAX_ELEMENTS} elements per op, got {n}")
    dev = _device(out)
    chunks = -(-n // NONZERO_CHUNK)
    params = [x.ndim, *x.shape, x.offset, *x.strides]
    x_at, out_at = _address(dev, x), _flat_address(dev, out)
    variant, groups = name_of("nonzero", A=x.dtype.name), (dev.groups_for(chunks, NONZERO_WG), 1, 1)
    with _scratch(dev, chunks * 8) as counts:
        dev.dispatch(variant, groups, "<QQQQIII", (out_at, x_at, counts, PARAMS, n, chunks, count), params, 0)
        _run_scan(dev, name_of("scan", A="int64", O="int64"), catalog.SCAN.index("cumulative_sum"), counts, counts,
                  [0, chunks, 0, 1, 0, 1], 1, chunks)
        dev.dispatch(variant, groups, "<QQQQIII", (out_at, x_at, counts, PARAMS, n, chunks, count), params, 1)
    return None


# ---- matmul --------------------------------------------------------------------------------------

def matmul(out: Any, a: Any, b: Any) -> None:
    """(..., M, K) @ (..., K, N).  GPUs run the shared-memory tiled shader, its grid split where it
    exceeds the device's group counts; CPU devices (lavapipe) the register-blocked one, whose lack
    of barriers makes it several times faster there."""
    if out.size == 0:
        return
    if out.size > MAX_ELEMENTS:
        raise ShapeError(f"ember-vulkan handles at most {MAX_ELEMENTS} output elements per matmul")
    dev = _device(out)
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch, (a_batch, b_batch) = coalesce(a.shape[:-2], a.strides[:-2], b.strides[:-2])
    params = [len(batch), m, n, k, a.offset, a.strides[-2], a.strides[-1], b.offset, b.strides[-2], b.strides[-1],
              *batch, *a_batch, *b_batch]
    addresses = (_flat_address(dev, out), _address(dev, a), _address(dev, b))
    if dev.is_cpu:
        _matmul_direct(dev, addresses, params, a.dtype.name, out.size)
        return
    rows, cols, _ = dev.matmul_tiles
    grid = (-(-n // (MATMUL_THREADS * cols)), -(-m // (MATMUL_THREADS * rows)), math.prod(batch))
    limit = dev.max_groups
    for z in range(0, grid[2], limit[2]):
        for y in range(0, grid[1], limit[1]):
            for x in range(0, grid[0], limit[0]):
                groups = (min(limit[0], grid[0] - x), min(limit[1], grid[1] - y), min(limit[2], grid[2] - z))
                dev.dispatch(name_of("matmul", A=a.dtype.name), groups, "<QQQQIII", (*addresses, PARAMS, x, y, z),
                             params, spec=dev.matmul_tiles)


def _matmul_direct(dev: VulkanDevice, addresses: tuple[int, int, int], params: list[int], dtype: str,
                   size: int) -> None:
    """CPU devices: the register-blocked shader, K in slices of LOOP_LIMIT whose products after the first
    go to scratch and are added into out (the add shader), as llvmpipe stops longer loops."""
    n_batch, m, n, k = params[:4]
    batch = math.prod(params[10:10 + n_batch])
    small, large = catalog.MATMUL_DIRECT_BLOCKS
    block = large if batch * (m // large) * (n // large) >= MATMUL_DIRECT_WG else small
    blocks = batch * -(-m // block) * -(-n // block)
    out_at, a_at, b_at = addresses
    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(_scratch(dev, size * catalog.itemsize(dtype))) if k > LOOP_LIMIT else 0
        for start in range(0, max(k, 1), LOOP_LIMIT):  # K = 0 still writes its zeros
            sliced = [*params[:3], min(k - start, LOOP_LIMIT), params[4] + start * params[6], *params[5:7],
                      params[7] + start * params[8], *params[8:]]
            dev.dispatch(name_of(f"matmul_direct{block}", A=dtype), (dev.groups_for(blocks, MATMUL_DIRECT_WG), 1, 1),
                         "<QQQQI", (out_at if start == 0 else scratch, a_at, b_at, PARAMS, blocks), sliced)
            if start:
                dev.dispatch(name_of("binary", A=dtype, B=dtype, O=dtype), (dev.groups_for(size), 1, 1), "<QQQQII",
                             (out_at, out_at, scratch, PARAMS, size, 1), [1, size, 0, 1, 0, 1, 0, 1], ADD)


def set_matmul_tiles(index: int, rows: int, cols: int, step: int) -> None:
    """Tile sizes of the shared-memory GEMM on vulkan:``index`` (specialization constants, so each
    choice is its own pipeline): each of the 16 x 16 threads computes rows x cols outputs, and K is
    staged through shared memory ``step`` at a time.  bench_vulkan.py sweeps them."""
    for name, value, top in (("rows", rows, 8), ("cols", cols, 8), ("step", step, 64)):
        if not (isinstance(value, int) and 1 <= value <= top):
            raise ValueError(f"ember-vulkan: matmul tile {name} must be an integer in [1, {top}], got {value!r}")
    dev = runtime.device(index)
    shared = MATMUL_THREADS * (rows + cols) * step * 8  # int64 tiles are the largest
    if shared > dev.info.max_shared_memory:
        raise ValueError(f"ember-vulkan: matmul tiles {rows}x{cols}, step {step} need {shared} bytes of shared "
                         f"memory; {dev.name} has {dev.info.max_shared_memory}: use smaller tiles")
    dev.matmul_tiles = (rows, cols, step)


# ---- indexing ------------------------------------------------------------------------------------

def take(out: Any, x: Any, idx: Any) -> None:
    """out (outer, m, inner) = x (outer, n, inner) at idx; indices arrive validated by the core."""
    outer, m, inner = out.shape
    if out.size == 0:
        return
    dev = _device(out)
    fields = (_flat_address(dev, out), _address(dev, x), _address(dev, idx), outer, m, inner, x.shape[1],
              x.offset, *x.strides, idx.offset)
    dev.dispatch(name_of("take", A=x.dtype.name, O=out.dtype.name), (dev.groups_for(out.size), 1, 1),
                 "<QQQIIIiiiiii", fields)


def index_put(x: Any, idx: Any, values: Any, *, accumulate: bool) -> None:
    """x (outer, n, inner)[:, idx, :] = (or +=) values (outer, m, inner)."""
    outer, n, inner = x.shape
    m = idx.shape[0]
    if outer * inner * m == 0:
        return
    dev = _device(x)
    addresses = (_address(dev, x), _address(dev, idx), _address(dev, values))
    for start in range(0, m, LOOP_LIMIT):  # slices in order: the last write still wins
        fields = (*addresses, outer, inner, min(m - start, LOOP_LIMIT), int(accumulate), n, x.offset, *x.strides,
                  values.offset + start * values.strides[1], *values.strides, idx.offset + start)
        dev.dispatch(name_of("put", A=x.dtype.name, O=x.dtype.name), (dev.groups_for(outer * inner), 1, 1),
                     "<QQQIIIIiiiiiiiiii", fields)


# ---- random --------------------------------------------------------------------------------------

def _key(seed: int, offset: int) -> tuple[int, int, int]:
    if not (0 <= seed < 2**64 and 0 <= offset < 2**64):
        raise ValueError(f"ember-vulkan: seed and offset must be in [0, 2**64), got {seed}, {offset}")
    return seed & 0xFFFFFFFF, seed >> 32, offset


def random_uniform(out: Any, *, seed: int, offset: int, low: float, high: float) -> None:
    n = out.size
    if n == 0:
        return
    dev = _device(out)
    k0, k1, offset = _key(seed, offset)
    bits = 24 if out.dtype.name == "float32" else 11
    dev.dispatch(name_of("random_uniform", O=out.dtype.name), (dev.groups_for(-(-n // 4)), 1, 1), "<QQIIIIff",
                 (_flat_address(dev, out), offset, n, k0, k1, bits, low, high))


def random_normal(out: Any, *, seed: int, offset: int, mean: float, std: float) -> None:
    n = out.size
    if n == 0:
        return
    dev = _device(out)
    if not dev.has_float64:
        raise UnsupportedOpError(f"ember-vulkan: random_normal reproduces the shared stream in double precision, "
                                 f"which {dev.name} lacks (shaderFloat64); draw on the cpu and move the result")
    k0, k1, offset = _key(seed, offset)
    dev.dispatch(name_of("random_normal", O=out.dtype.name), (dev.groups_for(-(-n // 2)), 1, 1), "<QQddIII",
                 (_flat_address(dev, out), offset, mean, std, n, k0, k1))


def random_integers(out: Any, *, seed: int, offset: int, low: int, high: int) -> None:
    n = out.size
    if n == 0:
        return
    dev = _device(out)
    k0, k1, offset = _key(seed, offset)
    dev.dispatch(name_of("random_integers", O=out.dtype.name), (dev.groups_for(-(-n // 2)), 1, 1), "<QQQqIII",
                 (_flat_address(dev, out), offset, high - low, low, n, k0, k1))


KERNELS: dict[str, Callable[..., None]] = {
    **{name: _unary(name) for name in catalog.UNARY},
    **{name: _binary(name) for name in catalog.BINARY},
    "pow": pow_kernel,
    "where": where,
    "copy": copy,
    "astype": copy,
    "full": full,
    **{name: _reduce(name) for name in catalog.REDUCE},
    **{name: _arg_reduce(name) for name in catalog.ARG_REDUCE},
    **{name: _scan(name) for name in catalog.SCAN},
    **{name: _sort(name) for name in catalog.SORT},
    "searchsorted": searchsorted,
    "nonzero": nonzero,
    "matmul": matmul,
    "take": take,
    "index_put": index_put,
    "random_uniform": random_uniform,
    "random_normal": random_normal,
    "random_integers": random_integers,
}


def claimed_dtypes() -> dict[str, tuple[str, ...]]:
    """op -> the dtypes its shaders serve: what manifest.toml must claim (a test holds them equal)."""
    table = {name: dtypes for name, (dtypes, _) in {**catalog.UNARY, **catalog.BINARY, **catalog.REDUCE}.items()}
    table |= {name: catalog.DTYPES for name in ("where", "take", "index_put",
                                                *catalog.ARG_REDUCE, *catalog.SCAN, *catalog.SORT,
                                                "searchsorted", "nonzero")}
    table |= {name: (*catalog.DTYPES, *catalog.WIDE) for name in ("copy", "astype", "full")}
    table["matmul"] = catalog.MATMUL_DTYPES
    table |= catalog.RANDOM
    return table

"""ember_gpu.blas on the fake driver and the fake BLAS, under the made-up vendor table: the matmul
kernel against numpy for every dtype and layout (transposes, leading dimensions, batch strides,
broadcast batches), the layouts it declines, handles per device and thread bound to the device's
stream, the shared workspace, the TF32 switch, errors named, and the missing library's message."""

from __future__ import annotations

import gc
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from ember_gpu import blas
from ember_gpu.errors import DeviceLostError, DriverError, GpuOutOfMemoryError
from ember_gpu.fake_blas import FakeBlas
from testgpu_vendor import TEST_BLAS

import ember_core.dtypes as dt
from ember_core.errors import ConfigError, KernelError, UnsupportedOpError

DTYPES = [dt.float16, dt.bfloat16, dt.float32, dt.float64, dt.complex64, dt.complex128]


@dataclass
class Operand:
    """What a kernel reads of a tensor."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    dtype: Any
    handle: Any
    device: Any
    is_contiguous: bool
    _native: Any = None  # (where a GPU plugin keeps what it derives from a tensor's layout)


@dataclass
class _Index:
    index: int


@pytest.fixture
def fake_blas(fake):
    return FakeBlas(fake)


@pytest.fixture
def gemm(runtime, fake_blas):
    """The Blas of the test runtime on the fake BLAS; TF32 back off afterwards."""
    yield blas.Blas(runtime, opener=fake_blas.open)
    blas.set_tf32(False)


def _storage(values: np.ndarray, dtype) -> bytes:
    if dtype is dt.bfloat16:  # the values are small integers: exact, so truncating the float32 bits is exact
        return (values.real.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return values.astype(dtype.numpy).tobytes()


def _operand(fake, device, view: np.ndarray, base: np.ndarray, dtype) -> Operand:
    """``view`` (a numpy view of the 1-d ``base``) as a device tensor of ``dtype`` with the same layout."""
    size = base.itemsize
    offset = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // size
    data = _storage(base, dtype)
    handle = device.memory.alloc(len(data))
    if data:
        fake.write(handle.pointer, data)
    return Operand(view.shape, tuple(s // size for s in view.strides), offset, dtype, handle, _Index(device.index),
                   view.flags.c_contiguous)


def _out(device, shape, dtype) -> Operand:
    count = int(np.prod(shape))
    handle = device.memory.alloc(max(1, count * dtype.itemsize))
    strides = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    return Operand(tuple(shape), strides, 0, dtype, handle, _Index(device.index), True)


def _read(fake, out: Operand) -> np.ndarray:
    raw = fake.read(out.handle.pointer, int(np.prod(out.shape)) * out.dtype.itemsize)
    if out.dtype is dt.bfloat16:
        values = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
        values = np.frombuffer(raw, out.dtype.numpy)
    return values.reshape(out.shape)


def _values(rng, count: int, dtype) -> np.ndarray:
    """Small integers (complex: both parts), so every product and sum is exact in every dtype."""
    values = rng.integers(-2, 3, count).astype(np.float64)
    if dtype.kind == "c":
        values = values + 1j * rng.integers(-2, 3, count)
    return values


def _layout(rng, shape: tuple[int, ...], how: str, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(view, base): an operand of ``shape`` stored ``how``."""
    *batch, rows, cols = shape
    batch = tuple(batch)
    count = int(np.prod(shape))
    if how == "contiguous":
        base = _values(rng, count, dtype)
        return base.reshape(shape), base
    if how == "transposed":
        base = _values(rng, count, dtype)
        return base.reshape((*batch, cols, rows)).swapaxes(-1, -2), base
    if how == "padded":  # a slice of wider rows at an offset: leading dimension cols + 2
        base = _values(rng, int(np.prod((*batch, rows, cols + 2))) + 1, dtype)
        return base[1:].reshape((*batch, rows, cols + 2))[..., :cols], base
    if how == "broadcast":  # one matrix for every batch entry (stride 0), as the core's expand_to passes it
        base = _values(rng, rows * cols, dtype)
        return np.broadcast_to(base.reshape(rows, cols), shape), base
    raise ValueError(how)


def _matmul(gemm, fake, device, rng, dtype, shape_a, shape_b, how_a="contiguous", how_b="contiguous"):
    view_a, base_a = _layout(rng, shape_a, how_a, dtype)
    view_b, base_b = _layout(rng, shape_b, how_b, dtype)
    a = _operand(fake, device, view_a, base_a, dtype)
    b = _operand(fake, device, view_b, base_b, dtype)
    out = _out(device, (*shape_a[:-1], shape_b[-1]), dtype)
    result = gemm.matmul(out, a, b)
    return result, out, view_a @ view_b


LAYOUTS = [("contiguous", "contiguous"), ("transposed", "contiguous"), ("contiguous", "transposed"),
           ("transposed", "transposed"), ("padded", "transposed"), ("transposed", "padded")]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("how_a,how_b", LAYOUTS)
def test_every_dtype_and_layout_equals_numpy(gemm, fake, fake_blas, device, dtype, how_a, how_b):
    rng = np.random.default_rng(7)
    result, out, expected = _matmul(gemm, fake, device, rng, dtype, (3, 5, 4), (3, 4, 6), how_a, how_b)
    assert result is not NotImplemented
    np.testing.assert_array_equal(_read(fake, out), expected if dtype.kind == "c" else expected.real)
    [call] = fake_blas.gemms
    assert call.batch == 3 and (call.m, call.n, call.k) == (6, 5, 4)  # column-major: out^T = b^T a^T
    ops = TEST_BLAS.operations
    assert call.trans_a == ops["t" if how_b == "transposed" else "n"]
    assert call.trans_b == ops["t" if how_a == "transposed" else "n"]
    assert call.a_type == call.b_type == call.c_type == TEST_BLAS.data_types[dtype.name]
    half = dtype.name in ("float16", "bfloat16", "float32", "complex64")
    assert call.compute_type == TEST_BLAS.compute_types["float32" if half else "float64"]
    assert (call.alpha, call.beta, call.algo) == (1, 0, TEST_BLAS.default_algo)


@pytest.mark.parametrize("shape_a,shape_b,how_a,how_b,strides", [
    ((4, 2, 3), (4, 3, 5), "broadcast", "contiguous", (0, 15)),  # a broadcast over the batch: stride 0
    ((4, 2, 3), (4, 3, 5), "contiguous", "broadcast", (6, 0)),
    ((2, 3, 2, 3), (2, 3, 3, 5), "contiguous", "transposed", (6, 15)),  # two batch dims coalesce to one
    ((1, 4), (4, 1), "contiguous", "contiguous", (0, 0)),  # row times column: size-1 dims take any stride
    ((5, 1), (1, 3), "transposed", "padded", (0, 0)),
    ((3, 4), (4, 2), "padded", "padded", (0, 0)),
])
def test_batches_broadcasts_and_vectors_are_one_call(gemm, fake, fake_blas, device, shape_a, shape_b, how_a, how_b,
                                                     strides):
    rng = np.random.default_rng(3)
    result, out, expected = _matmul(gemm, fake, device, rng, dt.float32, shape_a, shape_b, how_a, how_b)
    assert result is not NotImplemented
    np.testing.assert_array_equal(_read(fake, out), expected)
    [call] = fake_blas.gemms
    assert (call.stride_b, call.stride_a) == strides  # the library's B is ember's a


def _declined(gemm, fake, device, view_a, base_a, view_b, base_b) -> Any:
    a = _operand(fake, device, view_a, base_a, dt.float32)
    b = _operand(fake, device, view_b, base_b, dt.float32)
    return gemm.matmul(_out(device, (*view_a.shape[:-1], view_b.shape[-1]), dt.float32), a, b)


def test_layouts_one_call_cannot_cover_are_declined(gemm, fake, fake_blas, device):
    base = np.arange(48.0)
    square = base[:16].reshape(4, 4)
    for view_a in (square[::-1], base[:32].reshape(4, 8)[:, ::2]):  # a negative stride, no unit stride
        assert _declined(gemm, fake, device, view_a, base, square, base) is NotImplemented
    # batch dims that coalesce only into more than MAX_CALLS calls: (17, 2) entries of a (17, 3) grid
    grid = np.arange(17 * 3 * 4.0)
    other = np.arange(17 * 2 * 4.0)
    assert _declined(gemm, fake, device, grid.reshape(17, 3, 2, 2)[:, :2], grid, other.reshape(17, 2, 2, 2),
                     other) is NotImplemented
    assert fake_blas.gemms == []


def test_batch_dims_that_do_not_coalesce_are_one_call_per_outer_entry(gemm, fake, fake_blas, device):
    rng = np.random.default_rng(4)
    grid, other = _values(rng, 2 * 4 * 6, dt.float32), _values(rng, 2 * 3 * 12, dt.float32)
    view_a = grid.reshape(2, 4, 2, 3)[:, :3]  # (2, 3) entries of a (2, 4) grid of matrices
    view_b = other.reshape(2, 3, 3, 4)
    a = _operand(fake, device, view_a, grid, dt.float32)
    b = _operand(fake, device, view_b, other, dt.float32)
    out = _out(device, (2, 3, 2, 4), dt.float32)
    assert gemm.matmul(out, a, b) is not NotImplemented
    np.testing.assert_array_equal(_read(fake, out), view_a @ view_b)
    assert [(call.batch, call.c - out.handle.pointer) for call in fake_blas.gemms] == [(3, 0), (3, 3 * 8 * 4)]
    # broadcast on both sides, as the core passes (2, 1, ...) @ (5, ...): a strides (3, 0), b (0, 6)
    fake_blas.gemms.clear()
    base_a, base_b = _values(rng, 2 * 6, dt.float32), _values(rng, 5 * 6, dt.float32)
    view_a = np.broadcast_to(base_a.reshape(2, 1, 3, 2), (2, 5, 3, 2))
    view_b = np.broadcast_to(base_b.reshape(1, 5, 2, 3), (2, 5, 2, 3))
    out = _out(device, (2, 5, 3, 3), dt.float32)
    assert gemm.matmul(out, _operand(fake, device, view_a, base_a, dt.float32),
                       _operand(fake, device, view_b, base_b, dt.float32)) is not NotImplemented
    np.testing.assert_array_equal(_read(fake, out), view_a @ view_b)
    assert len(fake_blas.gemms) == 2


def test_an_empty_sum_is_zeros_and_an_empty_result_is_nothing(gemm, fake, fake_blas, device):
    rng = np.random.default_rng(0)
    result, out, _ = _matmul(gemm, fake, device, rng, dt.float64, (2, 3, 0), (2, 0, 4))
    assert result is not NotImplemented
    np.testing.assert_array_equal(_read(fake, out), np.zeros((2, 3, 4)))  # (the fake's fresh memory is 0xcd)
    _matmul(gemm, fake, device, rng, dt.float64, (0, 3), (3, 4))
    assert fake_blas.gemms == [] and fake_blas.opened == 0  # neither needed the library


def _square(gemm, fake, device) -> None:
    _matmul(gemm, fake, device, np.random.default_rng(1), dt.float32, (2, 2), (2, 2))


def test_one_handle_per_device_and_thread_bound_to_the_devices_stream(gemm, fake, fake_blas, runtime):
    first, second = runtime.device(0), runtime.device(1)
    _square(gemm, fake, first)
    _square(gemm, fake, first)
    _square(gemm, fake, second)
    worker = threading.Thread(target=_square, args=(gemm, fake, first))
    worker.start()
    worker.join()
    handles = list(fake_blas.handles.values())
    assert len(handles) == 3 and fake_blas.opened == 1
    assert [h.device for h in handles] == [0, 1, 0]
    assert handles[0].thread == handles[1].thread == threading.get_ident() != handles[2].thread
    for handle, device in zip(handles, (first, second, first)):
        assert handle.stream == int(fake.ffi.cast("uintptr_t", device.stream))
        assert handle.math_mode == TEST_BLAS.default_math
    # the handles of a device share one workspace, a live allocation of the device
    assert handles[0].workspace == handles[2].workspace != handles[1].workspace
    assert handles[0].workspace == (gemm._workspace(first).pointer, TEST_BLAS.workspace_bytes)
    assert gemm._workspace(first) in first.memory.live
    gc.collect()  # the worker's thread ended: its handle is destroyed
    assert [h.destroyed for h in handles] == [False, False, True]
    assert [g.stream for g in fake_blas.gemms] == [handles[i].stream for i in (0, 0, 1, 2)]


def test_reset_destroys_the_handles_and_frees_the_workspaces(gemm, fake, fake_blas, device):
    _square(gemm, fake, device)
    workspace = gemm._workspace(device)
    gemm.reset()
    assert fake_blas.live_handles() == [] and workspace not in device.memory.live
    _square(gemm, fake, device)
    assert fake_blas.opened == 2 and len(fake_blas.live_handles()) == 1


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tf32_is_off_by_default_and_only_ever_for_float32(gemm, fake, fake_blas, device, dtype):
    assert not blas.tf32_enabled()
    rng = np.random.default_rng(2)
    _matmul(gemm, fake, device, rng, dtype, (2, 2), (2, 2))
    blas.set_tf32(True)
    assert blas.tf32_enabled()
    _matmul(gemm, fake, device, rng, dtype, (2, 2), (2, 2))
    off, on = (call.compute_type for call in fake_blas.gemms)
    compute = TEST_BLAS.compute_types
    assert off == compute["float64" if dtype in (dt.float64, dt.complex128) else "float32"]
    assert on == (compute["float32_tf32"] if dtype is dt.float32 else off)


@pytest.mark.parametrize("value,enabled", [("1", True), ("0", False), ("", False)])
def test_the_tf32_environment_switch(monkeypatch, value, enabled):
    monkeypatch.setenv("EMBER_ALLOW_TF32", value)
    assert blas._tf32_from_environment() is enabled


def test_a_bad_tf32_setting_names_the_variable(monkeypatch):
    monkeypatch.setenv("EMBER_ALLOW_TF32", "yes")
    with pytest.raises(ConfigError, match=r"EMBER_ALLOW_TF32='yes': use 1 .* 0 \(the default\)"):
        blas._tf32_from_environment()


def test_a_failed_gemm_names_the_function_the_status_and_what_to_do(gemm, fake, fake_blas, device):
    fake_blas.fail("gemm_strided_batched", 22)
    with pytest.raises(DriverError, match=r"ember-testgpu: tgblas_gemm_strided_batched failed: "
                                          r"TGBLAS_STATUS_INVALID_VALUE \(22\): an argument was out of range"):
        _square(gemm, fake, device)
    fake_blas.fail("tgblas_gemm_strided_batched", 21)  # (by the vendor's symbol too)
    with pytest.raises(GpuOutOfMemoryError, match=r"TGBLAS_STATUS_ALLOC_FAILED \(21\)") as caught:
        _square(gemm, fake, device)
    assert isinstance(caught.value, MemoryError)
    fake_blas.fail("gemm_strided_batched", 99)
    with pytest.raises(DriverError, match=r"failed: status 99$"):  # unknown to table and library alike
        _square(gemm, fake, device)
    _square(gemm, fake, device)  # and the device still works


def test_a_handle_that_fails_to_set_up_is_destroyed_and_the_next_call_retries(gemm, fake, fake_blas, device):
    fake_blas.fail("set_stream", 22)
    with pytest.raises(DriverError, match="tgblas_set_stream failed"):
        _square(gemm, fake, device)
    assert fake_blas.count("destroy") == 1 and fake_blas.live_handles() == []
    fake_blas.fail("create", 21)
    with pytest.raises(GpuOutOfMemoryError, match="tgblas_create failed"):
        _square(gemm, fake, device)
    _square(gemm, fake, device)
    assert len(fake_blas.live_handles()) == 1


def test_a_lost_device_is_reported_before_the_library_is_called(gemm, fake, fake_blas, device):
    _square(gemm, fake, device)
    fake.fault(700)
    with pytest.raises(DeviceLostError):
        device.synchronize()
    with pytest.raises(DeviceLostError):
        _square(gemm, fake, device)
    assert len(fake_blas.gemms) == 1


def test_an_operand_outside_its_allocation_is_refused(gemm, fake, fake_blas, device):
    base = np.arange(4.0)
    a = _operand(fake, device, base.reshape(2, 2), base, dt.float32)
    b = Operand(a.shape, a.strides, 1, dt.float32, a.handle, a.device, False)  # one element past the end
    with pytest.raises(KernelError, match=r"not inside a live allocation of testgpu:0 \(a bug in the op layer\)"):
        gemm.matmul(_out(device, (2, 2), dt.float32), a, b)
    device.memory.free(a.handle)
    with pytest.raises(KernelError, match="not inside a live allocation"):
        gemm.matmul(_out(device, (2, 2), dt.float32), a, a)
    assert fake_blas.gemms == []


def test_launch_blocking_waits_for_the_gemm(gemm, fake, device):
    device.launch_blocking = True
    before = fake.count("stream_synchronize")
    _square(gemm, fake, device)
    assert fake.count("stream_synchronize") == before + 1


def test_the_op_layers_entry_is_the_runtimes_one_blas(runtime):
    from types import SimpleNamespace

    [(op, (kernel, dtypes))] = blas.kernels(SimpleNamespace(runtime=runtime)).items()
    assert op == "matmul" and kernel == blas.blas_for(runtime).matmul and blas.blas_for(runtime) is kernel.__self__
    assert dtypes == {d.name for d in DTYPES} == set(TEST_BLAS.data_types)
    [(_, (reader, _))] = blas.kernels(SimpleNamespace(runtime=None)).items()  # a table to read: nothing opened
    assert reader.__self__.runtime is None


# ---- finding the library -------------------------------------------------------------------------

def test_a_missing_library_says_how_to_install_it_once_per_runtime(runtime, fake, device):
    opened = []

    def opener(vendor):
        opened.append(vendor)
        return blas.open_blas(vendor)

    gemm = blas.Blas(runtime, opener=opener)
    for _ in range(2):
        with pytest.raises(blas.BlasUnavailableError) as caught:
            _square(gemm, fake, device)
        assert isinstance(caught.value, UnsupportedOpError)
        message = str(caught.value)
        assert "float matmul needs tgBLAS (libember-tgblas.so.7)" in message
        assert 'pip install "ember-testgpu[blas]"' in message and "ember_testgpu_wheel/lib" in message
    assert len(opened) == 1


def test_the_wheel_directories_of_every_path_entry_are_searched(tmp_path, monkeypatch):
    wheel = tmp_path / "site" / "ember_testgpu_wheel" / "lib"
    wheel.mkdir(parents=True)
    (wheel / "libember-tgblas.so.7").write_bytes(b"not a shared library")
    found = list(blas.candidates(TEST_BLAS, [str(tmp_path / "elsewhere"), str(tmp_path / "site")]))
    assert found == [("libember-tgblas.so.7", None), (str(wheel / "libember-tgblas.so.7"), wheel)]
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(blas.BlasUnavailableError, match=r"lib/libember-tgblas.so.7: .*(file too short|invalid ELF)"):
        blas.open_blas(_vendor_with(TEST_BLAS))


def _vendor_with(table):
    from dataclasses import replace

    from testgpu_vendor import TEST_VENDOR

    return replace(TEST_VENDOR, blas=table)


def test_a_library_without_a_symbol_is_too_old(fake):
    fake_blas = FakeBlas(fake)
    del fake_blas.lib._by_symbol["tgblas_set_workspace"]
    with pytest.raises(blas.BlasUnavailableError, match=r"tgBLAS library found lacks tgblas_set_workspace: it is "
                                                        r"older than ember-testgpu needs"):
        fake_blas.open(fake.vendor)


def test_every_function_has_a_symbol_in_the_table():
    with pytest.raises(ValueError, match=r"names no symbol for \['destroy'\]"):
        from dataclasses import replace

        blas.cdef_for(replace(TEST_BLAS, symbols={k: v for k, v in TEST_BLAS.symbols.items() if k != "destroy"}))

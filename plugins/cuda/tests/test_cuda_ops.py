"""ember-cuda's native ops on ember-gpu's fake driver running the real kernels on the host (two
devices): every claimed op x dtype against ember-cpu on the same inputs and layouts (contiguous,
transposed, reversed, broadcast, empty, 0-d, in place), astype between every pair the core
allows (NaN and infinities to integers included), where, full and the random ops bit for bit;
which kernel variant each layout launches; the manifest against the kernel table; and that none
of these ops went through the CPU fallback."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tomllib

import ember_core as em
from ember_core import dtypes
from ember_core.errors import DTypeError, KernelError
from ember_core.ops.registry import REGISTRY

ember_cuda = pytest.importorskip("ember_cuda")
from ember_gpu import abi, ops  # noqa: E402

pytestmark = [pytest.mark.no_device, pytest.mark.usefixtures("no_claimed_op_falls_back")]

LAYER = ops.OpLayer(ops.kernel_index(ops.package_kernels("ember_cuda")))
TABLE = LAYER.table()
CLAIMED = ops.claimed(TABLE)
UNARY = sorted(op for op in TABLE if REGISTRY.get(op).family == "unary")
BINARY = sorted(op for op in TABLE if REGISTRY.get(op).family == "binary")

# results equal to ember-cpu's to the bit (integer and bool code, IEEE operations, conversions); the
# others call math libraries, compared within a few units in the last place
EXACT = {"abs", "bitwise_invert", "ceil", "conj", "floor", "imag", "isfinite", "isinf", "isnan", "logical_not",
         "negative", "positive", "real", "round", "sign", "signbit", "square", "trunc", "relu", "add",
         "bitwise_and", "bitwise_left_shift", "bitwise_or", "bitwise_right_shift", "bitwise_xor", "copysign",
         "equal", "floor_divide", "greater", "greater_equal", "less", "less_equal", "logical_and", "logical_or",
         "logical_xor", "maximum", "minimum", "multiply", "not_equal", "remainder", "subtract"}
RTOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-6, "float64": 1e-14, "complex64": 3e-5,
        "complex128": 1e-13}  # complex: pow through exp(b log a) loses a few more bits than real functions
IN_PLACE = {"add": operator.iadd, "subtract": operator.isub, "multiply": operator.imul, "divide": operator.itruediv,
            "floor_divide": operator.ifloordiv, "remainder": operator.imod, "pow": operator.ipow,
            "bitwise_and": operator.iand, "bitwise_or": operator.ior, "bitwise_xor": operator.ixor,
            "bitwise_left_shift": operator.ilshift, "bitwise_right_shift": operator.irshift}

# name -> how a tensor of shape (3, 5) (or its base, made here) is laid out for the op
LAYOUTS: dict[str, Callable[[Callable[[tuple[int, ...]], Any]], Any]] = {
    "contiguous": lambda make: make((3, 5)),
    "transposed": lambda make: make((5, 3)).mT,
    "reversed": lambda make: make((3, 5))[:, ::-1],
    "broadcast row": lambda make: em.broadcast_to(make((1, 5)), (3, 5)),
    "empty": lambda make: make((0, 5)),
    "0-d": lambda make: make(()),
}



def _values(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> Any:
    """A cpu tensor of dtype: small integers, or floats with zeros and both signs (halves, so that
    float16 and bfloat16 hold them exactly), complex numbers of such parts."""
    n = int(np.prod(shape))
    if dtype == "bool":
        data = rng.integers(0, 2, n).astype(np.bool_)
    elif dtype in ("int8", "int16", "int32", "int64"):
        data = rng.integers(-6, 7, n)
    elif dtype == "uint8":
        data = rng.integers(0, 13, n)
    else:
        data = rng.integers(-8, 9, n) * 0.375
        if dtype.startswith("complex"):
            data = data + 1j * rng.integers(-8, 9, n) * 0.25
    return em.asarray(np.asarray(data).reshape(shape)).astype(dtype)


def _on(device: str, make_cpu: Callable[[tuple[int, ...]], Any]) -> Callable[[tuple[int, ...]], Any]:
    return lambda shape: make_cpu(shape).to_device(device)


def _host(t: Any) -> np.ndarray:
    t = t.to_device("cpu")
    return (t.astype("float32") if t.dtype == dtypes.bfloat16 else t).numpy()


def _same(got: Any, want: Any, exact: bool, what: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, what
    a, b = _host(got).reshape(-1), _host(want).reshape(-1)
    if a.dtype.kind == "c":  # as (real, imag) pairs
        a, b = a.view(a.real.dtype), b.view(b.real.dtype)
    if exact and a.dtype.kind == "f":  # bits, so that -0.0 and 0.0 are told apart (NaNs: any payload)
        nan = np.isnan(b)
        a, b = np.where(nan, 0, a).view(f"u{a.itemsize}"), np.where(nan, 0, b).view(f"u{b.itemsize}")
    if exact or a.dtype.kind in "biu":
        np.testing.assert_array_equal(a, b, err_msg=what)
    else:
        rtol = RTOL[got.dtype.name]
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol, equal_nan=True, err_msg=what)


# ---- every claimed op and dtype, in every layout ------------------------------------------------


@pytest.mark.parametrize("op", UNARY)
def test_unary_ops_match_ember_cpu_in_every_layout(op: str) -> None:
    fn = getattr(em, op)
    rng = np.random.default_rng(1)
    for dtype in CLAIMED[op]:
        for layout, lay in LAYOUTS.items():
            made: dict[tuple[int, ...], Any] = {}

            def make(shape: tuple[int, ...], dtype: str = dtype, made: dict = made) -> Any:
                return made.setdefault(shape, _values(dtype, shape, rng))

            want = fn(lay(make))
            got = fn(lay(_on("cuda:0", make)))
            _same(got, want, op in EXACT and not dtype.startswith("complex"), f"{op} {dtype} {layout}")


@pytest.mark.parametrize("op", BINARY)
def test_binary_ops_match_ember_cpu_in_every_layout_and_in_place(op: str) -> None:
    fn = getattr(em, op)
    rng = np.random.default_rng(2)
    pairs = {
        "contiguous": ((3, 5), (3, 5), lambda a, b: (a, b)),
        "transposed and reversed": ((5, 3), (3, 5), lambda a, b: (a.mT, b[::-1, ::-1])),
        "row broadcast": ((3, 5), (5,), lambda a, b: (a, b)),
        "outer": ((3, 1), (1, 5), lambda a, b: (a, b)),
        "one element": ((3, 5), (1,), lambda a, b: (a, b)),
        "one element first": ((), (3, 5), lambda a, b: (a, b)),
        "empty": ((0, 5), (5,), lambda a, b: (a, b)),
        "0-d": ((), (), lambda a, b: (a, b)),
    }
    for dtype in CLAIMED[op]:
        exact = op in EXACT and not dtype.startswith("complex")
        for layout, (sa, sb, lay) in pairs.items():
            a, b = _values(dtype, sa, rng), _values(dtype, sb, rng)
            want = fn(*lay(a, b))
            got = fn(*lay(a.to_device("cuda:0"), b.to_device("cuda:0")))
            _same(got, want, exact, f"{op} {dtype} {layout}")
        if op in IN_PLACE:
            a, b = _values(dtype, (3, 5), rng), _values(dtype, (5,), rng)
            gpu = a.to_device("cuda:0")
            try:
                IN_PLACE[op](a, b)
            except (DTypeError, TypeError):
                continue  # (the operator is not defined for this dtype)
            IN_PLACE[op](gpu, b.to_device("cuda:0"))
            _same(gpu, a, exact, f"{op}= {dtype}")
            twice = _values(dtype, (4,), rng)
            on_gpu = twice.to_device("cuda:0")
            IN_PLACE[op](twice, twice)  # out, and both inputs, the same memory
            IN_PLACE[op](on_gpu, on_gpu)
            _same(on_gpu, twice, exact, f"x {op}= x, {dtype}")


def test_where_matches_ember_cpu_for_every_dtype_on_both_devices() -> None:
    rng = np.random.default_rng(3)
    for device in ("cuda:0", "cuda:1"):
        for dtype in CLAIMED["where"]:
            cond = _values("bool", (3, 5), rng)
            x1, x2 = _values(dtype, (5, 3), rng).mT, _values(dtype, (5,), rng)
            want = em.where(cond, x1, x2)
            got = em.where(cond.to_device(device), x1.to_device(device), x2.to_device(device))
            assert got.device == em.as_device(device)
            _same(got, want, True, f"where {dtype} on {device}")
            want = em.where(cond, x2, x2[0])
            _same(em.where(cond.to_device(device), x2.to_device(device), x2[0].to_device(device)), want, True,
                  f"where {dtype}, a 0-d operand, on {device}")


# ---- conversions ----------------------------------------------------------------------------------

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -1.5, 2.5, -2.7, 127.9, 128.0, -129.0, 255.5, 256.0, 300.0,
           -300.0, 65504.0, 2.0**31, -(2.0**31), 2.0**63, -(2.0**63), 1e10, -1e10, 1e300, 3e-8, 1 / 3]


def _special(dtype: str) -> Any:
    """SPECIAL in dtype (through float64 on the cpu: out-of-range values saturate or wrap there as
    ember-cpu converts them; what matters is that both devices see the same input)."""
    x = em.asarray(np.asarray(SPECIAL))
    if dtype.startswith("complex"):
        x = x + em.asarray(np.asarray(SPECIAL[::-1])) * 1j
    return x.astype(dtype)


@pytest.mark.parametrize("source", [d.name for d in dtypes.ALL_DTYPES])
def test_astype_between_every_pair_matches_ember_cpu(source: str) -> None:
    x = _special(source)
    gpu = x.to_device("cuda:1")
    for target in dtypes.ALL_DTYPES:
        try:
            want = em.astype(x, target)
        except DTypeError:
            continue  # refused by the core (complex -> real): no kernel is asked
        _same(em.astype(gpu, target), want, True, f"{source} -> {target.name}")
        _same(em.astype(gpu[::-3], target), em.astype(x[::-3], target), True, f"{source} -> {target.name}, reversed")
        into, into_cpu = em.zeros((2, len(SPECIAL)), dtype=target, device="cuda:1"), em.zeros((2, len(SPECIAL)),
                                                                                             dtype=target)
        into[1, ::-1] = gpu  # copy into a strided view of another dtype
        into_cpu[1, ::-1] = x
        _same(into, into_cpu, True, f"{source} -> {target.name}, into a reversed row")


# ---- full and random ------------------------------------------------------------------------------

FILL_VALUES: dict[str, list[Any]] = {
    "b": [True, False, 1, 0],
    "i": ["min", "max", 0, -7],
    "u": [0, 255, 7],
    "f": [1.5, -0.0, np.nan, np.inf, -np.inf, 1 / 3, 1e300, -1e-300, 3.14159, 65519.0, 2.0**-24, 7],
    "c": [1 + 2j, 1 / 3j, complex(np.nan, 1), 1e300 + 0j, 2.5],
}


@pytest.mark.parametrize("dtype", [d.name for d in dtypes.ALL_DTYPES])
def test_full_stores_what_ember_cpu_stores(dtype: str) -> None:
    d = dtypes.BY_NAME[dtype]
    for value in FILL_VALUES[d.kind]:
        if value in ("min", "max"):
            value = int(getattr(np.iinfo(d.numpy), value))
        for shape in ((7,), (3, 40), (), (0,)):
            got = em.full(shape, value, dtype=dtype, device="cuda:0")
            _same(got, em.full(shape, value, dtype=dtype), True, f"full {shape} {value!r} {dtype}")


@pytest.mark.parametrize(("op", "parameters"), [
    ("random_uniform", {"low": -2.0, "high": 3.0}),
    ("random_normal", {"mean": 1.0, "std": 2.0}),
    ("random_integers", {"low": -3, "high": 100}),
])
def test_random_draws_equal_ember_cpu_bit_for_bit(op: str, parameters: dict[str, Any]) -> None:
    fn = getattr(em, op)
    for dtype in CLAIMED[op]:
        args = dict(parameters)
        if dtype == "bool":
            args = {"low": 0, "high": 2}
        elif dtype == "uint8":
            args = {"low": 3, "high": 250}
        for shape in ((1,), (5,), (3, 7), (0,), ()):
            em.manual_seed(1234)
            wants = [fn(shape, **args, dtype=dtype, device="cpu") for _ in range(2)]
            gots = [fn(shape, **args, dtype=dtype, device="cuda:0") for _ in range(2)]  # the offset advanced alike
            for got, want in zip(gots, wants):
                _same(got, want, op != "random_normal", f"{op} {dtype} {shape}")
    em.manual_seed(7)
    wide = fn((1000,), **parameters, device="cuda:1")
    em.manual_seed(7)
    _same(wide, fn((1000,), **parameters), op != "random_normal", f"{op}, 1000 draws on cuda:1")


def test_random_integers_over_the_whole_int64_range() -> None:
    em.manual_seed(5)
    want = em.random_integers((64,), -(2**63), 2**63 - 1, dtype="int64")
    em.manual_seed(5)
    _same(em.random_integers((64,), -(2**63), 2**63 - 1, dtype="int64", device="cuda:0"), want, True, "int64 range")


# ---- launch selection -------------------------------------------------------------------------------


def _flat_args(launch: Any) -> Any:
    return abi.ffi.cast("eg_flat_args *", abi.ffi.from_buffer(bytearray(launch.args)))


def _launched(fake: Any, run: Callable[[], Any]) -> list[Any]:
    before = len(fake.launches)
    run()
    return fake.launches[before:]


def test_launch_selection(fake_cuda, monkeypatch) -> None:
    a = em.asarray(np.arange(15.0, dtype=np.float32).reshape(3, 5), device="cuda:0")
    b = em.ones((3, 5), device="cuda:0")
    (launch,) = _launched(fake_cuda, lambda: a + b)
    assert launch.kernel == "eg_binary_add_float32_flat32" and _flat_args(launch).scalar_inputs == 0
    assert launch.block == (abi.BLOCK, 1, 1) and launch.grid == (1, 1, 1)
    one, zero_d = em.ones((1,), device="cuda:0"), em.full((), 2.0, device="cuda:0")
    (launch,) = _launched(fake_cuda, lambda: a * one)  # one element, broadcast
    assert launch.kernel == "eg_binary_multiply_float32_flat32" and _flat_args(launch).scalar_inputs == 0b10
    (launch,) = _launched(fake_cuda, lambda: zero_d - a)
    assert launch.kernel == "eg_binary_subtract_float32_flat32" and _flat_args(launch).scalar_inputs == 0b01
    (launch,) = _launched(fake_cuda, lambda: a.mT.mT + b[::1])  # views that are contiguous after all: flat
    assert launch.kernel.endswith("_flat32")
    (launch,) = _launched(fake_cuda, lambda: em.exp(a.mT))
    assert launch.kernel == "eg_unary_exp_float32_strided32"
    (launch,) = _launched(fake_cuda, lambda: em.exp(a[:, ::-1]))  # reversed: strided, negative strides
    assert launch.kernel == "eg_unary_exp_float32_strided32"
    assert _launched(fake_cuda, lambda: em.exp(a[:0])) == []  # nothing to do: no launch
    monkeypatch.setattr(abi, "INDEX32_MAX", 14)  # 15 elements are then beyond the 32-bit forms
    (launch,) = _launched(fake_cuda, lambda: a + b)
    assert launch.kernel == "eg_binary_add_float32_flat64"
    (launch,) = _launched(fake_cuda, lambda: em.exp(a.mT))
    assert launch.kernel == "eg_unary_exp_float32_strided64"
    small = a[::2, ::2]  # 6 elements whose strides (10, 2) reach 1 * 10 + 2 * 2 = 14 elements past the first
    (launch,) = _launched(fake_cuda, lambda: em.exp(small))
    assert launch.kernel == "eg_unary_exp_float32_strided32"
    monkeypatch.setattr(abi, "INDEX32_MAX", 13)
    (launch,) = _launched(fake_cuda, lambda: em.exp(small))
    assert launch.kernel == "eg_unary_exp_float32_strided64"
    got = em.exp(small)
    monkeypatch.undo()
    np.testing.assert_allclose(_host(got), np.exp(np.arange(15.0).reshape(3, 5)[::2, ::2]), rtol=1e-6)


def test_layouts_of_more_than_eight_dims_are_split_along_their_first_dims(fake_cuda) -> None:
    values = np.arange(2.0**10, dtype=np.float32).reshape((2,) * 10)
    x = em.asarray(values, device="cuda:0")
    reversed_dims = tuple(range(9, -1, -1))
    launches = _launched(fake_cuda, lambda: em.negative(em.permute_dims(x, reversed_dims)))
    assert [launch.kernel for launch in launches] == ["eg_unary_negative_float32_strided32"] * 4  # 2 x 2 outer
    np.testing.assert_array_equal(_host(em.negative(em.permute_dims(x, reversed_dims))),
                                  -values.transpose(reversed_dims))


# ---- validation, the manifest -------------------------------------------------------------------------


def test_kernels_refuse_tensors_of_another_device_and_views_past_their_allocation(fake_cuda) -> None:
    add = em.as_device("cuda:0").backend.kernels("cuda")["add"]
    a, b = em.ones(4, device="cuda:0"), em.ones(4, device="cuda:1")
    out = em.empty(4, device="cuda:0")
    with pytest.raises(KernelError, match="not a live allocation of that device"):
        add(out, a, b)
    past = a._view((8,), (1,), 0)  # twice the elements of its storage
    with pytest.raises(KernelError, match=r"reaches elements 0\.\.7 of an allocation of 16 bytes"):
        add(out, a, past)
    assert fake_cuda.launches == [] or all(launch.kernel != "eg_binary_add_float32_flat32"
                                           for launch in fake_cuda.launches)


def test_a_kernel_that_overruns_its_allocation_loses_the_device(fake_cuda) -> None:
    from ember_cuda.plugin import PLUGIN
    from ember_gpu.errors import DeviceLostError

    x = em.ones(4, device="cuda:0")
    layer = ops.OpLayer(LAYER.index, PLUGIN.runtime)
    state = layer.device_ops(x)
    kernel = layer.kernel(state, "eg_fill_float32_flat32")
    with pytest.raises(DeviceLostError, match="ILLEGAL_ADDRESS"):
        # 4 floats allocated, 64 written: into the guard (the fake catches overruns of up to 256 bytes)
        kernel((1, 1, 1), (abi.BLOCK, 1, 1), {"out": layer.address(state, x), "n": 64, "value": (0, 0)})
    fake_cuda._poisoned = 0  # (for the fixture's teardown)


def test_the_manifest_claims_exactly_the_kernel_table() -> None:
    manifest = tomllib.loads((ops.package_kernels("ember_cuda") / ops.MANIFEST).read_text())
    assert manifest["kernels"]["cuda"] == CLAIMED
    assert set(em.as_device("cuda").backend.kernels("cuda")) == set(CLAIMED)
    from ember_gpu import codegen

    for op in codegen.registry_ops():  # every elementwise op of the registry, in every dtype it allows
        assert CLAIMED[op.name] == [d.name for d in op.dtypes], op.name


def test_the_plugin_info_and_kernel_table_never_open_the_driver() -> None:
    from ember_cuda.vendor import CUDA
    from ember_gpu.plugin import GpuPlugin
    from ember_gpu.runtime import Runtime

    def refuse(vendor: Any) -> Any:
        raise AssertionError("the driver was opened")

    plugin = GpuPlugin(CUDA, "ember_cuda", Runtime(CUDA, "ember_cuda", opener=refuse))
    info = plugin.ember_plugin_info()
    assert info.manifest.endswith("manifest.toml") and set(plugin.ember_kernels("cuda")) == set(CLAIMED)
    assert plugin.ember_kernels("vulkan") == {} and plugin.runtime.driver is None

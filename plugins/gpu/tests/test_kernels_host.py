"""ember-gpu's generated kernels, run on the host: the very sources nvcc compiles, built by g++ in
host mode (csrc/eg_host.h emulates the grid: blocks in turn, each block's threads as fibers), and
checked against ember-cpu on the same inputs: every op x dtype of the registry in every variant
(flat with 32- and 64-bit indices, aligned vector loads and the scalar tail, a broadcast scalar
input; strided over transposed, broadcast and reversed layouts with 32- and 64-bit indices), the
special values (NaN, infinities, signed zeros, subnormals, integer extremes), every copy between
dtypes, where, fill, and the Philox stream bit for bit."""

from __future__ import annotations

import math
import zlib
from pathlib import Path

import cffi
import numpy as np
import pytest
from ember_gpu import abi, build, codegen

import ember_core as em
from ember_core.plugins import MANAGER

HOST_DIR = Path(__file__).resolve().parents[1] / "build" / "host-kernels"  # git-ignored, kept between runs
GRID, BLOCK = 3, 64  # small, so that the grid-stride loops go round several times
N = 1000  # elements per flat run: 3 x 64 threads, vectors of 2..16 elements and a scalar tail

DTYPES = {d.name: d for d in codegen.DTYPES}
NUMPY = {"bool": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
         "uint8": np.uint8, "float16": np.float16, "bfloat16": np.uint16, "float32": np.float32,
         "float64": np.float64, "complex64": np.complex64, "complex128": np.complex128}

# ops whose result is the same as ember-cpu's to the bit (integer and bool code, IEEE operations,
# conversions); the others call math libraries, compared within a few ulps
EXACT = {"abs", "add", "bitwise_and", "bitwise_invert", "bitwise_left_shift", "bitwise_or", "bitwise_right_shift",
         "bitwise_xor", "ceil", "conj", "copysign", "divide", "equal", "floor", "floor_divide", "greater",
         "greater_equal", "imag", "isfinite", "isinf", "isnan", "less", "less_equal", "logical_and", "logical_not",
         "logical_or", "logical_xor", "maximum", "minimum", "multiply", "negative", "not_equal", "positive", "real",
         "reciprocal", "relu", "remainder", "round", "sign", "signbit", "square", "subtract", "trunc"}
# float code that is exact in real dtypes but not for complex ones (hypot)
EXACT_REAL_ONLY = {"abs", "sign"}


class HostKernels:
    """The host libraries of every kernel source, called through cffi."""

    def __init__(self, directory: Path) -> None:
        self.libraries = build.build_host_libraries(directory)
        self.ffi = cffi.FFI()
        self.ffi.cdef(abi.cdef_block(abi.HEADER.read_text()))
        index = build.read_index(directory)
        self.image_of = {kernel: file.removesuffix(".so") for kernel, file in index.items()}
        self.ffi.cdef("".join(f"void {k}_host(const {self.args_type(k)} *, unsigned, unsigned);\n" for k in index))
        self.opened: dict[str, object] = {}

    @staticmethod
    def args_type(kernel: str) -> str:
        """eg_<family>_args, but the elementwise families' flat / strided structs (abi.h)."""
        family = kernel.split("_")[1]
        if family not in ("unary", "binary", "copy", "where"):
            return f"eg_{family}_args"
        return "eg_strided_args" if "_strided" in kernel else "eg_flat_args"

    def launch(self, kernel: str, args: object, grid: int = GRID, block: int = BLOCK) -> None:
        image = self.image_of[kernel]
        if image not in self.opened:
            self.opened[image] = self.ffi.dlopen(str(self.libraries[image]))
        getattr(self.opened[image], kernel + "_host")(args, grid, block)

    def pointer(self, array: np.ndarray) -> object:
        return self.ffi.cast("void *", array.__array_interface__["data"][0])

    def flat(self, kernel: str, out: np.ndarray, inputs: list[np.ndarray], scalar_inputs: int = 0) -> None:
        args = self.ffi.new("eg_flat_args *")
        args.out = self.pointer(out)
        for j, x in enumerate(inputs):
            getattr(args, "in")[j] = self.pointer(x)
        args.n = out.size
        args.scalar_inputs = scalar_inputs
        self.launch(kernel, args)

    def strided(self, kernel: str, out: np.ndarray, inputs: list[np.ndarray]) -> None:
        """out and the inputs (broadcast to out's shape) as numpy views, strides in bytes."""
        args = self.ffi.new("eg_strided_args *")
        args.out = self.pointer(out)
        args.n = out.size
        args.layout.ndim = out.ndim
        for d, size in enumerate(out.shape):
            args.layout.shape[d] = size
        for k, x in enumerate([out, *inputs]):
            if k:
                getattr(args, "in")[k - 1] = self.pointer(x)
            x = np.broadcast_to(x, out.shape)
            for d, stride in enumerate(x.strides):
                args.layout.strides[k][d] = stride // x.itemsize
        self.launch(kernel, args)


@pytest.fixture(scope="module")
def host() -> HostKernels:
    return HostKernels(HOST_DIR)


@pytest.fixture(autouse=True, scope="module")
def ember_cpu_only():
    """The reference is ember-cpu itself, not another provider of the cpu device (ember-xnnpack
    flushes subnormals)."""
    MANAGER.ensure_discovered()
    others = [b.name for b in MANAGER.providers("cpu") if b.name != "cpu"]
    with em.providers(exclude=others):
        yield


# ---- values ---------------------------------------------------------------------------------------


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (nearest even), as bfloat16 bits."""
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(values, np.float32))
    return np.where(nan, 0x7FC0, rounded).astype(np.uint16)


def _bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


SPECIAL_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, math.inf, -math.inf, math.nan, 1e-40, -3e-39,
                  1e-310, 6e-8, 65504.0, 70000.0, 3e38, -1e300, 0.1, 100.0, -7.0, 3.0]


def _seed(*names: str) -> int:
    """A seed per test case, the same in every process (hash() of a str is salted per process)."""
    return zlib.crc32(" ".join(names).encode())


def values(dtype: str, n: int, rng: np.random.Generator, role: str = "") -> np.ndarray:
    """n values of dtype in its storage form (bfloat16 as bits), special values first."""
    d = DTYPES[dtype]
    if d.cls == "bool":
        return rng.integers(0, 2, n).astype(np.bool_)
    if d.cls in ("int", "uint"):
        info = np.iinfo(NUMPY[dtype])
        if role == "shift":
            return rng.integers(-2, d.bits + 3, n).astype(NUMPY[dtype]) if d.cls == "int" else \
                rng.integers(0, d.bits + 3, n).astype(NUMPY[dtype])
        special = [info.min, info.max, 0, 1, -1 if d.cls == "int" else 2, 2, 3, info.min + 1, 7]
        drawn = rng.integers(info.min, info.max, n, dtype=NUMPY[dtype], endpoint=True)
        small = rng.integers(max(info.min, -20), 21, n).astype(NUMPY[dtype])
        out = np.where(rng.random(n) < 0.5, drawn, small)
        out[: len(special)] = special[:n]
        return out.astype(NUMPY[dtype])
    real = np.concatenate([SPECIAL_FLOATS, rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n),
                           rng.integers(-8, 9, n) * 0.5])[:n]
    rng.shuffle(real[len(SPECIAL_FLOATS):])
    if d.cls == "complex":
        drawn = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)
        imag = np.concatenate([rng.permutation(SPECIAL_FLOATS), drawn])[:n]
        imag[: len(SPECIAL_FLOATS) // 2] = 0.0  # real axis: the branch cuts' signed zeros
        out = np.empty(n, NUMPY[dtype])
        with np.errstate(over="ignore"):
            out.real, out.imag = real, imag  # real + 1j * imag would turn 1j * inf into NaN + inf j
        return out
    return _stored(real, dtype)


def to_ember(stored: np.ndarray, dtype: str) -> em.Tensor:
    if dtype == "bfloat16":
        return em.asarray(_bf16_values(stored)).astype(em.bfloat16)
    return em.asarray(stored)


def from_ember(t: em.Tensor) -> np.ndarray:
    """A tensor's values in the storage form the kernels write (bfloat16 as bits)."""
    if t.dtype == em.bfloat16:
        return _bf16_bits(t.astype(em.float32).numpy())
    return t.numpy()


def comparable(stored: np.ndarray, dtype: str) -> np.ndarray:
    """Values to compare: bfloat16 bits as float32, everything else as is."""
    return _bf16_values(stored) if dtype == "bfloat16" else stored


# ---- comparison -------------------------------------------------------------------------------------


ULP_TOLERANCE = {"float16": 1, "bfloat16": 1, "float32": 4, "float64": 4, "complex64": 8, "complex128": 8}


def epsilon(dtype: str) -> float:
    return 2.0**-7 if dtype == "bfloat16" else float(np.finfo(NUMPY[dtype]).eps)


def mismatches(got: np.ndarray, want: np.ndarray, dtype: str, exact: bool,
               tolerance: np.ndarray | None = None) -> np.ndarray:
    """Where got and want differ: not equal (NaN equals NaN, zeros equal in sign) and, unless exact,
    not both finite within `tolerance` of want's magnitude (complex: of the whole value, or of the
    part where the whole overflows).  tolerance: a relative error per element, by default
    ULP_TOLERANCE ulps of the dtype; inf where the inputs do not determine the result (not
    compared)."""
    got, want = comparable(got, dtype), comparable(want, dtype)
    if got.dtype.kind not in "fc":
        return got != want
    complex_ = got.dtype.kind == "c"
    if tolerance is None:
        tolerance = np.full(got.shape, ULP_TOLERANCE[dtype] * epsilon(dtype))
    tiny = float(np.finfo(np.float32 if dtype == "bfloat16" else got.real.dtype).tiny)
    magnitude = np.abs(want.astype(np.complex128 if complex_ else np.float64))
    bad = np.zeros(got.shape, bool)
    for g, w in [(got.real, want.real), (got.imag, want.imag)] if complex_ else [(got, want)]:
        same = (g == w) & (np.signbit(g) == np.signbit(w)) | (np.isnan(g) & np.isnan(w))
        if not exact:
            g64, w64 = g.astype(np.float64), w.astype(np.float64)
            with np.errstate(invalid="ignore", over="ignore"):
                m = np.maximum(np.where(np.isfinite(magnitude), magnitude, np.abs(w64)), tiny)
                binade = np.frexp(np.where(np.isfinite(m), m, 1.0))[1]  # compared in m's binade: nothing overflows
                diff = np.abs(np.ldexp(g64, -binade) - np.ldexp(w64, -binade))
                close = diff <= tolerance * np.ldexp(m, -binade)
            same |= close & np.isfinite(g) & np.isfinite(w) | np.isinf(tolerance)
        bad |= ~same
    return bad


def assert_matches(got: np.ndarray, want: np.ndarray, dtype: str, exact: bool, what: str,
                   tolerance: np.ndarray | None = None) -> None:
    bad = mismatches(got, want, dtype, exact, tolerance)
    if bad.any():
        got, want = comparable(got, dtype), comparable(want, dtype)
        at = np.flatnonzero(bad)[:8]
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} differ, e.g. at {at.tolist()}: "
                             f"got {got.ravel()[at].tolist()}, ember-cpu {want.ravel()[at].tolist()}")


# ---- the elementwise ops ----------------------------------------------------------------------------------


ELEMENTWISE = [(op, d.name) for op in codegen.registry_ops() for d in op.dtypes]


# kernels that compute in a wider dtype and round once where ember-cpu computes in the dtype itself
# are compared with ember-cpu's op in the wider dtype, rounded: silu of half precision (the
# composite also rounds the sigmoid), and complex64 pow but for the exact small integer powers
# (exp(b log a) in float, glibc's cpowf, loses |b log a| ulps where double loses one)
COMPUTED_WIDE = {("silu", "float16"): "float32", ("silu", "bfloat16"): "float32", ("pow", "complex64"): "complex128"}


def _reference(op: codegen.OpInfo, inputs: list[np.ndarray], dtype: str) -> np.ndarray:
    tensors = [to_ember(x, dtype) for x in inputs]
    with np.errstate(all="ignore"):
        narrow = from_ember(getattr(em, op.name)(*tensors))
        wide = COMPUTED_WIDE.get((op.name, dtype))
        if not wide:
            return narrow
        result = getattr(em, op.name)(*(t.astype(getattr(em, wide)) for t in tensors))
        result = from_ember(result.astype(getattr(em, dtype)))
        if op.name == "pow":
            b = inputs[1]
            return np.where((b.imag == 0) & (np.abs(b.real) < 100) & (b.real == np.trunc(b.real)), narrow, result)
        return result


def _tolerance(op: str, inputs: list[np.ndarray], want: np.ndarray, dtype: str) -> np.ndarray | None:
    """The relative error allowed where the result's rounding is not the only error (None: the
    default).  logaddexp adds log1p(exp(-|a - b|)) to max(a, b): where the two cancel, the math
    library's error is of the larger input's order.  Complex pow is exp(b log a), computed in double
    (ember-cpu's complex64 reference too): the logarithm's error grows |b log a| times; where that
    reaches 1 (a finite phase of 2**53 and more) the inputs do not determine the result at all."""
    if op not in ("logaddexp", "pow") or DTYPES[dtype].cls not in ("float", "complex"):
        return None
    ulps = ULP_TOLERANCE[dtype]
    with np.errstate(all="ignore"):
        if op == "logaddexp":
            a, b, w = (np.abs(comparable(x, dtype).astype(np.float64)) for x in [*inputs, want])
            return ulps * epsilon(dtype) * np.fmax(np.fmax(a, b), w) / w
        if DTYPES[dtype].cls == "complex":   # pow
            a, b = (x.astype(np.complex128) for x in inputs)
            growth = np.abs(b * np.log(a))
            tolerance = ulps * (epsilon(dtype) + epsilon("float64") * growth)
            tolerance[~np.isfinite(growth)] = ulps * epsilon(dtype)  # Annex G's special values: compared
            tolerance[np.isfinite(growth) & (growth * epsilon("float64") >= 1)] = np.inf
            return tolerance
    return None


def _inputs(op: codegen.OpInfo, dtype: str, n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    first = values(dtype, n, rng)
    if op.kind == "unary":
        return [first]
    role = "shift" if "shift" in op.name else ""
    second = values(dtype, n, rng, role)
    if role == "" and op.name == "pow" and DTYPES[dtype].cls in ("int", "uint"):
        second = values(dtype, n, rng, "shift")  # exponents around the width: wraps, 0, 1
    if DTYPES[dtype].cls in ("float", "complex"):  # every pair of special values
        specials = len(SPECIAL_FLOATS)
        first[: specials**2 // 2 * 2] = np.repeat(first[:specials], specials)[: specials**2 // 2 * 2]
        second[: specials**2 // 2 * 2] = np.tile(second[:specials], specials)[: specials**2 // 2 * 2]
    return [first, second]


def _exact(op: str, dtype: str) -> bool:
    if DTYPES[dtype].cls == "complex" and op in EXACT_REAL_ONLY:
        return False
    return op in EXACT or op in EXACT_REAL_ONLY


@pytest.mark.parametrize(("op", "dtype"), ELEMENTWISE, ids=[f"{op.name}-{d}" for op, d in ELEMENTWISE])
def test_elementwise_flat_and_strided(host: HostKernels, op: codegen.OpInfo, dtype: str) -> None:
    out_dtype = codegen._result(DTYPES[dtype], op.result).name
    name = f"eg_{op.kind}_{op.name}_{dtype}"
    exact = _exact(op.name, dtype)

    def check(got: np.ndarray, inputs: list[np.ndarray], want: np.ndarray, what: str) -> None:
        assert_matches(got, want, out_dtype, exact, f"{name}_{what}", _tolerance(op.name, inputs, want, dtype))

    inputs = _inputs(op, dtype, N, seed=_seed(op.name, dtype))
    want = _reference(op, inputs, dtype)
    for variant in ("flat32", "flat64"):
        got = np.zeros(N, NUMPY[out_dtype])
        host.flat(f"{name}_{variant}", got, inputs)
        check(got, inputs, want, variant)
    # one input repeated (x * 2.0): the flat kernels read its first element for every output
    scalar = [x[7:8] for x in inputs[:1]] + inputs[1:]
    got = np.zeros(N, NUMPY[out_dtype])
    host.flat(f"{name}_flat32", got, scalar, scalar_inputs=1)
    repeated = [np.broadcast_to(scalar[0], (N,)).copy(), *inputs[1:]]
    check(got, repeated, _reference(op, repeated, dtype), "flat32 with a scalar first input")
    # misaligned pointers: the scalar loop alone
    got = np.zeros(N, NUMPY[out_dtype])
    host.flat(f"{name}_flat64", got[1:], [x[1:] for x in inputs])
    check(got[1:], [x[1:] for x in inputs], want[1:], "flat64 misaligned")
    # strided: a transposed input, a broadcast row for the second, a reversed output (3 dims)
    rows, cols = 8, 12
    views = [inputs[0][: rows * cols].reshape(cols, rows).T.reshape(rows, 1, cols)[:, :, ::-1]]
    if op.kind == "binary":
        views.append(inputs[1][:cols])  # broadcast along the first two dims
    dense = [np.ascontiguousarray(np.broadcast_to(v, (rows, 1, cols))) for v in views]
    want_strided = _reference(op, dense, dtype)
    for variant in ("strided32", "strided64"):
        base = np.zeros((rows, 1, cols), NUMPY[out_dtype])
        out = base[::-1]
        host.strided(f"{name}_{variant}", out, views)
        check(out, dense, want_strided, variant)


def test_every_registry_elementwise_op_has_kernels(host: HostKernels) -> None:
    """The kernels follow the registry: every unary and binary primitive of elementwise.toml, for
    every dtype it declares, in four variants (a new registry op fails the generator until the op
    table has its code)."""
    from ember_core.ops.registry import REGISTRY

    for op in REGISTRY:
        if op.file.endswith("elementwise.toml") and op.family in ("unary", "binary"):
            for d in op.dtypes:
                for variant in codegen.ELEMENTWISE_VARIANTS:
                    assert f"eg_{op.family}_{op.name}_{d.name}_{variant}" in host.image_of


# ---- copy, where, fill --------------------------------------------------------------------------------------

COPIES = [(s.name, d.name) for s, d in codegen.copy_pairs()]


@pytest.mark.parametrize(("src", "dst"), COPIES, ids=[f"{s}-{d}" for s, d in COPIES])
def test_copy(host: HostKernels, src: str, dst: str) -> None:
    inputs = [values(src, N, np.random.default_rng(_seed(src, dst)))]
    if DTYPES[src].cls in ("float", "complex") and DTYPES[dst].cls in ("int", "uint"):
        extremes = [2.0**63, -(2.0**63), 2.0**63 - 1024, 2.0**31, -(2.0**31) - 1, 255.5, 256.0, -129.0, 1e20]
        inputs[0][: len(extremes)] = _stored(np.array(extremes), src)
    with np.errstate(all="ignore"):
        want = from_ember(to_ember(inputs[0], src).astype(getattr(em, dst)))
    name = f"eg_copy_{src}_to_{dst}"
    for variant in ("flat32", "flat64"):
        got = np.zeros(N, NUMPY[dst])
        host.flat(f"{name}_{variant}", got, inputs)
        assert_matches(got, want, dst, True, f"{name}_{variant}")
    got = np.zeros((10, 20), NUMPY[dst])
    host.strided(f"{name}_strided32", got.T, [inputs[0][:200].reshape(20, 10)])
    assert_matches(got.T, want[:200].reshape(20, 10), dst, True, f"{name}_strided32")


def _stored(x: np.ndarray, dtype: str) -> np.ndarray:
    with np.errstate(over="ignore"):
        return _bf16_bits(x.astype(np.float32)) if dtype == "bfloat16" else x.astype(NUMPY[dtype])


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_where(host: HostKernels, dtype: str) -> None:
    rng = np.random.default_rng(5)
    cond = rng.integers(0, 2, N).astype(np.bool_)
    x1, x2 = values(dtype, N, rng), values(dtype, N, rng)
    want = np.where(cond, x1, x2)
    got = np.zeros(N, NUMPY[dtype])
    host.flat(f"eg_where_{dtype}_flat32", got, [cond, x1, x2])
    assert got.tobytes() == want.tobytes()  # the stored bits, NaN payloads and all
    got = np.zeros(N, NUMPY[dtype])
    host.flat(f"eg_where_{dtype}_flat64", got, [cond, x1, x2[3:4]], scalar_inputs=4)
    assert got.tobytes() == np.where(cond, x1, x2[3]).astype(NUMPY[dtype]).tobytes()
    got = np.zeros((20, 50), NUMPY[dtype])
    host.strided(f"eg_where_{dtype}_strided64", got, [cond[:50], x1[:1000].reshape(50, 20).T, x2[:1]])
    assert got.tobytes() == np.where(cond[:50], x1[:1000].reshape(50, 20).T, x2[0]).astype(NUMPY[dtype]).tobytes()


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_fill(host: HostKernels, dtype: str) -> None:
    value = values(dtype, 20, np.random.default_rng(2))[12:13]
    args = host.ffi.new("eg_fill_args *")
    raw = value.tobytes().ljust(16, b"\0")
    args.value = [int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")]
    for variant, offset in (("flat32", 0), ("flat64", 1)):  # aligned, then the scalar loop alone
        got = np.zeros(N + 1, NUMPY[dtype])
        args.out = host.pointer(got[offset:])
        args.n = N
        host.launch(f"eg_fill_{dtype}_{variant}", args)
        assert got[offset: offset + N].tobytes() == np.repeat(value, N).tobytes()
        assert not np.delete(got, np.s_[offset: offset + N]).any()  # nothing written past the n elements


# ---- random ------------------------------------------------------------------------------------------------

SEEDS = [(0, 0), (0x5EED0FE4BE, 7), (2**64 - 1, 2**64 - 3)]  # the last draw carries into counter word 2


@pytest.mark.parametrize(("kind", "dtype"), list(codegen.random_makers()), ids=lambda x: str(x))
@pytest.mark.parametrize(("seed", "offset"), SEEDS)
def test_random_matches_ember_cpu_bit_for_bit(host: HostKernels, kind: str, dtype: str, seed: int, offset: int) -> None:
    n = 1001  # not a multiple of the elements per block
    low, high = {"uniform": (-2.5, 3.0), "normal": (1.5, 2.0)}.get(kind, (-100, 100))
    if dtype == "bool":
        low, high = 0, 2
    elif dtype == "uint8":
        low, high = 3, 250
    args = host.ffi.new("eg_random_args *")
    got = np.zeros(n, NUMPY[dtype])
    args.out, args.n, args.seed, args.offset = host.pointer(got), n, seed, offset
    if kind == "integers":
        args.ilow, args.ihigh = low, high
    else:
        args.a, args.b = low, high
    for variant in ("flat32", "flat64"):
        host.launch(f"eg_random_{kind}_{dtype}_{variant}", args)
        generator = em.random.Generator("cpu").manual_seed(seed)
        generator.set_state((seed, offset))
        draw = getattr(em, f"random_{kind}")
        want = from_ember(draw((n,), low, high, dtype=getattr(em, dtype if dtype != "bool" else "bool_"),
                               generator=generator))
        if kind == "normal":  # to the last bit of the two C libraries' log / sin / cos
            assert_matches(got, want, dtype, False, f"random_{kind} {dtype} {variant}")
        else:
            assert got.tobytes() == want.astype(NUMPY[dtype]).tobytes(), f"random_{kind} {dtype} {variant}"


def test_philox_known_answer(host: HostKernels) -> None:
    """random.c's known answer: counter 0, key 0 -> 0x6627e8d5 0xe169c58d 0xbc57ac4c 0x9b00dbd8,
    read back through random_integers over [0, 2**32) of int64 (words 0 and 1, then 2 and 3)."""
    got = np.zeros(2, np.int64)
    args = host.ffi.new("eg_random_args *")
    args.out, args.n, args.seed, args.offset, args.ilow, args.ihigh = host.pointer(got), 2, 0, 0, 0, 2**62
    host.launch("eg_random_integers_int64_flat32", args)
    assert got.tolist() == [(0x6627E8D5 << 32 | 0xE169C58D) % 2**62, (0xBC57AC4C << 32 | 0x9B00DBD8) % 2**62]

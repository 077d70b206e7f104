"""ember-cpu's elementwise kernels (copy, fill, unary, binary, where) against numpy.

Every op x dtype that kernels.toml compiles is compared with numpy on contiguous, transposed,
negative-stride, broadcast (stride 0), 0-d and empty operands.  Floating results are checked
against a float64 (complex128) reference rounded to the result dtype, within a tolerance per
dtype; integer and bool results must match exactly.  bfloat16 has no numpy dtype: its arrays are
uint16 bit patterns.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from ember_conformance.samples.data import integer_edges
from ember_cpu._native import ffi, lib
from native_util import check, desc

import ember_core as em
from ember_core.dtypes import float_to_integer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import codegen

TABLE = codegen.load()
DTYPES = [d.name for d in codegen.DTYPES]
CODE = {name: getattr(lib, f"EMBER_{name.upper()}") for name in DTYPES}
STORAGE = {
    "bool": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "float16": np.float16, "bfloat16": np.uint16, "float32": np.float32,
    "float64": np.float64, "complex64": np.complex64, "complex128": np.complex128,
}  # fmt: skip
INTS = ["int8", "int16", "int32", "int64", "uint8"]
REAL_FLOATS = ["float16", "bfloat16", "float32", "float64"]
COMPLEX = ["complex64", "complex128"]
COMPLEX_PART = {"complex64": "float32", "complex128": "float64"}
# (rtol, atol) of results in each floating dtype
TOL = {
    "float16": (2e-3, 1e-4),
    "bfloat16": (1e-2, 1e-3),
    "float32": (2e-6, 1e-6),
    "float64": (1e-12, 1e-14),
    "complex64": (1e-5, 1e-6),
    "complex128": (1e-12, 1e-14),
}

# ---- values <-> stored arrays -------------------------------------------------------------------


def bf16_encode(x) -> np.ndarray:
    """float64 values -> bfloat16 bits, rounded once to nearest even (normal range)."""
    x = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        m, e = np.frexp(x)
        r = np.ldexp(np.round(np.ldexp(m, 8)), e - 8).astype(np.float32)
    return (r.view(np.uint32) >> 16).astype(np.uint16)


def bf16_decode(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def encode(values, dt: str) -> np.ndarray:
    """Values (float64 / complex128 / ints / bools) -> an array stored as dtype `dt`."""
    with np.errstate(all="ignore"):
        if dt == "bfloat16":
            return bf16_encode(values)
        return np.asarray(values).astype(STORAGE[dt])


def decode(arr: np.ndarray, dt: str) -> np.ndarray:
    """A stored array -> its values as float64 / complex128 (floating) or itself."""
    if dt == "bfloat16":
        return bf16_decode(arr)
    if dt in COMPLEX:
        return arr.astype(np.complex128)
    if dt in REAL_FLOATS:
        return arr.astype(np.float64)
    return arr


def tdesc(arr: np.ndarray, dt: str):
    return desc(arr, CODE[dt])


def result_dtype(spec: dict, dt: str) -> str:
    kind = spec.get("result", "same")
    if kind == "bool":
        return "bool"
    if kind == "real":
        return {"complex64": "float32", "complex128": "float64"}.get(dt, dt)
    return dt


def assert_values(got: np.ndarray, want_values: np.ndarray, dt: str, rtol_scale: float = 1.0) -> None:
    """`got` (stored as dt) against reference values: exact for bool / integers, else the reference
    is rounded to dt first, then compared within TOL[dt]."""
    if dt in TOL:
        want = decode(encode(want_values, dt), dt)
        rtol, atol = TOL[dt]
        np.testing.assert_allclose(decode(got, dt), want, rtol=rtol * rtol_scale, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, np.asarray(want_values).astype(STORAGE[dt]))


RNG = np.random.default_rng(1234)
FLOAT_SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0]


def pool(dt: str, n: int = 64, rng: np.random.Generator = RNG) -> np.ndarray:
    """n test values of dtype dt (as values, not storage): random data plus edge cases."""
    if dt == "bool":
        return rng.integers(0, 2, n).astype(bool)
    if dt in INTS:
        info = np.iinfo(dt)
        edge = np.array([info.min, info.max, 0, 1, -1 if info.min < 0 else 2, info.min + 1], dtype=dt)
        rand = rng.integers(info.min, int(info.max) + 1, n - len(edge), dtype=dt)
        return np.concatenate([edge, rand])
    if dt in REAL_FLOATS:
        rand = rng.uniform(-4, 4, n - len(FLOAT_SPECIALS))
        return decode(encode(np.concatenate([FLOAT_SPECIALS, rand]), dt), dt)
    re, im = rng.uniform(-2, 2, (2, n))
    return decode(encode(re + 1j * im, dt), dt)


COMPLEX_SPECIALS = np.array([0j, complex(np.nan, 0), complex(0, np.nan), complex(np.inf, 1), complex(1, -np.inf),
                             complex(np.inf, np.inf), complex(-np.inf, 0), 3 + 4j])  # fmt: skip

# ---- numpy references ----------------------------------------------------------------------------


def _ident(x):
    return x


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _erfc(x):
    return np.vectorize(math.erfc, otypes=[np.float64])(x)


def _on_ints(f_int, f_other):
    return lambda x, dt: f_int(x) if dt in INTS else f_other(x)


UNARY_REF: dict[str, Callable] = {
    "abs": np.abs, "acos": np.arccos, "acosh": np.arccosh, "asin": np.arcsin, "asinh": np.arcsinh,
    "atan": np.arctan, "atanh": np.arctanh, "bitwise_invert": np.invert, "ceil": np.ceil, "conj": np.conj,
    "cos": np.cos, "cosh": np.cosh, "exp": np.exp, "expm1": np.expm1, "floor": np.floor, "imag": np.imag,
    "isfinite": np.isfinite, "isinf": np.isinf, "isnan": np.isnan, "log": np.log, "log1p": np.log1p,
    "log2": np.log2, "log10": np.log10, "logical_not": np.logical_not, "negative": np.negative,
    "positive": np.positive, "real": np.real, "round": np.round, "sign": np.sign, "signbit": np.signbit,
    "sin": np.sin, "sinh": np.sinh, "sqrt": np.sqrt, "square": np.square, "tan": np.tan, "tanh": np.tanh,
    "trunc": np.trunc, "sigmoid": _sigmoid, "erf": _erf, "erfc": _erfc, "reciprocal": np.reciprocal,
}  # fmt: skip
INT_IDENTITY = {"ceil", "floor", "trunc", "round", "conj", "real", "positive"}
# complex ops whose treatment of inf / nan parts follows numpy's own code (the rest come from libm)
COMPLEX_SPECIALS_OK = {"abs", "conj", "imag", "real", "isfinite", "isinf", "isnan", "negative", "positive",
                       "sign", "round", "square"}  # fmt: skip

BINARY_REF: dict[str, Callable] = {
    "add": np.add, "atan2": np.arctan2, "bitwise_and": np.bitwise_and, "bitwise_left_shift": np.left_shift,
    "bitwise_or": np.bitwise_or, "bitwise_right_shift": np.right_shift, "bitwise_xor": np.bitwise_xor,
    "copysign": np.copysign, "divide": np.divide, "equal": np.equal, "floor_divide": np.floor_divide,
    "greater": np.greater, "greater_equal": np.greater_equal, "hypot": np.hypot, "less": np.less,
    "less_equal": np.less_equal, "logaddexp": np.logaddexp, "logical_and": np.logical_and,
    "logical_or": np.logical_or, "logical_xor": np.logical_xor, "maximum": np.maximum, "minimum": np.minimum,
    "multiply": np.multiply, "not_equal": np.not_equal, "pow": np.power, "remainder": np.remainder,
    "subtract": np.subtract,
}  # fmt: skip
# floating ops whose numpy loop computes in the dtype itself (float16 via float32): compared to
# numpy in that dtype (bfloat16: float32), exactly up to the final rounding
SAME_DTYPE_REF = {"floor_divide", "remainder"}


def unary_ref(op: str, x: np.ndarray, dt: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        if dt in [*INTS, "bool"] and op in INT_IDENTITY:
            return x.copy()
        if op == "isfinite" and dt in INTS:
            return np.ones(x.shape, bool)
        if op in ("isinf", "isnan") and dt in INTS:
            return np.zeros(x.shape, bool)
        return UNARY_REF[op](x)


def binary_ref(op: str, a: np.ndarray, b: np.ndarray, dt: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        if op in SAME_DTYPE_REF and dt in REAL_FLOATS:
            st = np.float32 if dt == "bfloat16" else STORAGE[dt]
            return BINARY_REF[op](a.astype(st), b.astype(st)).astype(np.float64)
        return BINARY_REF[op](a, b)


def op_cases(kind: str) -> list[tuple[str, str]]:
    cases = []
    for op, spec in TABLE[kind].items():
        sel = spec["dtypes"]
        for dt in codegen.DTYPE_SETS[sel] if isinstance(sel, str) else sel:
            cases.append((op, dt))
    return cases


UNARY_CASES = op_cases("unary")
BINARY_CASES = op_cases("binary")


def test_every_op_has_a_reference():
    assert set(TABLE["unary"]) == set(UNARY_REF)
    assert set(TABLE["binary"]) == set(BINARY_REF)


def test_dtypes_and_results_match_the_core_registry():
    registry_file = Path(__file__).resolve().parents[3] / "ember_core" / "ops" / "elementwise.toml"
    if not registry_file.exists():
        pytest.skip("no in-tree core registry")
    registry = codegen.tomllib.loads(registry_file.read_text())["ops"]
    for kind in ("unary", "binary"):
        for op, spec in TABLE[kind].items():
            if op in registry:
                assert spec["dtypes"] == registry[op]["dtypes"], op
                assert spec.get("result", "same") == registry[op].get("result", "same"), op
    assert {op for op, s in registry.items() if s.get("family") in ("unary", "binary")} <= set(TABLE["unary"]) | set(
        TABLE["binary"]
    )


def test_op_codes_follow_table_order():
    for kind in ("unary", "binary"):
        for i, op in enumerate(TABLE[kind]):
            assert getattr(lib, f"EMBER_CPU_{kind.upper()}_{op.upper()}") == i
        assert getattr(lib, f"EMBER_CPU_{kind.upper()}_COUNT") == len(TABLE[kind])


# ---- layouts -------------------------------------------------------------------------------------


def layouts(values: np.ndarray, dt: str) -> list[tuple[str, np.ndarray]]:
    """Views of stored arrays built from the value pool, in the layouts the kernels specialise."""
    s = encode(values, dt)
    base2d = s[:35].reshape(5, 7)
    return [
        ("contig", s[:37].copy()),
        ("transposed", base2d.T),
        ("negative", s[::-2]),
        ("row_broadcast", np.broadcast_to(s[:7], (4, 7))),
        ("col_broadcast", np.broadcast_to(s[:4, None], (4, 7))),
        ("0d", s[5:6].reshape(())),
        ("empty", s[:0]),
        ("empty2d", s[:0].reshape(3, 0)),
        ("4d", s[:48].reshape(2, 3, 4, 2).transpose(2, 0, 3, 1)),
    ]


def fresh_out(shape: tuple[int, ...], dt: str, transposed: bool = False) -> np.ndarray:
    st = STORAGE[dt]
    if transposed and len(shape) == 2:
        return np.zeros(shape[::-1], st).T
    return np.zeros(shape, st)


def run_unary(op: str, dt: str, x: np.ndarray, out_dt: str, transposed_out: bool = False) -> np.ndarray:
    out = fresh_out(x.shape, out_dt, transposed_out)
    code = getattr(lib, f"EMBER_CPU_UNARY_{op.upper()}")
    check(lib.ember_cpu_unary(code, tdesc(out, out_dt), tdesc(x, dt)))
    return out


def run_binary(op: str, dt: str, a: np.ndarray, b: np.ndarray, out_dt: str) -> np.ndarray:
    out = fresh_out(a.shape, out_dt)
    code = getattr(lib, f"EMBER_CPU_BINARY_{op.upper()}")
    check(lib.ember_cpu_binary(code, tdesc(out, out_dt), tdesc(a, dt), tdesc(b, dt)))
    return out


def ptr(arr: np.ndarray):
    return ffi.cast("void *", arr.ctypes.data)


# ---- unary ---------------------------------------------------------------------------------------


def unary_pool(op: str, dt: str) -> np.ndarray:
    vals = pool(dt)
    if dt in COMPLEX and op in COMPLEX_SPECIALS_OK:
        vals[: len(COMPLEX_SPECIALS)] = COMPLEX_SPECIALS
    return vals


@pytest.mark.parametrize(("op", "dt"), UNARY_CASES)
def test_unary(op: str, dt: str):
    spec = TABLE["unary"][op]
    out_dt = result_dtype(spec, dt)
    for name, x in layouts(unary_pool(op, dt), dt):
        want = unary_ref(op, decode(x, dt), dt)
        for transposed_out in (False, True) if name == "transposed" else (False,):
            got = run_unary(op, dt, x, out_dt, transposed_out)
            try:
                assert_values(got, want, out_dt)
            except AssertionError as e:
                raise AssertionError(f"{op}({dt}) layout {name}: {e}") from None
    # the contiguous entry point, with element offsets
    x = encode(unary_pool(op, dt), dt)
    out = np.zeros(x.size + 2, STORAGE[out_dt])
    code = getattr(lib, f"EMBER_CPU_UNARY_{op.upper()}")
    check(lib.ember_cpu_unary_contig(code, CODE[dt], x.size - 3, ptr(out), 2, ptr(x), 3))
    assert_values(out[2 : 2 + x.size - 3], unary_ref(op, decode(x[3:], dt), dt), out_dt)
    assert not out[:2].any()


# ---- binary --------------------------------------------------------------------------------------


def binary_pools(op: str, dt: str) -> tuple[np.ndarray, np.ndarray]:
    a, b = pool(dt), pool(dt, rng=np.random.default_rng(99))
    if dt in INTS:
        if op in ("bitwise_left_shift", "bitwise_right_shift"):
            bits = np.iinfo(dt).bits
            lo = -3 if dt != "uint8" else 0
            b = np.random.default_rng(5).integers(lo, bits + 3, a.size).astype(dt)
        elif op == "pow":  # numpy refuses negative exponents: tested separately
            b = np.random.default_rng(5).integers(0, 70, a.size).astype(dt)
            b[:8] = [0, 1, 2, 3, 0, 5, 63, 64][:8]
        elif op in ("floor_divide", "remainder") and np.iinfo(dt).min < 0:
            b[:6] = [0, -1, 0, -1, 7, -7]  # MIN // -1, x // 0 ...
    if dt in COMPLEX and op == "pow":
        b[:6] = [2, 3, -2, 0, 1, 0.5]
        a[4:6] = [0, 0]
    return a, b


@pytest.mark.parametrize(("op", "dt"), BINARY_CASES)
def test_binary(op: str, dt: str):
    spec = TABLE["binary"][op]
    out_dt = result_dtype(spec, dt)
    pa, pb = binary_pools(op, dt)
    sa, sb = encode(pa, dt), encode(pb, dt)
    tol_scale = 3.0 if op == "pow" else 1.0

    cases = [
        ("contig", sa[:37].copy(), sb[:37].copy()),
        ("transposed", sa[:35].reshape(5, 7).T, sb[:35].reshape(7, 5)),
        ("negative", sa[::-2], sb[1::2]),
        ("b_row", sa[:28].reshape(4, 7), np.broadcast_to(sb[:7], (4, 7))),
        ("b_col", sa[:28].reshape(4, 7), np.broadcast_to(sb[:4, None], (4, 7))),
        ("a_col", np.broadcast_to(sa[:4, None], (4, 7)), sb[:28].reshape(4, 7)),
        ("a_scalar", np.broadcast_to(sa[3], (5, 6)), sb[:30].reshape(5, 6)),
        ("b_scalar_strided", sa[::-3], np.broadcast_to(sb[2], sa[::-3].shape)),
        ("0d", sa[2:3].reshape(()), sb[2:3].reshape(())),
        ("empty", sa[:0], sb[:0]),
        ("4d", sa[:48].reshape(2, 3, 4, 2).transpose(2, 0, 3, 1), sb[:48].reshape(4, 2, 2, 3)),
    ]
    for name, a, b in cases:
        want = binary_ref(op, decode(a, dt), decode(b, dt), dt)
        got = run_binary(op, dt, a, b, out_dt)
        try:
            assert_values(got, want, out_dt, tol_scale)
        except AssertionError as e:
            raise AssertionError(f"{op}({dt}) layout {name}: {e}") from None

    # the contiguous entry point with element offsets, and in place (out is a)
    code = getattr(lib, f"EMBER_CPU_BINARY_{op.upper()}")
    n = sa.size - 4
    out = np.zeros(n + 1, STORAGE[out_dt])
    check(lib.ember_cpu_binary_flat(code, CODE[dt], n, ptr(out), 1, ptr(sa), 4, 1, ptr(sb), 2, 1))
    assert_values(out[1:], binary_ref(op, decode(sa[4:], dt), decode(sb[2 : 2 + n], dt), dt), out_dt, tol_scale)
    if out_dt == dt:
        a = sa.copy()
        want = binary_ref(op, decode(a, dt), decode(sb, dt), dt)
        check(lib.ember_cpu_binary_flat(code, CODE[dt], a.size, ptr(a), 0, ptr(a), 0, 1, ptr(sb), 0, 1))
        assert_values(a, want, dt, tol_scale)
    # one input repeating one element (step 0), on either side
    out = np.zeros(n, STORAGE[out_dt])
    check(lib.ember_cpu_binary_flat(code, CODE[dt], n, ptr(out), 0, ptr(sa), 4, 1, ptr(sb), 3, 0))
    assert_values(out, binary_ref(op, decode(sa[4:], dt), np.repeat(decode(sb[3:4], dt), n), dt), out_dt, tol_scale)
    check(lib.ember_cpu_binary_flat(code, CODE[dt], n, ptr(out), 0, ptr(sa), 3, 0, ptr(sb), 2, 1))
    want = binary_ref(op, np.repeat(decode(sa[3:4], dt), n), decode(sb[2 : 2 + n], dt), dt)
    assert_values(out, want, out_dt, tol_scale)


# ---- integer edge cases: no traps, defined results -----------------------------------------------


def ibinary(op: str, dt: str, a, b) -> np.ndarray:
    a, b = np.array(a, dt), np.array(b, dt)
    return run_binary(op, dt, a, b, dt)


@pytest.mark.parametrize("dt", ["int8", "int16", "int32", "int64"])
def test_integer_division_never_traps(dt: str):
    lo = np.iinfo(dt).min
    a = [7, -7, 0, lo, lo, lo, 7, -7, -7]
    b = [0, 0, 0, 0, -1, 1, -2, 2, -2]
    np.testing.assert_array_equal(ibinary("floor_divide", dt, a, b), np.array([0, 0, 0, 0, lo, lo, -4, -4, 3], dt))
    np.testing.assert_array_equal(ibinary("remainder", dt, a, b), np.array([0, 0, 0, 0, 0, 0, -1, 1, -1], dt))


def test_uint_division_by_zero():
    np.testing.assert_array_equal(ibinary("floor_divide", "uint8", [7, 0, 255], [0, 0, 2]), [0, 0, 127])
    np.testing.assert_array_equal(ibinary("remainder", "uint8", [7, 0, 255], [0, 0, 2]), [0, 0, 1])


@pytest.mark.parametrize("dt", INTS)
def test_integer_pow_negative_exponent(dt: str):
    if dt == "uint8":
        np.testing.assert_array_equal(ibinary("pow", dt, [2, 3, 0, 255], [8, 5, 0, 2]), [0, 243, 1, 1])
        return
    got = ibinary("pow", dt, [1, -1, -1, 2, 0, -3, 5, 1], [-5, -3, -4, -1, -1, -2, 0, -128])
    np.testing.assert_array_equal(got, np.array([1, -1, 1, 0, 0, 0, 1, 1], dt))
    lo = np.iinfo(dt).min
    # overflow wraps: (-2) ** (bits - 1) == MIN, 3 ** 200 keeps its low bits
    bits = np.iinfo(dt).bits
    got = ibinary("pow", dt, [-2, 3], [bits - 1, min(np.iinfo(dt).max, 200)])
    want3 = pow(3, int(min(np.iinfo(dt).max, 200)), 1 << bits)
    assert got[0] == lo
    assert got[1] == np.array(want3, np.uint64).astype(dt)


@pytest.mark.parametrize("dt", INTS)
def test_shifts_out_of_range(dt: str):
    bits = np.iinfo(dt).bits
    neg = dt != "uint8"
    a = [-5, 5, -1, 1] if neg else [250, 5, 255, 1]
    counts = [bits, bits + 1, -1, 127] if neg else [bits, bits + 1, 200, 255]
    np.testing.assert_array_equal(ibinary("bitwise_left_shift", dt, a, counts), [0, 0, 0, 0])
    want = [-1, 0, -1, 0] if neg else [0, 0, 0, 0]
    np.testing.assert_array_equal(ibinary("bitwise_right_shift", dt, a, counts), want)
    # in-range shifts of negative values wrap / sign-extend
    if neg:
        got = ibinary("bitwise_left_shift", dt, [-1, 1], [bits - 1, bits - 1])
        np.testing.assert_array_equal(got, [np.iinfo(dt).min, np.iinfo(dt).min])
        np.testing.assert_array_equal(ibinary("bitwise_right_shift", dt, [-8, -1], [2, bits - 1]), [-2, -1])


@pytest.mark.parametrize("dt", ["int8", "int16", "int32", "int64"])
def test_integer_overflow_wraps(dt: str):
    lo, hi = np.iinfo(dt).min, np.iinfo(dt).max
    np.testing.assert_array_equal(ibinary("add", dt, [hi], [1]), [lo])
    np.testing.assert_array_equal(ibinary("subtract", dt, [lo], [1]), [hi])
    np.testing.assert_array_equal(ibinary("multiply", dt, [hi], [hi]), [1])
    x = np.array([lo, hi], dt)
    np.testing.assert_array_equal(run_unary("abs", dt, x, dt), [lo, hi])
    np.testing.assert_array_equal(run_unary("negative", dt, x, dt), [lo, -hi])
    np.testing.assert_array_equal(run_unary("square", dt, x, dt), [0, 1])


# ---- copy (astype) -------------------------------------------------------------------------------


def copy_ref(values: np.ndarray, src: str, dst: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        if dst == "bool":
            return values != 0
        if dst in INTS:  # floats by the core's saturating rule (complex: the real part); integers wrap
            return float_to_integer(values.real, dst) if src in REAL_FLOATS + COMPLEX else values.astype(dst)
        if dst in REAL_FLOATS and src in COMPLEX:
            return values.real
        if src == "int64" and dst == "bfloat16":
            return values.astype(np.float64)
        return values


@pytest.mark.parametrize("dst", DTYPES)
@pytest.mark.parametrize("src", DTYPES)
def test_copy(src: str, dst: str):
    s = encode(pool(src), src)
    views = [
        ("contig", s[:37]),
        ("transposed", s[:35].reshape(5, 7).T),
        ("negative", s[::-3]),
        ("broadcast", np.broadcast_to(s[:1, None], (3, 4))),
        ("0d", s[3:4].reshape(())),
        ("empty", s[:0]),
    ]
    for name, x in views:
        out = fresh_out(x.shape, dst)
        check(lib.ember_cpu_copy(tdesc(out, dst), tdesc(x, src)))
        want = copy_ref(decode(x, src), src, dst)
        try:
            if src == dst:  # bit-exact, NaN payloads included
                assert out.tobytes() == np.ascontiguousarray(x).tobytes()
            elif dst in TOL:
                np.testing.assert_array_equal(decode(out, dst), decode(encode(want, dst), dst))
            else:
                np.testing.assert_array_equal(out, want)
        except AssertionError as e:
            raise AssertionError(f"copy {src} -> {dst} layout {name}: {e}") from None


@pytest.mark.parametrize("src", REAL_FLOATS + COMPLEX)
@pytest.mark.parametrize("dst", INTS)
def test_copy_float_to_int_saturates(src: str, dst: str):
    """NaN, +-inf and values just inside and just outside the range, in the vector loops (and
    their tails), strided and broadcast: truncation toward zero, NaN -> 0, the limits beyond."""
    edges = integer_edges(COMPLEX_PART.get(src, src), dst)
    x = encode(edges - 3.5j if src in COMPLEX else edges, src)  # the imaginary part plays no role
    for name, view in (("vector", np.resize(x, 70)), ("negative", x[::-1]),
                       ("broadcast", np.broadcast_to(x[1:2], (5,)))):
        out = np.zeros(view.shape, dst)
        check(lib.ember_cpu_copy(tdesc(out, dst), tdesc(view, src)))
        np.testing.assert_array_equal(out, float_to_integer(decode(view, src).real, dst), err_msg=name)


@pytest.mark.parametrize("dst", INTS)
@pytest.mark.parametrize("src", ["float16", "float32", "float64"])
def test_host_floats_into_integers_convert_as_the_kernel_does(src: str, dst: str):
    """asarray and slice assignment of numpy floats with an integer dtype convert on the host
    (numpy's own cast gives INT_MIN for NaN and wraps into uint8): they must give what the copy
    kernel gives for the same values."""
    values = integer_edges(src, dst).astype(src)
    want = float_to_integer(values, dst)
    np.testing.assert_array_equal(em.asarray(values).astype(dst).numpy(), want)  # the kernel
    np.testing.assert_array_equal(em.asarray(values, dtype=dst).numpy(), want)
    x = em.zeros(values.shape, dtype=dst)
    x[:] = values
    np.testing.assert_array_equal(x.numpy(), want)


def test_copy_int64_extremes_to_float():
    x = np.array([2**63 - 1, -(2**63), 2**53 + 1], np.int64)
    out = np.zeros(3, np.float64)
    check(lib.ember_cpu_copy(tdesc(out, "float64"), tdesc(x, "int64")))
    np.testing.assert_array_equal(out, x.astype(np.float64))
    back = np.zeros(3, np.int64)
    check(lib.ember_cpu_copy(tdesc(back, "int64"), tdesc(out, "float64")))
    np.testing.assert_array_equal(back, [2**63 - 1, -(2**63), 2**53])  # 2**53 + 1 rounds to even


def test_copy_float64_to_bfloat16_rounds_once():
    # 1 + 2**-8 + 2**-30 lies just above the bfloat16 halfway point: rounding through float32 first
    # would land on the halfway value and round to even (down)
    x = np.array([1 + 2**-8 + 2**-30, 1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8 + 2**-30)])
    out = np.zeros(4, np.uint16)
    check(lib.ember_cpu_copy(tdesc(out, "bfloat16"), tdesc(x, "float64")))
    np.testing.assert_array_equal(bf16_decode(out), [1 + 2**-7, 1.0, 1 + 2**-6, -(1 + 2**-7)])


# ---- fill ----------------------------------------------------------------------------------------

FILL_VALUES = {
    "bool": (0, 0, 5, True), "int8": (0, 0, 300, 44), "int16": (0, 0, -7, -7), "int32": (0, 0, 2**31, -(2**31)),
    "int64": (0, 0, -(2**62), -(2**62)), "uint8": (0, 0, -1, 255), "float16": (0.1, 0, 0, 0.1),
    "bfloat16": (-3.3, 0, 0, -3.3), "float32": (1.5, 9.0, 0, 1.5), "float64": (np.pi, 0, 0, np.pi),
    "complex64": (1.5, -2.0, 0, 1.5 - 2j), "complex128": (np.e, np.inf, 0, complex(np.e, np.inf)),
}  # fmt: skip


@pytest.mark.parametrize("dt", DTYPES)
def test_fill(dt: str):
    re, im, ival, want = FILL_VALUES[dt]
    views: list[tuple[str, Callable[[np.ndarray], np.ndarray]]] = [
        ("contig", lambda v: v[:37]),
        ("transposed", lambda v: v[:35].reshape(5, 7).T),
        ("negative", lambda v: v[::-3]),
        ("0d", lambda v: v[4:5].reshape(())),
        ("empty", lambda v: v[:0]),
    ]
    for name, view in views:
        buf = np.zeros(60, STORAGE[dt])
        check(lib.ember_cpu_fill(tdesc(view(buf), dt), re, im, ival))
        touched = np.zeros(60, bool)
        view(touched)[...] = True
        expected = np.where(touched, encode(np.array(want), dt), np.zeros(1, STORAGE[dt]))
        np.testing.assert_array_equal(buf, expected, err_msg=f"fill {dt} {name}")


# ---- where ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", DTYPES)
def test_where(dt: str):
    rng = np.random.default_rng(11)
    a, b = encode(pool(dt), dt), encode(pool(dt, rng=rng), dt)
    c = rng.integers(0, 2, a.size).astype(bool)
    cases = [
        ("contig", c[:37], a[:37], b[:37]),
        ("transposed", c[:35].reshape(5, 7).T, a[:35].reshape(7, 5), b[:35].reshape(5, 7).T),
        ("b_scalar", c[:30].reshape(5, 6), a[:30].reshape(5, 6), np.broadcast_to(b[0], (5, 6))),
        ("a_scalar", c[:30].reshape(5, 6), np.broadcast_to(a[0], (5, 6)), b[:30].reshape(5, 6)),
        ("cond_row", np.broadcast_to(c[:6], (5, 6)), a[:30].reshape(5, 6), b[::-2][:30].reshape(5, 6)),
        ("0d", c[0:1].reshape(()), a[1:2].reshape(()), b[1:2].reshape(())),
        ("empty", c[:0], a[:0], b[:0]),
    ]
    for name, cc, aa, bb in cases:
        out = fresh_out(cc.shape, dt)
        check(lib.ember_cpu_where(tdesc(out, dt), tdesc(cc, "bool"), tdesc(aa, dt), tdesc(bb, dt)))
        want = np.where(cc, aa, bb)
        assert out.tobytes() == np.ascontiguousarray(want).tobytes(), name



@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("n", [37, 70001])  # one thread; split over the team
def test_where_flat(dt: str, n: int):
    """The contiguous entry point: element offsets, and each input contiguous or repeating one
    element (step 0), as relu's backward calls it."""
    rng = np.random.default_rng(12)
    a, b = encode(rng.choice(pool(dt), n + 3), dt), encode(rng.choice(pool(dt, rng=rng), n + 3), dt)
    c = rng.integers(0, 2, n + 3).astype(bool)

    def pick(x: np.ndarray, at: int, step: int) -> np.ndarray:
        return x[at:at + n] if step else np.repeat(x[at:at + 1], n)

    for c_step, a_step, b_step in [(1, 1, 1), (1, 1, 0), (1, 0, 1), (0, 1, 1), (1, 0, 0)]:
        out = np.zeros(n + 1, STORAGE[dt])
        check(lib.ember_cpu_where_flat(CODE[dt], n, ptr(out), 1, ptr(c), 2, c_step, ptr(a), 3, a_step, ptr(b), 1,
                                       b_step))
        want = np.where(pick(c, 2, c_step), pick(a, 3, a_step), pick(b, 1, b_step))
        assert out[1:].tobytes() == want.tobytes(), (c_step, a_step, b_step)
        assert out[:1].tobytes() == np.zeros(1, STORAGE[dt]).tobytes()
    assert lib.ember_cpu_where_flat(CODE[dt], n, ptr(out), 0, ptr(c), 0, 2, ptr(a), 0, 1, ptr(b), 0, 1) \
        == lib.EMBER_ERR_INVALID_ARGUMENT


# ---- status codes --------------------------------------------------------------------------------


def test_unsupported_and_invalid_arguments():
    x = np.ones(4, np.int32)
    out = np.ones(4, np.int32)
    fout = np.ones(4, np.float32)
    fx = np.ones(4, np.float32)
    bx = np.ones(4, bool)
    assert (
        lib.ember_cpu_unary(lib.EMBER_CPU_UNARY_SIN, tdesc(out, "int32"), tdesc(x, "int32"))
        == lib.EMBER_ERR_UNSUPPORTED
    )
    assert (
        lib.ember_cpu_binary(
            lib.EMBER_CPU_BINARY_LOGICAL_AND, tdesc(bx, "bool"), tdesc(fx, "float32"), tdesc(fx, "float32")
        )
        == lib.EMBER_ERR_UNSUPPORTED
    )
    assert lib.ember_cpu_unary_contig(lib.EMBER_CPU_UNARY_SIN, lib.EMBER_INT8, 4, ptr(out), 0, ptr(x), 0) == (
        lib.EMBER_ERR_UNSUPPORTED
    )
    bad = lib.EMBER_ERR_INVALID_ARGUMENT
    for op in (-1, lib.EMBER_CPU_UNARY_COUNT, 1 << 30):
        assert lib.ember_cpu_unary(op, tdesc(fout, "float32"), tdesc(fx, "float32")) == bad
        assert lib.ember_cpu_unary_contig(op, lib.EMBER_FLOAT32, 4, ptr(fout), 0, ptr(fx), 0) == bad
    for op in (-1, lib.EMBER_CPU_BINARY_COUNT):
        assert lib.ember_cpu_binary(op, tdesc(fout, "float32"), tdesc(fx, "float32"), tdesc(fx, "float32")) == bad
        assert lib.ember_cpu_binary_flat(op, lib.EMBER_FLOAT32, 4, ptr(fout), 0, ptr(fx), 0, 1, ptr(fx), 0, 1) == bad
    for step in (-1, 2):
        assert lib.ember_cpu_binary_flat(lib.EMBER_CPU_BINARY_ADD, lib.EMBER_FLOAT32, 4, ptr(fout), 0, ptr(fx), 0,
                                         step, ptr(fx), 0, 1) == bad  # fmt: skip
    for dtype in (-1, 12, 99):
        assert lib.ember_cpu_unary_contig(lib.EMBER_CPU_UNARY_NEGATIVE, dtype, 4, ptr(fout), 0, ptr(fx), 0) == bad
        add = lib.EMBER_CPU_BINARY_ADD
        assert lib.ember_cpu_binary_flat(add, dtype, 4, ptr(fout), 0, ptr(fx), 0, 1, ptr(fx), 0, 1) == bad
        t = tdesc(fx, "float32")
        t.dtype = dtype
        assert lib.ember_cpu_unary(lib.EMBER_CPU_UNARY_NEGATIVE, tdesc(fout, "float32"), t) == bad
        assert lib.ember_cpu_copy(tdesc(fout, "float32"), t) == bad
        assert lib.ember_cpu_fill(t, 0, 0, 0) == bad
    assert (
        lib.ember_cpu_unary_contig(lib.EMBER_CPU_UNARY_NEGATIVE, lib.EMBER_FLOAT32, -1, ptr(fout), 0, ptr(fx), 0) == bad
    )
    # wrong result dtype, mismatched input dtypes, shapes, ndim, where's condition dtype
    assert lib.ember_cpu_unary(lib.EMBER_CPU_UNARY_ISNAN, tdesc(fout, "float32"), tdesc(fx, "float32")) == bad
    assert (
        lib.ember_cpu_binary(lib.EMBER_CPU_BINARY_ADD, tdesc(fout, "float32"), tdesc(fx, "float32"), tdesc(x, "int32"))
        == bad
    )
    assert (
        lib.ember_cpu_binary(
            lib.EMBER_CPU_BINARY_LESS, tdesc(fout, "float32"), tdesc(fx, "float32"), tdesc(fx, "float32")
        )
        == bad
    )
    short = np.ones(3, np.float32)
    assert lib.ember_cpu_unary(lib.EMBER_CPU_UNARY_NEGATIVE, tdesc(short, "float32"), tdesc(fx, "float32")) == bad
    assert lib.ember_cpu_copy(tdesc(short, "float32"), tdesc(fx, "float32")) == bad
    deep = tdesc(fx, "float32")
    deep.ndim = 17
    assert lib.ember_cpu_unary(lib.EMBER_CPU_UNARY_NEGATIVE, deep, deep) == bad
    assert lib.ember_cpu_fill(deep, 0, 0, 0) == bad
    neg = tdesc(fx, "float32")
    neg.shape[0] = -4
    assert lib.ember_cpu_copy(neg, neg) == bad
    assert (
        lib.ember_cpu_where(tdesc(fout, "float32"), tdesc(fx, "float32"), tdesc(fx, "float32"), tdesc(fx, "float32"))
        == bad
    )
    assert (
        lib.ember_cpu_where(tdesc(fout, "float32"), tdesc(bx, "bool"), tdesc(x, "int32"), tdesc(fx, "float32")) == bad
    )
    assert lib.ember_cpu_unary(lib.EMBER_CPU_UNARY_NEGATIVE, ffi.NULL, tdesc(fx, "float32")) == bad
    nodata = tdesc(fx, "float32")
    nodata.data = ffi.NULL
    assert lib.ember_cpu_copy(tdesc(fout, "float32"), nodata) == bad
    # nothing to do: no pointer is touched
    ok = lib.EMBER_OK
    assert (
        lib.ember_cpu_unary_contig(lib.EMBER_CPU_UNARY_NEGATIVE, lib.EMBER_FLOAT32, 0, ffi.NULL, 5, ffi.NULL, 7) == ok
    )
    add, int8 = lib.EMBER_CPU_BINARY_ADD, lib.EMBER_INT8
    assert lib.ember_cpu_binary_flat(add, int8, 0, ffi.NULL, 1, ffi.NULL, 2, 1, ffi.NULL, 3, 0) == ok
    empty = tdesc(np.zeros((3, 0), np.float32), "float32")
    empty.data = ffi.NULL
    assert lib.ember_cpu_fill(empty, 1.0, 0, 0) == ok


# ---- large arrays: the threaded and streaming-store paths ------------------------------------------


def test_large_contiguous_and_streaming():
    rng = np.random.default_rng(3)
    n = 2_300_001  # > 8 MiB of float32 output: streaming stores; odd length: a tail
    a = rng.standard_normal(n + 5).astype(np.float32)
    b = rng.standard_normal(n + 5).astype(np.float32)
    out = np.zeros(n + 3, np.float32)
    check(lib.ember_cpu_binary_flat(lib.EMBER_CPU_BINARY_ADD, lib.EMBER_FLOAT32, n, ptr(out), 3, ptr(a), 1, 1,
                                    ptr(b), 5, 1))  # fmt: skip
    np.testing.assert_array_equal(out[3:], a[1 : n + 1] + b[5:])
    assert not out[:3].any()
    # 16-byte outputs, strided descriptors that are contiguous
    z = (rng.standard_normal(600_000) + 1j * rng.standard_normal(600_000)).astype(np.complex128)
    zo = np.zeros_like(z)
    code = lib.EMBER_CPU_BINARY_MULTIPLY
    check(lib.ember_cpu_binary(code, tdesc(zo, "complex128"), tdesc(z, "complex128"), tdesc(z[::-1], "complex128")))
    np.testing.assert_allclose(zo, z * z[::-1], rtol=1e-15)
    check(lib.ember_cpu_binary(code, tdesc(zo, "complex128"), tdesc(z, "complex128"), tdesc(z, "complex128")))
    np.testing.assert_allclose(zo, z * z, rtol=1e-15)
    # astype and fill through the flat path
    d = rng.standard_normal(2_500_000)
    f = np.zeros(d.size, np.float32)
    check(lib.ember_cpu_copy(tdesc(f, "float32"), tdesc(d, "float64")))
    np.testing.assert_array_equal(f, d.astype(np.float32))
    check(lib.ember_cpu_fill(tdesc(d, "float64"), 2.5, 0, 0))
    assert (d == 2.5).all()


def test_large_strided_and_broadcast():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((700, 300)).astype(np.float32)
    # rows split across threads: transposed input
    out = np.zeros((300, 700), np.float32)
    check(lib.ember_cpu_unary(lib.EMBER_CPU_UNARY_EXP, tdesc(out, "float32"), tdesc(x.T, "float32")))
    np.testing.assert_allclose(out, np.exp(x.T.astype(np.float64)), rtol=2e-6)
    # few long rows: the split falls inside rows
    y = rng.standard_normal((3, 60_001)).astype(np.float32)
    row = rng.standard_normal(60_001).astype(np.float32)
    out = np.zeros((3, 60_001), np.float32)
    check(lib.ember_cpu_binary(lib.EMBER_CPU_BINARY_SUBTRACT, tdesc(out, "float32"), tdesc(y[:, ::-1], "float32"),
                               tdesc(np.broadcast_to(row, y.shape), "float32")))  # fmt: skip
    np.testing.assert_array_equal(out, y[:, ::-1] - row)
    col = rng.standard_normal((3, 1)).astype(np.float32)
    check(lib.ember_cpu_binary(lib.EMBER_CPU_BINARY_MAXIMUM, tdesc(out, "float32"), tdesc(y, "float32"),
                               tdesc(np.broadcast_to(col, y.shape), "float32")))  # fmt: skip
    np.testing.assert_array_equal(out, np.maximum(y, col))
    cond = rng.integers(0, 2, y.shape).astype(bool)
    check(lib.ember_cpu_where(tdesc(out, "float32"), tdesc(cond, "bool"), tdesc(y[:, ::-1], "float32"),
                              tdesc(np.broadcast_to(row, y.shape), "float32")))  # fmt: skip
    np.testing.assert_array_equal(out, np.where(cond, y[:, ::-1], row))
    big = np.zeros((300, 700), np.int16)
    check(lib.ember_cpu_fill(tdesc(big.T, "int16"), 0, 0, -3))
    assert (big == -3).all()
    # > 8 MiB of output written row by row with streaming stores (rows not multiples of 64 bytes)
    m = rng.standard_normal((2200, 1001)).astype(np.float32)
    r = rng.standard_normal(1001).astype(np.float32)
    out = np.zeros((2200, 1001), np.float32)
    check(lib.ember_cpu_binary(lib.EMBER_CPU_BINARY_MULTIPLY, tdesc(out, "float32"), tdesc(m, "float32"),
                               tdesc(np.broadcast_to(r, m.shape), "float32")))  # fmt: skip
    np.testing.assert_array_equal(out, m * r)
    view = np.zeros((2200, 1040), np.float32)[:, 3:1004]  # rows start off cache-line boundaries
    check(lib.ember_cpu_unary(lib.EMBER_CPU_UNARY_NEGATIVE, tdesc(view, "float32"), tdesc(m, "float32")))
    np.testing.assert_array_equal(view, -m)


def test_float16_block_conversions():
    """float16 loops convert blocks of 256 through float32: lengths across block edges, bit-exact
    against numpy's float16 arithmetic (which also computes in float32 and rounds once)."""
    rng = np.random.default_rng(6)
    bits = np.arange(65536, dtype=np.uint16)  # every float16, NaN payloads included
    h = bits.view(np.float16)
    out = np.zeros(h.size + 1, np.float16)
    code = lib.EMBER_CPU_UNARY_NEGATIVE
    check(lib.ember_cpu_unary_contig(code, lib.EMBER_FLOAT16, h.size, ptr(out), 1, ptr(h), 0))
    finite = ~np.isnan(h)
    np.testing.assert_array_equal(out[1:][finite].view(np.uint16), (-h)[finite].view(np.uint16))
    assert np.isnan(out[1:][~finite]).all()
    f = np.zeros(h.size, np.float32)
    check(lib.ember_cpu_copy(tdesc(f, "float32"), tdesc(h, "float16")))
    np.testing.assert_array_equal(f[finite], h[finite].astype(np.float32))
    back = np.zeros(h.size, np.float16)
    check(lib.ember_cpu_copy(tdesc(back, "float16"), tdesc(f, "float32")))
    np.testing.assert_array_equal(back[finite].view(np.uint16), bits[finite])
    w = rng.standard_normal(70_001).astype(np.float32) * 1000
    back = np.zeros(w.size, np.float16)
    check(lib.ember_cpu_copy(tdesc(back, "float16"), tdesc(w, "float32")))
    np.testing.assert_array_equal(back, w.astype(np.float16))
    for n in (255, 256, 257, 1000):
        a = rng.standard_normal(n).astype(np.float16)
        b = rng.standard_normal(n).astype(np.float16)
        for name, bb in (("vector", b), ("scalar", np.broadcast_to(b[:1], (n,)))):
            got = run_binary("multiply", "float16", a, bb, "float16")
            np.testing.assert_array_equal(got, a * bb, err_msg=f"{n} {name}")
            got = run_binary("subtract", "float16", bb, a, "float16")
            np.testing.assert_array_equal(got, bb - a, err_msg=f"{n} {name}")
        got = run_unary("isfinite", "float16", a, "bool")
        assert got.all()


@pytest.mark.parametrize("dt", REAL_FLOATS)
@pytest.mark.parametrize("op", ["ceil", "floor", "trunc", "round"])
def test_rounding_is_exact(op: str, dt: str):
    """Halves, values around 2**mantissa_bits, signed zeros: bit-exact against numpy (signs too)."""
    big = {"float16": 2.0**10, "bfloat16": 2.0**7, "float32": 2.0**23, "float64": 2.0**52}[dt]
    base = [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.5, 3.5, 4.5, 1e-30, 7.0, 123.456, 1e10, 1e300, np.inf, np.nan]
    base += [big - 1.5, big - 1, big - 0.5, big, big + 1, big + 2, 2 * big - 1, 2 * big, 2.0**23 - 0.5, 2.0**52 - 0.5]
    vals = decode(encode(np.array(base + [-v for v in base]), dt), dt)
    x = encode(vals, dt)
    got = decode(run_unary(op, dt, x, dt), dt)
    with np.errstate(all="ignore"):
        want = decode(encode(UNARY_REF[op](vals), dt), dt)
    np.testing.assert_array_equal(got, want)
    assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all()

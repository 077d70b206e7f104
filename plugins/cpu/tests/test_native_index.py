"""ember_cpu_take, ember_cpu_put, ember_cpu_count_nonzero and ember_cpu_nonzero against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from native_util import check, desc, ffi, lib

BF16 = "bfloat16"  # a uint16 array of bfloat16 bits
ALL = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.float16,
    BF16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
]

rng = np.random.default_rng(7)


def code(dt):
    return lib.EMBER_BFLOAT16 if dt is BF16 else None


def from_bf16(b):
    return (np.asarray(b, np.uint16).astype(np.uint32) << 16).view(np.float32)


def make(dt, shape, zeros=0.0):
    """Random small values (exact in every dtype); a fraction `zeros` of them zero."""
    if dt is np.bool_:
        x = rng.random(shape) < 0.5
    else:
        v = rng.integers(-9, 10, size=shape).astype(np.float64) / 2
        if dt in (np.complex64, np.complex128):
            v = v + 1j * rng.integers(-9, 10, size=shape) / 2
        if dt in (np.int8, np.int16, np.int32, np.int64):
            v = np.round(v * 2)
        if dt is np.uint8:
            v = np.abs(np.round(v * 2))
        x = (np.asarray(v, np.float32).view(np.uint32) >> 16).astype(np.uint16) if dt is BF16 else v.astype(dt)
    if zeros:
        x[rng.random(shape) < zeros] = 0
    return x


def layouts(a):
    yield "contiguous", a
    yield "transposed", np.ascontiguousarray(a.T).T
    yield "flipped", np.ascontiguousarray(a[::-1, ::-1, ::-1])[::-1, ::-1, ::-1]
    big = np.zeros(tuple(2 * s for s in a.shape), a.dtype)
    big[::2, ::2, ::2] = a
    yield "strided", big[::2, ::2, ::2]


def run_take(x, idx, dt, out=None):
    out = np.zeros((x.shape[0], idx.shape[0], x.shape[2]), x.dtype) if out is None else out
    return lib.ember_cpu_take(desc(out, code(dt)), desc(x, code(dt)), desc(idx)), out


def run_put(dst, idx, vals, dt, accumulate):
    return lib.ember_cpu_put(desc(dst, code(dt)), desc(idx), desc(vals, code(dt)), accumulate)


# ---- take ------------------------------------------------------------------------------------


@pytest.mark.parametrize("inner", [5, 1])
@pytest.mark.parametrize("dt", ALL, ids=str)
def test_take(dt, inner):
    base = make(dt, (3, 11, inner))
    idx = np.array([0, 10, -1, -11, 4, 4, 7], np.int64)
    for name, x in layouts(base):
        st, out = run_take(x, idx, dt)
        check(st)
        np.testing.assert_array_equal(out, np.take(x, idx, axis=1), err_msg=name)
        # strided index and strided output
        idx2 = np.repeat(idx, 2)[::2]
        out2 = np.zeros((x.shape[0], 2 * len(idx), x.shape[2]), x.dtype)[:, ::-2, :]
        st, _ = run_take(x, idx2, dt, out2)
        check(st)
        np.testing.assert_array_equal(out2, np.take(x, idx, axis=1), err_msg=name)


def test_take_large_and_degenerate():
    x = rng.standard_normal((1, 2_000_000, 1)).astype(np.float32)
    idx = rng.integers(-2_000_000, 2_000_000, 500_000)
    st, out = run_take(x, idx, np.float32)
    check(st)
    np.testing.assert_array_equal(out, np.take(x, idx, axis=1))
    y = rng.standard_normal((2, 3, 300_000))  # few long rows: split along the inner dim
    st, out = run_take(y, np.array([2, 0, 2]), np.float64)
    check(st)
    np.testing.assert_array_equal(out, y[:, [2, 0, 2]])
    z = np.broadcast_to(np.arange(4.0)[None, :, None], (3, 4, 5))  # stride-0 source
    st, out = run_take(z, np.array([3, 1]), np.float64)
    check(st)
    np.testing.assert_array_equal(out, z[:, [3, 1]])
    st, out = run_take(np.zeros((2, 0, 3)), np.zeros(0, np.int64), np.float64)
    check(st)
    assert out.shape == (2, 0, 3)


def test_take_out_of_range_writes_nothing():
    x = rng.standard_normal((2, 5, 3))
    for bad in ([0, 1, 5], [-6, 0], [2**62, 0], [0, -(2**63)]):
        out = np.full((2, len(bad), 3), 7.0)
        st, _ = run_take(x, np.array(bad, np.int64), np.float64, out)
        assert st == lib.EMBER_ERR_INDEX
        assert np.all(out == 7.0)
    st, _ = run_take(np.zeros((2, 0, 3)), np.array([0], np.int64), np.float64)
    assert st == lib.EMBER_ERR_INDEX


def test_take_rejects_bad_descriptors():
    x = np.zeros((2, 5, 3))
    idx = np.array([0, 1], np.int64)
    assert run_take(x, idx.astype(np.int32), np.float64)[0] == lib.EMBER_ERR_INVALID_ARGUMENT
    assert run_take(x, idx, np.float64, np.zeros((2, 3, 3)))[0] == lib.EMBER_ERR_INVALID_ARGUMENT
    assert run_take(x, idx, np.float64, np.zeros((2, 2, 3), np.float32))[0] == lib.EMBER_ERR_INVALID_ARGUMENT
    assert run_take(x[0], idx, np.float64, np.zeros((5, 2)))[0] == lib.EMBER_ERR_INVALID_ARGUMENT


# ---- put -------------------------------------------------------------------------------------


def put_reference(dst, idx, vals, accumulate, dt):
    out = dst.copy()
    n = dst.shape[1]
    for j, k in enumerate(idx):  # in order: the last write wins, sums accumulate in order
        k = k + n if k < 0 else k
        if not accumulate:
            out[:, k] = vals[:, j]
        elif dt is np.bool_:
            out[:, k] |= vals[:, j]
        elif dt is BF16:
            s = from_bf16(out[:, k]) + from_bf16(vals[:, j])
            out[:, k] = (s.view(np.uint32) >> 16).astype(np.uint16)  # exact: small halves
        else:
            with np.errstate(over="ignore"):
                out[:, k] = out[:, k] + vals[:, j]
    return out


@pytest.mark.parametrize("inner", [4, 1])
@pytest.mark.parametrize("dt", ALL, ids=str)
@pytest.mark.parametrize("accumulate", [0, 1])
def test_put(dt, accumulate, inner):
    idx = np.array([1, -1, 3, 1, 0, -5, 3, 1], np.int64)  # repeats, negatives
    vals = make(dt, (3, len(idx), inner))
    base = make(dt, (3, 6, inner))
    for name, dst in layouts(base):
        want = put_reference(dst, idx, vals, accumulate, dt)
        for vname, v in layouts(vals):
            d = dst.copy() if name == "contiguous" else dst
            d[...] = base
            check(run_put(d, idx, v, dt, accumulate))
            np.testing.assert_array_equal(d, want, err_msg=f"{name} {vname}")


def test_put_integer_accumulation_wraps():
    dst = np.full((1, 2, 1), 100, np.int8)
    vals = np.full((1, 3, 1), 100, np.int8)
    check(run_put(dst, np.array([0, 0, 0]), vals, np.int8, 1))
    assert dst[0, 0, 0] == np.int8(np.int64(400).astype(np.int8)) and dst[0, 1, 0] == 100


def test_put_large():
    dst = np.zeros((1, 1000, 1), np.float64)
    idx = rng.integers(-1000, 1000, 200_000)
    vals = rng.standard_normal((1, 200_000, 1))
    check(run_put(dst, idx, vals, np.float64, 1))
    want = np.zeros(1000)
    np.add.at(want, idx, vals[0, :, 0])
    np.testing.assert_allclose(dst[0, :, 0], want, rtol=1e-9, atol=1e-9)
    wide = np.zeros((2, 5, 100_000), np.float32)
    v = rng.standard_normal((2, 3, 100_000)).astype(np.float32)
    check(run_put(wide, np.array([4, 0, 4]), v, np.float32, 0))
    np.testing.assert_array_equal(wide[:, 4], v[:, 2])
    np.testing.assert_array_equal(wide[:, 0], v[:, 1])


def test_put_out_of_range_writes_nothing():
    dst = np.zeros((2, 4, 3))
    vals = np.ones((2, 3, 3))
    for acc in (0, 1):
        assert run_put(dst, np.array([0, 4, 1]), vals, np.float64, acc) == lib.EMBER_ERR_INDEX
        assert run_put(dst, np.array([0, -5, 1]), vals, np.float64, acc) == lib.EMBER_ERR_INDEX
        assert np.all(dst == 0)
    assert run_put(dst, np.array([0, 1]), vals, np.float64, 0) == lib.EMBER_ERR_INVALID_ARGUMENT
    assert run_put(dst, np.array([0, 1, 2]), vals.astype(np.float32), np.float64, 0) == lib.EMBER_ERR_INVALID_ARGUMENT


# ---- count_nonzero / nonzero ------------------------------------------------------------------


def count(x, dt):
    c = ffi.new("int64_t *")
    check(lib.ember_cpu_count_nonzero(desc(x, code(dt)), c))
    return c[0]


def nonzero(x, dt, rows=None):
    n = count(x, dt) if rows is None else rows
    out = np.full((n, x.ndim), -1, np.int64)
    st = lib.ember_cpu_nonzero(desc(out), desc(x, code(dt)))
    return st, out


def truth(x, dt):
    if dt is BF16 or dt is np.float16:
        return (x.view(np.uint16) & 0x7FFF) != 0
    return x != 0


@pytest.mark.parametrize("dt", ALL, ids=str)
def test_count_nonzero_and_nonzero(dt):
    base = make(dt, (4, 7, 9), zeros=0.5)
    for name, x in layouts(base):
        t = truth(x, dt)
        assert count(x, dt) == np.count_nonzero(t), name
        st, out = nonzero(x, dt)
        check(st)
        np.testing.assert_array_equal(out, np.argwhere(t), err_msg=name)


def test_nonzero_special_values():
    f = np.array([0.0, -0.0, np.nan, 1e-45, -np.inf], np.float32)
    assert count(f, np.float32) == 3
    h = np.array([0x8000, 0x0000, 0x0001, 0x7E00], np.uint16)  # -0, 0, subnormal, NaN
    assert count(h.view(np.float16), np.float16) == 2
    assert count(h, BF16) == 2
    c = np.array([0j, 1j, 1 + 0j, 0j], np.complex128)
    st, out = nonzero(c, np.complex128)
    check(st)
    assert out[:, 0].tolist() == [1, 2]


def test_nonzero_zero_d_empty_and_large():
    assert count(np.array(5.0), np.float64) == 1
    st, out = nonzero(np.array(5.0), np.float64)
    check(st)
    assert out.shape == (1, 0)
    assert count(np.array(0, np.int32), np.int32) == 0
    assert count(np.zeros((3, 0)), np.float64) == 0
    st, out = nonzero(np.zeros((3, 0)), np.float64)
    check(st)
    assert out.shape == (0, 2)
    big = rng.random((300, 1001)) < 0.3  # several parts, rows split between them
    assert count(big, np.bool_) == np.count_nonzero(big)
    st, out = nonzero(big, np.bool_)
    check(st)
    np.testing.assert_array_equal(out, np.argwhere(big))
    flat = rng.random(1_000_003) < 0.01
    st, out = nonzero(flat.astype(np.float32)[::-1], np.float32)
    check(st)
    np.testing.assert_array_equal(out[:, 0], np.flatnonzero(flat[::-1]))
    bcast = np.broadcast_to(np.array([0.0, 2.0]), (50_000, 2))
    assert count(bcast, np.float64) == 50_000


def test_nonzero_rejects_wrong_count_and_shape():
    x = np.array([[0, 1], [1, 1]], np.int32)
    assert nonzero(x, np.int32, rows=2)[0] == lib.EMBER_ERR_INVALID_ARGUMENT
    out = np.zeros((3, 1), np.int64)
    assert lib.ember_cpu_nonzero(desc(out), desc(x)) == lib.EMBER_ERR_INVALID_ARGUMENT
    out = np.zeros((3, 2), np.int32)
    assert lib.ember_cpu_nonzero(desc(out), desc(x)) == lib.EMBER_ERR_INVALID_ARGUMENT
    assert lib.ember_cpu_count_nonzero(desc(x), ffi.NULL) == lib.EMBER_ERR_INVALID_ARGUMENT

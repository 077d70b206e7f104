"""ember_cpu_random against a numpy transcription of the Philox4x32-10 stream contract (the spec
at the top of csrc/random.c): bit-exact for uniform and integer draws, to the last bits of the
C library's log/sin/cos for normal draws."""

from __future__ import annotations

import numpy as np
import pytest
from native_util import check, desc, lib, num_threads

U64 = np.uint64
MASK32 = U64(0xFFFFFFFF)
PHILOX_M0, PHILOX_M1 = U64(0xD2511F53), U64(0xCD9E8D57)
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85

UNIFORM, NORMAL, INTEGERS = (
    lib.EMBER_CPU_RANDOM_UNIFORM,
    lib.EMBER_CPU_RANDOM_NORMAL,
    lib.EMBER_CPU_RANDOM_INTEGERS,
)
BF16 = "bfloat16"   # stored as uint16 bits; numpy has no bfloat16


# ---- the reference ---------------------------------------------------------------------------


def philox(seed: int, offset: int, nblocks: int) -> np.ndarray:
    """Words (nblocks, 4) of blocks offset .. offset + nblocks - 1 of the stream keyed by seed."""
    j = np.arange(nblocks, dtype=U64)
    with np.errstate(over="ignore"):
        low = U64(offset) + j                       # wraps mod 2^64, like the counter's low half
    c = [low & MASK32, low >> U64(32), (low < U64(offset)).astype(U64), np.zeros(nblocks, U64)]
    k0, k1 = seed & 0xFFFFFFFF, seed >> 32
    for _ in range(10):
        p0, p1 = PHILOX_M0 * c[0], PHILOX_M1 * c[2]   # 32 x 32 -> 64 bits: never overflows
        c = [(p1 >> U64(32)) ^ c[1] ^ U64(k0), p1 & MASK32, (p0 >> U64(32)) ^ c[3] ^ U64(k1), p0 & MASK32]
        k0, k1 = (k0 + PHILOX_W0) & 0xFFFFFFFF, (k1 + PHILOX_W1) & 0xFFFFFFFF
    return np.stack(c, axis=1)


def words_per_element(n: int, per_block: int, seed: int, offset: int) -> np.ndarray:
    """per_block == 4: one word per element (n,); per_block == 2: two words per element (n, 2)."""
    w = philox(seed, offset, -(-n // per_block))
    return w.reshape(-1)[:n] if per_block == 4 else w.reshape(-1, 2)[:n]


def u53(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return ((x >> U64(5)).astype(np.float64) * 67108864.0 + (y >> U64(6)).astype(np.float64)) / 9007199254740992.0


def f32_to_bf16_bits(v: np.ndarray) -> np.ndarray:
    bits = v.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> U64(16)) & U64(1))) >> U64(16)).astype(np.uint16)


def ref_uniform(dtype, n, seed, offset, a, b) -> np.ndarray:
    if dtype == np.float64:
        w = words_per_element(n, 2, seed, offset)
        return a + (b - a) * u53(w[:, 0], w[:, 1])
    p = {np.float16: 11, BF16: 8, np.float32: 24}[dtype]
    w = words_per_element(n, 4, seed, offset)
    u = (w >> U64(32 - p)).astype(np.float32) * np.float32(2.0**-p)
    lo = np.float32(a)
    v = lo + (np.float32(b) - lo) * u               # float32 throughout, no fused multiply-add
    return f32_to_bf16_bits(v) if dtype == BF16 else v.astype(dtype)


def ref_normal(n, seed, offset, mean, std) -> np.ndarray:
    """float64 values before the final rounding to the output dtype."""
    w = philox(seed, offset, -(-n // 2))
    r = np.sqrt(-2.0 * np.log(1.0 - u53(w[:, 0], w[:, 1])))
    t = 6.283185307179586 * u53(w[:, 2], w[:, 3])
    sr = std * r
    return np.stack([mean + sr * np.cos(t), mean + sr * np.sin(t)], axis=1).reshape(-1)[:n]


def ref_integers(dtype, n, seed, offset, low, high) -> np.ndarray:
    w = words_per_element(n, 2, seed, offset)
    v = (w[:, 0] << U64(32)) | w[:, 1]
    r = v % U64((high - low) % 2**64)
    with np.errstate(over="ignore"):
        vals = U64(low % 2**64) + r                 # two's complement: wraps to the right bits
    return vals.astype(np.dtype(dtype).str.replace("i", "u").replace("b", "u")).view(dtype)


# ---- calling the kernel ----------------------------------------------------------------------


def draw(kind, shape, dtype, seed, offset, a=0.0, b=1.0, low=0, high=2) -> np.ndarray:
    if dtype == BF16:
        out = np.empty(shape, np.uint16)
        t = desc(out, lib.EMBER_BFLOAT16)
    else:
        out = np.empty(shape, dtype)
        t = desc(out)
    check(lib.ember_cpu_random(kind, t, seed, offset, a, b, low, high))
    return out


SEED = 0x1234_5678_9ABC_DEF0


# ---- tests -----------------------------------------------------------------------------------


def test_known_answer():
    assert philox(0, 0, 1)[0].tolist() == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    # through the kernel: the full int64 range is 2^64 - 1 wide, so (w0 << 32 | w1) comes back
    v = draw(INTEGERS, (2,), np.int64, 0, 0, low=-(2**63), high=2**63 - 1).astype(object) + 2**63
    words = [v[0] >> 32, v[0] & 0xFFFFFFFF, v[1] >> 32, v[1] & 0xFFFFFFFF]
    assert words == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 3, 257, 100_003])
def test_uniform_matches_reference(dtype, n):
    got = draw(UNIFORM, (n,), dtype, SEED, 77, a=-2.5, b=3.0)
    np.testing.assert_array_equal(got, ref_uniform(dtype, n, SEED, 77, -2.5, 3.0))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.int64, np.bool_])
def test_integers_match_reference_and_stay_in_bounds(dtype):
    if dtype == np.bool_:
        low, high = 0, 2
    else:
        info = np.iinfo(dtype)
        low, high = int(info.min), int(info.max)   # the widest range [min, max)
    n = 70_001
    got = draw(INTEGERS, (n,), dtype, SEED, 5, low=low, high=high)
    np.testing.assert_array_equal(got, ref_integers(dtype, n, SEED, 5, low, high))
    assert got.min() >= low and int(got.max()) < high
    small = draw(INTEGERS, (n,), dtype, SEED, 5, low=0, high=2 if dtype == np.bool_ else 7)
    np.testing.assert_array_equal(small, ref_integers(dtype, n, SEED, 5, 0, 2 if dtype == np.bool_ else 7))
    assert small.min() == 0 and small.max() == (1 if dtype == np.bool_ else 6)


def test_integers_power_of_two_and_odd_ranges():
    for low, high in [(-8, 8), (-1000, 1001), (3, 4), (-(2**40), 2**40 + 12345)]:
        got = draw(INTEGERS, (5001,), np.int64, 99, 2**40, low=low, high=high)
        np.testing.assert_array_equal(got, ref_integers(np.int64, 5001, 99, 2**40, low, high))


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32, np.float64])
def test_normal_matches_reference(dtype):
    n = 50_001
    got = draw(NORMAL, (n,), dtype, SEED, 3, a=1.5, b=2.0)
    ref = ref_normal(n, SEED, 3, 1.5, 2.0)
    if dtype == np.float64:
        np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-13)
    elif dtype == np.float32:
        np.testing.assert_allclose(got, ref.astype(np.float32), rtol=2e-7, atol=1e-7)
    elif dtype == np.float16:
        # rounded once from double; a libm last-bit difference may flip a rounding
        mismatch = got != ref.astype(np.float16)
        assert mismatch.mean() < 1e-3
        np.testing.assert_allclose(got.astype(np.float64), ref, rtol=1e-3, atol=1e-3)
    else:
        want = f32_to_bf16_bits(ref.astype(np.float32))
        assert (got != want).mean() < 1e-3


def test_same_bits_for_any_thread_count():
    n = 300_007          # above the parallel grain, not a multiple of any chunk
    cases = [
        (UNIFORM, np.float32, {}),
        (UNIFORM, np.float64, {}),
        (UNIFORM, np.float16, {}),
        (NORMAL, np.float32, {}),
        (INTEGERS, np.int32, {"low": -5, "high": 1000}),
    ]
    for kind, dtype, kw in cases:
        results = []
        for t in (1, 2, 3, 16):
            with num_threads(t):
                results.append(draw(kind, (n,), dtype, SEED, 11, **kw))
        for r in results[1:]:
            assert r.tobytes() == results[0].tobytes(), (kind, dtype)


@pytest.mark.parametrize(
    "kind,dtype,per_block", [(UNIFORM, np.float32, 4), (UNIFORM, np.float64, 2), (NORMAL, np.float64, 2),
                             (INTEGERS, np.int64, 2), (UNIFORM, np.float16, 4)]
)
def test_offset_continuation(kind, dtype, per_block):
    """A draw at offset o + k equals the tail of a draw at offset o from element k * per_block."""
    kw = {"low": -3, "high": 2**35} if kind == INTEGERS else {}
    whole = draw(kind, (100_000,), dtype, SEED, 1000, **kw)
    for skip in (1, 17, 4096):
        tail = draw(kind, (100_000 - skip * per_block,), dtype, SEED, 1000 + skip, **kw)
        assert tail.tobytes() == whole[skip * per_block:].tobytes()


def test_counter_carries_into_word_two():
    """Blocks past 2^64 - 1 set word 2 of the counter to 1 (and differ from offset 0)."""
    offset = 2**64 - 3
    got = draw(UNIFORM, (40,), np.float32, SEED, offset)
    np.testing.assert_array_equal(got, ref_uniform(np.float32, 40, SEED, offset, 0.0, 1.0))
    assert not np.array_equal(got[12:], draw(UNIFORM, (28,), np.float32, SEED, 0))


def test_seeds_and_offsets_give_different_streams():
    a = draw(UNIFORM, (64,), np.float32, 1, 0)
    assert not np.array_equal(a, draw(UNIFORM, (64,), np.float32, 2, 0))
    assert not np.array_equal(a, draw(UNIFORM, (64,), np.float32, 1 + 2**32, 0))   # high key word
    assert not np.array_equal(a, draw(UNIFORM, (64,), np.float32, 1, 16))


def test_moments():
    n = 1_000_000
    u = draw(UNIFORM, (n,), np.float32, 7, 0, a=-1.0, b=3.0).astype(np.float64)
    assert u.min() >= -1.0 and u.max() < 3.0
    se = 4.0 / np.sqrt(12 * n)
    assert abs(u.mean() - 1.0) < 5 * se
    assert abs(u.var() - 16 / 12) < 5 * 16 / 12 * np.sqrt(0.8 / n)   # var of U^2 terms: 4/5 s^4
    u64 = draw(UNIFORM, (n,), np.float64, 8, 0)
    assert 0.0 <= u64.min() and u64.max() < 1.0 and abs(u64.mean() - 0.5) < 5 / np.sqrt(12 * n)
    z = draw(NORMAL, (n,), np.float64, 9, 0, a=2.0, b=0.5)
    assert abs(z.mean() - 2.0) < 5 * 0.5 / np.sqrt(n)
    assert abs(z.std() - 0.5) < 5 * 0.5 / np.sqrt(2 * n)
    k = draw(INTEGERS, (n,), np.int64, 10, 0, low=-3, high=7)
    counts = np.bincount(k + 3, minlength=10)
    assert counts.min() > n / 10 - 5 * np.sqrt(n / 10)


def test_multidimensional_and_empty_outputs():
    got = draw(UNIFORM, (3, 5, 7), np.float32, SEED, 0)
    np.testing.assert_array_equal(got.reshape(-1), ref_uniform(np.float32, 105, SEED, 0, 0.0, 1.0))
    assert draw(UNIFORM, (0, 4), np.float32, SEED, 0).shape == (0, 4)
    scalar = draw(NORMAL, (), np.float64, SEED, 0)
    assert scalar.shape == ()


def test_rejects_bad_calls():
    base = np.empty((4, 4), np.float32)
    strided = base[:, ::2]
    assert lib.ember_cpu_random(UNIFORM, desc(strided), 0, 0, 0.0, 1.0, 0, 0) == lib.EMBER_ERR_INVALID_ARGUMENT
    ints = np.empty(4, np.int32)
    assert lib.ember_cpu_random(UNIFORM, desc(ints), 0, 0, 0.0, 1.0, 0, 0) == lib.EMBER_ERR_UNSUPPORTED
    assert lib.ember_cpu_random(INTEGERS, desc(base), 0, 0, 0.0, 1.0, 0, 5) == lib.EMBER_ERR_UNSUPPORTED
    assert lib.ember_cpu_random(INTEGERS, desc(ints), 0, 0, 0.0, 0.0, 5, 5) == lib.EMBER_ERR_INVALID_ARGUMENT
    cplx = np.empty(4, np.complex64)
    assert lib.ember_cpu_random(NORMAL, desc(cplx), 0, 0, 0.0, 1.0, 0, 0) == lib.EMBER_ERR_UNSUPPORTED
    assert lib.ember_cpu_random(7, desc(base), 0, 0, 0.0, 1.0, 0, 0) == lib.EMBER_ERR_INVALID_ARGUMENT

"""ember-gpu's pooling kernels (csrc/eg_pool.h) on the host: max_pool2d, max_pool2d_grad, max_pool2d_select,
avg_pool2d, avg_pool2d_grad and adaptive_avg_pool2d in every dtype they are built for, against a numpy
float64 reference written from the op's definition (windows over a padded input, PyTorch's output sizes
and divisors, the first-maximal-element rule), and against ember-cpu: its own kernels' bits in float32 /
float64, the composites it runs for float16 / bfloat16 (selections exact, sums within their per-tap
rounding).  Hypothesis draws the shapes, kernel / stride / padding / dilation, ceil_mode and
count_include_pad, and inputs with ties, NaN, infinities and signed zeros.

Tolerances against the reference: the maxima and select are exact (they pick an element); the averages and
gradients are sums, allowed a relative error of TOLERANCE[dtype] of the same sum over absolute values (the
half types compute in float32 and round once: half an ulp, plus float32's own rounding)."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pytest
from ember_gpu import gen_nn
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from test_kernels_host import (
    HOST_DIR,
    NUMPY,
    HostKernels,
    _bf16_bits,
    comparable,
    ember_cpu_only,  # noqa: F401 (autouse: the reference is ember-cpu alone)
    to_ember,
)

import ember_core as em
from ember_core.errors import ShapeError
from ember_core.ops.nn_composites import pool_geometry

DTYPES = [d.name for d in gen_nn.registry_dtypes(gen_nn.POOL_OPS)]
GRID = 3  # small: the grid-stride loops go round several times
THREAD, BLOCK = 0, 1  # EG_POOL_* (abi.h): adaptive_avg_pool2d's launch modes
TOLERANCE = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-18, "float64": 2.0**-46}
SPECIALS = (math.nan, math.inf, -math.inf, -0.0, 0.0)
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


class Case(NamedTuple):
    """One drawn call: the dtype, x's shape, the window and the pooled size."""

    dtype: str
    shape: tuple[int, int, int, int]
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    ceil_mode: bool
    count_include_pad: bool
    out_hw: tuple[int, int]
    seed: int
    ties: bool  # integer values: many equal maxima
    specials: float  # the fraction of NaN / inf / signed zeros

    @property
    def pooled(self) -> tuple[int, int, int, int]:
        return (*self.shape[:2], *self.out_hw)


@pytest.fixture(scope="module")
def host() -> HostKernels:
    return HostKernels(HOST_DIR)


def test_every_pool_op_is_built_for_the_float_dtypes() -> None:
    assert DTYPES == ["float16", "bfloat16", "float32", "float64"]
    assert gen_nn.sources()["pool"].kernels == [f"eg_pool_{op}_{d}" for d in DTYPES for op in gen_nn.POOL_OPS]


# ---- drawing calls ----------------------------------------------------------------------------------


@st.composite
def cases(draw: st.DrawFn, dilated: bool, adaptive: bool = False) -> Case:
    dtype = draw(st.sampled_from(DTYPES))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 9)), draw(st.integers(1, 9)))
    seed, ties, specials = draw(st.integers(0, 2**32 - 1)), draw(st.booleans()), draw(st.sampled_from((0, 0.1, 0.4)))
    if adaptive:
        out_hw = (draw(st.integers(1, shape[2] + 2)), draw(st.integers(1, shape[3] + 2)))
        return Case(dtype, shape, (1, 1), (1, 1), (0, 0), (1, 1), False, False, out_hw, seed, ties, specials)
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = (draw(st.integers(0, kernel[0] // 2)), draw(st.integers(0, kernel[1] // 2)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) if dilated else (1, 1)
    ceil_mode, count_include_pad = draw(st.booleans()), draw(st.booleans())
    try:
        g = pool_geometry("test", shape, kernel, stride, padding, dilation, ceil_mode)
    except (ShapeError, ValueError):
        reject()
    return Case(dtype, shape, kernel, stride, padding, dilation, ceil_mode, count_include_pad, g.out_hw, seed, ties,
                specials)


def draw_values(case: Case, shape: tuple[int, ...], salt: int, specials: bool = True) -> np.ndarray:
    """float64 values the dtype holds exactly (rounded through it), specials sprinkled in."""
    rng = np.random.default_rng(case.seed + salt)
    v = np.round(rng.normal(0, 2, shape)) if case.ties else rng.normal(0, 3, shape)
    if specials and case.specials:
        v = np.where(rng.random(shape) < case.specials, rng.choice(SPECIALS, shape), v)
    return comparable(stored(v, case.dtype), case.dtype).astype(np.float64)


def stored(values: np.ndarray, dtype: str) -> np.ndarray:
    """values in the dtype's storage form (bfloat16 as its bits)."""
    return _bf16_bits(values) if dtype == "bfloat16" else np.ascontiguousarray(values, NUMPY[dtype])


# ---- running a kernel -------------------------------------------------------------------------------


def run(host: HostKernels, op: str, case: Case, x: np.ndarray, ref: np.ndarray | None = None,
        mode: int = THREAD) -> np.ndarray:
    """eg_pool_<op> on stored copies of x (and ref), in the launch mode (adaptive: a block per output
    with BLOCK); the result as float64 values."""
    grad = op.endswith("_grad")
    out = stored(np.full(case.shape if grad else case.pooled, np.nan), case.dtype)  # every element must be written
    keep = [stored(x, case.dtype)] + ([] if ref is None else [stored(ref, case.dtype)])
    args = host.ffi.new("eg_pool_args *")
    args.out, args.x = host.pointer(out), host.pointer(keep[0])
    args.ref = host.ffi.NULL if ref is None else host.pointer(keep[1])
    n, c, args.h, args.w = case.shape
    args.planes, (args.oh, args.ow) = n * c, case.out_hw
    (args.kh, args.kw), (args.sh, args.sw) = case.kernel, case.stride
    (args.ph, args.pw), (args.dh, args.dw) = case.padding, case.dilation
    args.count_include_pad, args.mode = int(case.count_include_pad), mode
    host.launch(f"eg_pool_{op}_{case.dtype}", args, GRID, 256 if mode == BLOCK else 64)
    return comparable(out, case.dtype).astype(np.float64)


# ---- the float64 reference --------------------------------------------------------------------------


def taps(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """(OH, OW, kh*kw): each window tap's flat input position (iy * W + ix), and whether it is inside."""
    (h, w), (oh, ow) = case.shape[2:], case.out_hw
    axes = []
    for n_in, n_out, k, s, p, d in zip((h, w), (oh, ow), case.kernel, case.stride, case.padding, case.dilation):
        at = np.arange(n_out)[:, None] * s - p + np.arange(k)[None, :] * d  # (n_out, k)
        axes.append((at, (at >= 0) & (at < n_in)))
    (iy, in_y), (ix, in_x) = axes
    position = iy[:, None, :, None] * w + ix[None, :, None, :]
    inside = in_y[:, None, :, None] & in_x[None, :, None, :]
    shape = (oh, ow, case.kernel[0] * case.kernel[1])
    return position.reshape(shape), inside.reshape(shape)


def window_values(case: Case, x: np.ndarray, fill: float) -> np.ndarray:
    """(N, C, OH, OW, taps): x at every window tap, fill at padding."""
    position, inside = taps(case)
    planes = x.reshape(*case.shape[:2], -1)
    return np.where(inside, planes[:, :, np.where(inside, position, 0)], fill)


def argmax_positions(case: Case, x: np.ndarray) -> np.ndarray:
    """(N, C, OH, OW): the flat input position of each window's first maximal tap (tap 0 whatever it
    holds, then a tap strictly greater than all before it), -1 when that tap is padding."""
    values = window_values(case, x, -math.inf)
    best, at = values[..., 0], np.zeros(values.shape[:-1], np.int64)
    for k in range(1, values.shape[-1]):
        better = values[..., k] > best
        best, at = np.where(better, values[..., k], best), np.where(better, k, at)
    position, inside = taps(case)
    rows, cols = np.indices(case.out_hw)
    return np.where(inside[rows, cols, at], position[rows, cols, at], -1)


def divisors(case: Case) -> np.ndarray:
    """(OH, OW): PyTorch's avg_pool2d divisors."""
    spans = []
    for n_in, n_out, k, s, p in zip(case.shape[2:], case.out_hw, case.kernel, case.stride, case.padding):
        start = np.arange(n_out) * s - p
        end = np.minimum(start + k, n_in + p)
        spans.append(end - start if case.count_include_pad else np.minimum(end, n_in) - np.maximum(start, 0))
    return np.outer(*spans).astype(np.float64)


def scatter(case: Case, positions: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """x-shaped sums of shares (N, C, ...) added at positions (-1: nowhere)."""
    planes = case.shape[0] * case.shape[1]
    out = np.zeros((planes, case.shape[2] * case.shape[3]))
    positions, shares = positions.reshape(planes, -1), np.broadcast_to(shares, positions.shape).reshape(planes, -1)
    plane = np.broadcast_to(np.arange(planes)[:, None], positions.shape)
    keep = positions >= 0
    np.add.at(out, (plane[keep], positions[keep]), shares[keep])
    return out.reshape(case.shape)


def avg_reference(case: Case, x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return window_values(case, x, 0.0).sum(axis=-1) / divisors(case)


def avg_grad_reference(case: Case, g: np.ndarray) -> np.ndarray:
    position, inside = taps(case)
    planes = case.shape[0] * case.shape[1]
    positions = np.broadcast_to(np.where(inside, position, -1), (planes, *position.shape))
    shares = np.broadcast_to((g / divisors(case)).reshape(planes, *case.out_hw, 1), positions.shape)
    with np.errstate(invalid="ignore"):
        return scatter(case, positions, shares)


def adaptive_reference(case: Case, x: np.ndarray) -> np.ndarray:
    (h, w), (oh, ow) = case.shape[2:], case.out_hw
    out = np.empty(case.pooled)
    for i in range(oh):
        for j in range(ow):
            rows = slice(i * h // oh, -(-(i + 1) * h // oh))
            cols = slice(j * w // ow, -(-(j + 1) * w // ow))
            with np.errstate(invalid="ignore"):
                out[:, :, i, j] = x[:, :, rows, cols].mean(axis=(2, 3))
    return out


# ---- comparing --------------------------------------------------------------------------------------


def assert_exact(got: np.ndarray, want: np.ndarray, what: str) -> None:
    ok = (got == want) | (np.isnan(got) & np.isnan(want))
    assert ok.all(), f"{what}: {got[~ok][:5]} != reference {want[~ok][:5]}"


def assert_close(got: np.ndarray, want: np.ndarray, magnitude: np.ndarray, dtype: str, what: str) -> None:
    """got within TOLERANCE[dtype] * magnitude of want (the same sum over absolute values), or one
    subnormal step; infinities and NaN where want has them."""
    step = float(np.finfo(np.float32 if dtype == "bfloat16" else NUMPY[dtype]).smallest_subnormal)
    with np.errstate(invalid="ignore"):
        near = np.isfinite(want) & (np.abs(got - want) <= TOLERANCE[dtype] * magnitude + step)
    ok = near | (got == want) | (np.isnan(got) & np.isnan(want))
    assert ok.all(), f"{what}: {got[~ok][:5]} != reference {want[~ok][:5]}"


def assert_same_bits(got: np.ndarray, want: em.Tensor, what: str) -> None:
    """got equals ember-cpu's result to the bit (zeros' signs too; NaN equals NaN)."""
    w = want.numpy().astype(np.float64)
    ok = ((got == w) & (np.signbit(got) == np.signbit(w))) | (np.isnan(got) & np.isnan(w))
    assert ok.all(), f"{what}: {got[~ok][:5]} != ember-cpu {w[~ok][:5]}"


def assert_like_ember_cpu(got: np.ndarray, want: em.Tensor, case: Case, magnitude: np.ndarray | None,
                          what: str) -> None:
    """float32 / float64: ember-cpu's kernels' bits.  The half types, where ember-cpu runs the
    composites: the same values for a selection (magnitude None), else within the composite's
    rounding at every tap (kernel-area half ulps of the magnitude) and the kernel's one."""
    if case.dtype in ("float32", "float64"):
        assert_same_bits(got, want, what)
        return
    w = want.astype(em.float32).numpy().astype(np.float64)
    if magnitude is None:
        assert_exact(got, w, what + " (the composite)")
        return
    area = case.kernel[0] * case.kernel[1]
    with np.errstate(invalid="ignore"):
        near = np.abs(got - w) <= (area + 1) * TOLERANCE[case.dtype] * magnitude
    ok = near | (got == w) | (np.isnan(got) & np.isnan(w))
    assert ok.all(), f"{what}: {got[~ok][:5]} != the composite's {w[~ok][:5]}"


def ember(x: np.ndarray, dtype: str) -> em.Tensor:
    return to_ember(stored(x, dtype), dtype)


def max_kwargs(case: Case) -> dict:
    return {"kernel_size": case.kernel, "stride": case.stride, "padding": case.padding, "dilation": case.dilation,
            "ceil_mode": case.ceil_mode}


def avg_kwargs(case: Case) -> dict:
    return {"kernel_size": case.kernel, "stride": case.stride, "padding": case.padding, "ceil_mode": case.ceil_mode,
            "count_include_pad": case.count_include_pad}


# ---- the ops ----------------------------------------------------------------------------------------


@SETTINGS
@given(case=cases(dilated=True))
def test_max_pool2d_and_select(host: HostKernels, case: Case) -> None:
    """The maximum (NaN propagates) and select (values at the first maximum, 0 for none) are exact;
    both agree with ember-cpu (select with the composite) to the bit."""
    x = draw_values(case, case.shape, 0)
    got = run(host, "max_pool2d", case, x)
    with np.errstate(invalid="ignore"):
        assert_exact(got, window_values(case, x, -math.inf).max(axis=-1), f"max_pool2d {case}")
    values = draw_values(case, case.shape, 1)
    picked = run(host, "max_pool2d_select", case, values, x)
    at = argmax_positions(case, x)
    planes = values.reshape(*case.shape[:2], -1)
    want = np.where(at >= 0, np.take_along_axis(planes, np.maximum(at, 0).reshape(*case.shape[:2], -1), 2)
                    .reshape(at.shape), 0.0)
    assert_exact(picked, want, f"max_pool2d_select {case}")
    cpu = em.max_pool2d(ember(x, case.dtype), **max_kwargs(case))
    assert_like_ember_cpu(got, cpu, case, None, f"max_pool2d {case}")
    cpu = em.max_pool2d_select(ember(values, case.dtype), ember(x, case.dtype), **max_kwargs(case))
    assert_like_ember_cpu(picked, cpu, case, None, f"max_pool2d_select {case}")


@SETTINGS
@given(case=cases(dilated=True))
def test_max_pool2d_grad(host: HostKernels, case: Case) -> None:
    """Each window's gradient at its first maximum (nowhere when that is padding), gathered per input
    element; float32 / float64: ember-cpu's bits (its order of the sums, -0 copied where windows
    do not overlap)."""
    x = draw_values(case, case.shape, 0)
    g = draw_values(case, case.pooled, 2, specials=False)
    got = run(host, "max_pool2d_grad", case, g, x)
    at = argmax_positions(case, x)
    magnitude = scatter(case, at, np.abs(g))
    assert_close(got, scatter(case, at, g), magnitude, case.dtype, f"max_pool2d_grad {case}")
    cpu = em.max_pool2d_grad(ember(g, case.dtype), ember(x, case.dtype), **max_kwargs(case))
    assert_like_ember_cpu(got, cpu, case, magnitude, f"max_pool2d_grad {case}")


@SETTINGS
@given(case=cases(dilated=False))
def test_avg_pool2d_and_grad(host: HostKernels, case: Case) -> None:
    """PyTorch's divisors (count_include_pad, ceil_mode windows clipped); float32 / float64:
    ember-cpu's bits."""
    x = draw_values(case, case.shape, 0)
    got = run(host, "avg_pool2d", case, x)
    magnitude = avg_reference(case, np.abs(x))
    assert_close(got, avg_reference(case, x), magnitude, case.dtype, f"avg_pool2d {case}")
    cpu = em.avg_pool2d(ember(x, case.dtype), **avg_kwargs(case))
    assert_like_ember_cpu(got, cpu, case, magnitude, f"avg_pool2d {case}")
    g = draw_values(case, case.pooled, 2, specials=False)
    grad = run(host, "avg_pool2d_grad", case, g)
    magnitude = avg_grad_reference(case, np.abs(g))
    assert_close(grad, avg_grad_reference(case, g), magnitude, case.dtype, f"avg_pool2d_grad {case}")
    cpu = em.avg_pool2d_grad(ember(g, case.dtype), input_shape=case.shape, **avg_kwargs(case))
    assert_like_ember_cpu(grad, cpu, case, magnitude, f"avg_pool2d_grad {case}")


@SETTINGS
@given(case=cases(dilated=False, adaptive=True))
def test_adaptive_avg_pool2d(host: HostKernels, case: Case) -> None:
    """The mean over PyTorch's adaptive windows (output larger than the input included) in both
    launch modes (a thread, a block per output); NaN and infinities stay in their own windows."""
    x = draw_values(case, case.shape, 0)
    want, magnitude = adaptive_reference(case, x), adaptive_reference(case, np.abs(x))
    for mode in (THREAD, BLOCK):
        got = run(host, "adaptive_avg_pool2d", case, x, mode=mode)
        assert_close(got, want, magnitude, case.dtype, f"adaptive_avg_pool2d {case} mode {mode}")


def test_adaptive_avg_pool2d_of_windows_longer_than_a_block(host: HostKernels) -> None:
    """Global and uneven windows of hundreds of values, a block per output (threads taking several
    values each), against the float64 mean."""
    for dtype in DTYPES:
        for shape, out_hw in (((2, 3, 23, 29), (1, 1)), ((1, 2, 40, 17), (3, 2))):
            case = Case(dtype, shape, (1, 1), (1, 1), (0, 0), (1, 1), False, False, out_hw, 7, False, 0.01)
            x = draw_values(case, shape, 0)
            got = run(host, "adaptive_avg_pool2d", case, x, mode=BLOCK)
            assert_close(got, adaptive_reference(case, x), adaptive_reference(case, np.abs(x)), dtype,
                         f"adaptive_avg_pool2d {case}")


def test_select_and_grad_skip_a_window_whose_maximum_is_padding(host: HostKernels) -> None:
    """A window whose tap 0 is padding and whose input taps are all -inf has no maximum: select
    gives 0 there and no input element gets its gradient (as ember-cpu and the composites)."""
    case = Case("float32", (1, 1, 1, 3), (1, 3), (1, 2), (0, 1), (1, 1), False, False, (1, 2), 0, False, 0)
    x = np.array([-math.inf, -math.inf, 5.0]).reshape(case.shape)
    assert run(host, "max_pool2d_select", case, np.array([1.0, 2.0, 3.0]).reshape(case.shape), x).ravel().tolist() \
        == [0.0, 3.0]
    grad = run(host, "max_pool2d_grad", case, np.array([10.0, 20.0]).reshape(case.pooled), x)
    assert grad.ravel().tolist() == [0.0, 0.0, 20.0]
    cpu = em.max_pool2d_grad(em.asarray(np.array([10.0, 20.0], np.float32).reshape(case.pooled)),
                             em.asarray(x.astype(np.float32)), **max_kwargs(case))
    assert_same_bits(grad, cpu, "max_pool2d_grad, a padded maximum")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_single_share_keeps_its_sign(host: HostKernels, dtype: str) -> None:
    """Where windows do not overlap, an element's one share is copied (a -0 gradient stays -0, as
    ember-cpu writes it); where they overlap, shares are added to +0."""
    for stride, want_sign in ((2, True), (1, False)):
        case = Case(dtype, (1, 2, 4, 4), (2, 2), (stride, stride), (0, 0), (1, 1), False, True,
                    (2, 2) if stride == 2 else (3, 3), 0, False, 0)
        x = np.arange(32, dtype=np.float64).reshape(case.shape)
        g = np.full(case.pooled, -0.0)
        for op, ref in (("max_pool2d_grad", x), ("avg_pool2d_grad", None)):
            grad = run(host, op, case, g, ref)
            touched = grad if op == "avg_pool2d_grad" else grad.reshape(2, 4, 4)[:, 1::2, 1::2]  # the maxima
            assert (touched == 0).all() and (np.signbit(touched) == want_sign).all(), f"{op} stride {stride}"
            kw = {"kernel_size": case.kernel, "stride": case.stride, "ceil_mode": False}
            cpu = (em.max_pool2d_grad(ember(g, dtype), ember(x, dtype), **kw) if ref is not None
                   else em.avg_pool2d_grad(ember(g, dtype), input_shape=case.shape, **kw))
            assert_same_bits(grad, cpu, f"{op} stride {stride}")

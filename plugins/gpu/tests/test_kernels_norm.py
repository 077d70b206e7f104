"""ember-gpu's norm gradient kernels (csrc/eg_norm.h, eg_normgrad_<rows|channels|bninput>_<dtype>) on
the host, against a numpy float64 reference computed from the very values the kernels read, in every
launch mode: layer / group norm's x-gradient (a thread per row and a block per row, with and
without weight) and its saved row statistics; the per-channel sums (a block per channel; a thread
per (channel, part) with one part and with several, then the parts in order) for the weight and
bias gradients and batch_norm_backward_reduce; batch_norm_input_grad (both row modes); an offset
mean (the centred second pass keeps the variance); hypothesis over shapes, groups and modes.

Tolerance (assert_close of test_kernels_nn): 2 epsilons of float16 / bfloat16 (they compute in
float32 and round once), 16 of float32 / float64, each relative to |reference| plus the magnitude
its rounding errors scale with (the terms of a sum, or of the x-gradient's cancelling difference)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_kernels_host import HOST_DIR, HostKernels, comparable
from test_kernels_nn import DTYPES, assert_close, stored

BLOCK = 256
THREAD_MODE, BLOCK_MODE, PARTS, FINISH = 0, 1, 2, 3
EPS = 1e-5


@pytest.fixture(scope="module")
def host() -> HostKernels:
    return HostKernels(HOST_DIR)


def values(a: np.ndarray | None, dtype: str) -> np.ndarray | None:
    return None if a is None else comparable(a, dtype).astype(np.float64)


class Call:
    """One eg_normgrad_args, the arrays it points at kept alive."""

    def __init__(self, host: HostKernels, dtype: str, x: np.ndarray, g: np.ndarray, groups: int = 1, **arrays) -> None:
        self.host, self.dtype, self.keep = host, dtype, [x, g]
        args = self.args = host.ffi.new("eg_normgrad_args *")
        args.x, args.grad = host.pointer(x), host.pointer(g)
        args.n, args.c, args.s = x.shape
        args.groups, args.parts, args.eps = groups, 1, EPS
        for name, array in arrays.items():
            self.set(name, array)

    def set(self, name: str, array: np.ndarray | None) -> None:
        self.keep.append(array)
        pointer = self.host.pointer(array) if array is not None else self.host.ffi.NULL
        setattr(self.args, name, self.host.ffi.cast("double *", pointer) if name in ("row_stats", "partials")
                else pointer)

    def launch(self, kernel: str, mode: int, grid: int = 3) -> None:
        self.args.mode = mode
        block = BLOCK if mode in (BLOCK_MODE,) else 64
        self.host.launch(f"eg_normgrad_{kernel}_{self.dtype}", self.args, grid, block)


def row_reference(x: np.ndarray, g: np.ndarray, w: np.ndarray, groups: int) -> dict[str, np.ndarray]:
    """Layer / group norm backward of x, g (n, c, s) in float64, with each result's error scale."""
    n, c, s = x.shape
    rows = x.reshape(n, groups, c // groups * s)
    mean = rows.mean(axis=2, keepdims=True)
    invstd = 1 / np.sqrt(((rows - mean) ** 2).mean(axis=2, keepdims=True) + EPS)
    xhat = (rows - mean) * invstd
    gw = (g * w[None, :, None]).reshape(rows.shape)
    mg, mgx = gw.mean(axis=2, keepdims=True), (gw * xhat).mean(axis=2, keepdims=True)
    dx = invstd * (gw - mg - xhat * mgx)
    spread = (np.abs(rows) + np.abs(mean)) * invstd
    dx_scale = invstd * (np.abs(gw) + np.abs(gw).mean(axis=2, keepdims=True)
                         + spread * (np.abs(mgx) + (np.abs(gw) * spread).mean(axis=2, keepdims=True)))
    xh, sp = xhat.reshape(n, c, s), spread.reshape(n, c, s)
    return {"dx": dx.reshape(x.shape), "dx_scale": dx_scale.reshape(x.shape),
            "stats": np.stack([mean.ravel(), invstd.ravel()], axis=1),
            "affine": np.stack([(g * xh).sum(axis=(0, 2)), g.sum(axis=(0, 2))]),
            "affine_scale": np.stack([(np.abs(g) * (np.abs(xh) + sp)).sum(axis=(0, 2)), np.abs(g).sum(axis=(0, 2))])}


ROW_CASES = [((9, 20, 1), 1, THREAD_MODE), ((5, 300, 1), 1, BLOCK_MODE), ((4, 6, 5), 3, THREAD_MODE),
             ((2, 8, 40), 2, BLOCK_MODE), ((3, 4, 1), 4, THREAD_MODE), ((130, 7, 1), 1, THREAD_MODE)]


def inputs(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, weighted: bool) -> tuple:
    x = stored(rng.normal(3, 2, shape), dtype)
    g = stored(rng.normal(0, 1, shape), dtype)
    w = stored(rng.uniform(0.5, 2, shape[1]), dtype) if weighted else None
    return x, g, w


@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_give_the_x_gradient_and_the_row_statistics(host: HostKernels, dtype: str) -> None:
    rng = np.random.default_rng(len(dtype) + 40)
    for shape, groups, mode in ROW_CASES:
        for weighted in (True, False):
            x, g, w = inputs(rng, shape, dtype, weighted)
            out = stored(np.full(shape, np.nan), dtype)
            row_stats = np.full((shape[0] * groups, 2), np.nan)
            call = Call(host, dtype, x, g, groups, out=out, row_stats=row_stats, weight=w)
            call.launch("rows", mode)
            wv = values(w, dtype) if weighted else np.ones(shape[1])
            want = row_reference(values(x, dtype), values(g, dtype), wv, groups)
            what = f"rows {dtype} {shape} groups={groups} mode={mode} weighted={weighted}"
            assert_close(out, want["dx"], dtype, want["dx_scale"], what)
            assert_close(row_stats, want["stats"], dtype if dtype == "float64" else "float32", 4 * want["stats"][:, 1:],
                         what + " statistics")


@pytest.mark.parametrize("dtype", DTYPES)
def test_channels_give_the_weight_and_bias_gradients_in_every_mode(host: HostKernels, dtype: str) -> None:
    """From the statistics the rows kernel saved: a block per channel, one part, several parts
    (the last one short) and their finish; without an x-gradient (affine_grad's pass)."""
    rng = np.random.default_rng(len(dtype) + 50)
    for shape, groups, mode, parts in (((6, 5, 40), 5, BLOCK_MODE, 1), ((7, 12, 1), 1, PARTS, 1),
                                       ((200, 9, 1), 1, PARTS, 3), ((70, 6, 3), 2, PARTS, 4),
                                       ((5, 4, 1), 1, BLOCK_MODE, 1)):
        x, g, _ = inputs(rng, shape, dtype, False)
        row_stats = np.full((shape[0] * groups, 2), np.nan)
        affine = stored(np.full((2, shape[1]), np.nan), dtype)
        partials = np.full((parts, 2, shape[1]), np.nan)
        call = Call(host, dtype, x, g, groups, row_stats=row_stats, affine=affine, partials=partials, out=None)
        call.launch("rows", THREAD_MODE)
        call.args.parts = parts
        call.launch("channels", mode)
        if parts > 1:
            call.launch("channels", FINISH)
        want = row_reference(values(x, dtype), values(g, dtype), np.ones(shape[1]), groups)
        what = f"channels {dtype} {shape} groups={groups} mode={mode} parts={parts}"
        assert_close(affine, want["affine"], dtype, want["affine_scale"], what)


def batch_reference(x: np.ndarray, g: np.ndarray, mean: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, ...]:
    invstd = 1 / np.sqrt(var + EPS)
    centred = x - mean[None, :, None]
    sums = np.stack([g.sum(axis=(0, 2)), (g * centred).sum(axis=(0, 2)) * invstd])
    scale = np.stack([np.abs(g).sum(axis=(0, 2)),
                      (np.abs(g) * (np.abs(x) + np.abs(mean[None, :, None]))).sum(axis=(0, 2)) * invstd])
    return sums, scale


BATCH_CASES = [((8, 3, 1), PARTS, 1), ((4, 5, 70), BLOCK_MODE, 1), ((300, 4, 1), PARTS, 5), ((3, 2, 9), PARTS, 2)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_backward_reduce_and_input_grad(host: HostKernels, dtype: str) -> None:
    """The statistics as batch_norm_train stores them (x's dtype); the reduce in every channel mode;
    the input gradient (a thread per (sample, channel) row for short rows, a block for long ones)
    from the sums as the reduce stored them, with and without weight."""
    rng = np.random.default_rng(len(dtype) + 60)
    for shape, mode, parts in BATCH_CASES:
        x, g, _ = inputs(rng, shape, dtype, False)
        xv, gv = values(x, dtype), values(g, dtype)
        stats = stored(np.stack([xv.mean(axis=(0, 2)), xv.var(axis=(0, 2))]), dtype)
        mean, var = values(stats, dtype)
        sums = stored(np.full((2, shape[1]), np.nan), dtype)
        partials = np.full((parts, 2, shape[1]), np.nan)
        call = Call(host, dtype, x, g, stats=stats, affine=sums, partials=partials)
        call.args.parts = parts
        call.launch("channels", mode)
        if parts > 1:
            call.launch("channels", FINISH)
        want, scale = batch_reference(xv, gv, mean, var)
        what = f"batch_norm {dtype} {shape} mode={mode} parts={parts}"
        assert_close(sums, want, dtype, scale, what + " backward_reduce")
        sv = values(sums, dtype)
        for weighted in (True, False):
            w = stored(rng.uniform(0.5, 2, shape[1]), dtype) if weighted else None
            wv = values(w, dtype) if weighted else np.ones(shape[1])
            out = stored(np.full(shape, np.nan), dtype)
            call = Call(host, dtype, x, g, stats=stats, sums=sums, weight=w, out=out)
            call.launch("bninput", BLOCK_MODE if shape[2] > 64 else THREAD_MODE)
            count = shape[0] * shape[2]
            invstd = (1 / np.sqrt(var + EPS))[None, :, None]
            centred = xv - mean[None, :, None]
            k = (wv[None, :, None] * invstd)
            want = k * (gv - sv[0][None, :, None] / count - centred * invstd * sv[1][None, :, None] / count)
            scale = k * (np.abs(gv) + np.abs(sv[0][None, :, None]) / count
                         + (np.abs(xv) + np.abs(mean[None, :, None])) * invstd * np.abs(sv[1][None, :, None]) / count)
            assert_close(out, want, dtype, scale, what + f" input_grad weighted={weighted}")


@st.composite
def layouts(draw: st.DrawFn) -> tuple:
    """(n, c, s), groups dividing c, the row mode, the channel mode and its parts."""
    groups = draw(st.integers(1, 3))
    shape = (draw(st.integers(0, 24)), groups * draw(st.integers(1, 4)), draw(st.integers(1, 40)))
    channel = draw(st.sampled_from([(BLOCK_MODE, 1), (PARTS, 1), (PARTS, 2), (PARTS, 7)]))
    return shape, groups, draw(st.sampled_from([THREAD_MODE, BLOCK_MODE])), channel


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layout=layouts(), dtype=st.sampled_from(["float32", "float64"]), weighted=st.booleans())
def test_any_layout_and_mode_matches_reference(host: HostKernels, layout: tuple, dtype: str, weighted: bool) -> None:
    """Every mode on any shape (no samples, one value per channel run, parts of unequal length or
    more parts than samples): the x-gradient, then the weight and bias gradients from its saved
    statistics."""
    shape, groups, row_mode, (channel_mode, parts) = layout
    rng = np.random.default_rng(sum(shape) * 7 + groups)
    x, g, w = inputs(rng, shape, dtype, weighted)
    out, affine = stored(np.full(shape, np.nan), dtype), stored(np.full((2, shape[1]), np.nan), dtype)
    row_stats, partials = np.full((max(1, shape[0] * groups), 2), np.nan), np.full((parts, 2, shape[1]), np.nan)
    call = Call(host, dtype, x, g, groups, out=out, affine=affine, row_stats=row_stats, partials=partials, weight=w)
    if shape[0]:
        call.launch("rows", row_mode)
    call.args.parts = parts
    call.launch("channels", channel_mode)
    if parts > 1:
        call.launch("channels", FINISH)
    want = row_reference(values(x, dtype), values(g, dtype), values(w, dtype) if weighted else np.ones(shape[1]),
                         groups)
    what = f"{dtype} {shape} groups={groups} rows={row_mode} channels={channel_mode} parts={parts}"
    assert_close(out, want["dx"], dtype, want["dx_scale"], what)
    assert_close(affine, want["affine"], dtype, want["affine_scale"], what + " affine")

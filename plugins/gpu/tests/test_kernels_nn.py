"""ember-gpu's nn kernels (csrc/eg_nn.h) on the host, against a numpy float64 reference computed
from the very values the kernels read: softmax / log_softmax in both launch modes (a thread per
line, along the last dim and across inner positions; a block per line, lines longer than the
block), NaN and -inf lines, large values; nll_loss and nll_loss_grad for every reduction, with and
without class weights and label smoothing, ignored rows and a batch where every row is ignored.
Tolerance: a few units of the dtype's epsilon (float16 / bfloat16 round once from float32)."""

from __future__ import annotations

import numpy as np
import pytest
from ember_gpu import gen_nn
from test_kernels_host import (
    HOST_DIR,
    NUMPY,
    HostKernels,
    _bf16_bits,
    comparable,
    ember_cpu_only,  # noqa: F401 (autouse: the reference is ember-cpu alone)
    epsilon,
    from_ember,
    to_ember,
)

import ember_core as em

BLOCK = 256
DTYPES = [d.name for d in gen_nn.registry_dtypes(gen_nn.IMAGES["softmax"][1])]
LOSS_DTYPES = [d.name for d in gen_nn.registry_dtypes(gen_nn.IMAGES["loss"][1])]
SOFTMAX_MODES = {"thread": 0, "block": 1}
REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
ROWS, TOTAL, DIVISOR = 0, 1, 2
IGNORE = -100


@pytest.fixture(scope="module")
def host() -> HostKernels:
    return HostKernels(HOST_DIR)


def test_float_dtypes_are_served() -> None:
    for _, ops in gen_nn.IMAGES.values():
        assert [d.name for d in gen_nn.registry_dtypes(ops)] == ["float16", "bfloat16", "float32", "float64"]


def stored(values: np.ndarray, dtype: str) -> np.ndarray:
    """values in the dtype's storage form (bfloat16 as its bits)."""
    return _bf16_bits(values) if dtype == "bfloat16" else np.ascontiguousarray(values, NUMPY[dtype])


def tolerance(dtype: str) -> float:
    """Relative error allowed: one rounding to a half type on top of float32 arithmetic, else a
    few ulps of exp / log and of the order of the double sums."""
    return 2 * epsilon(dtype) if dtype in ("float16", "bfloat16") else 16 * epsilon(dtype)


def assert_close(got: np.ndarray, want: np.ndarray, dtype: str, scale: np.ndarray | float, what: str) -> None:
    """got (stored form) within tolerance(dtype) * (|want| + scale) of want, or one subnormal step;
    NaN where want is NaN."""
    g = comparable(got, dtype).astype(np.float64)
    step = float(np.finfo(np.float32 if dtype == "bfloat16" else NUMPY[dtype]).smallest_subnormal)
    with np.errstate(invalid="ignore"):
        bound = tolerance(dtype) * (np.abs(want) + scale) + step
        ok = (np.isnan(g) & np.isnan(want)) | (g == want) | (np.abs(g - want) <= bound)
    assert ok.all(), f"{what}: {g[~ok][:5]} != reference {want[~ok][:5]}"


# ---- softmax --------------------------------------------------------------------------------------


def softmax(host: HostKernels, op: str, dtype: str, x: np.ndarray, axis: int, mode: str) -> np.ndarray:
    out = np.zeros_like(x)
    args = host.ffi.new("eg_softmax_args *")
    args.out, args.x = host.pointer(out), host.pointer(x)
    args.outer, args.n = int(np.prod(x.shape[:axis])), x.shape[axis]
    args.inner, args.mode = int(np.prod(x.shape[axis + 1:])), SOFTMAX_MODES[mode]
    host.launch(f"eg_softmax_{op}_{dtype}", args, 3, BLOCK if mode == "block" else 32)
    return out


def softmax_reference(op: str, x: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(the result, the magnitude its error scales with) in float64."""
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(x, axis=axis, keepdims=True)
        shifted = x - m
        s = np.sum(np.exp(shifted), axis=axis, keepdims=True)
        if op == "softmax":
            return np.exp(shifted) / s, np.zeros_like(x)
        return shifted - np.log(s), np.abs(np.nan_to_num(shifted)) + np.abs(np.log(s)) + 1  # + 1: log(s) of a rounded s


SOFTMAX_CASES = [((37, 9), 1, "thread"), ((3, 5, 4), 1, "thread"), ((2, 300, 3), 1, "thread"),
                 ((4, 700), 1, "block"), ((5, 100), 1, "block"), ((3, 1), 1, "thread"), ((2, 3, 80), 2, "block")]


@pytest.mark.parametrize("op", gen_nn.IMAGES["softmax"][1])
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_modes_match_reference(host: HostKernels, op: str, dtype: str) -> None:
    rng = np.random.default_rng(len(op) * 31 + len(dtype))
    for shape, axis, mode in SOFTMAX_CASES:
        x = stored(rng.normal(0, 4, shape), dtype)
        got = softmax(host, op, dtype, x, axis, mode)
        want, scale = softmax_reference(op, comparable(x, dtype).astype(np.float64), axis)
        assert_close(got, want, dtype, scale, f"{op} {dtype} {shape} axis {axis} {mode}")


@pytest.mark.parametrize("op", gen_nn.IMAGES["softmax"][1])
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_special_lines(host: HostKernels, op: str, dtype: str) -> None:
    """A NaN makes its whole line NaN, an all -inf line is NaN, +inf and huge values do not
    overflow, a -inf element gives 0 (softmax) or -inf (log_softmax)."""
    big = 6e4 if dtype == "float16" else 1e30
    for mode, n in (("thread", 6), ("block", 300)):
        x = np.zeros((5, n))
        x[0, 1] = np.nan
        x[1, :] = -np.inf
        x[2, :2] = big, big / 2
        x[3, 3] = -np.inf
        x[4, 0] = np.inf
        s = stored(x, dtype)
        got = comparable(softmax(host, op, dtype, s, 1, mode), dtype).astype(np.float64)
        assert np.isnan(got[0]).all() and np.isnan(got[1]).all() and np.isnan(got[4, 0])
        assert got[2, 0] == (1.0 if op == "softmax" else 0.0)
        assert got[3, 3] == (0.0 if op == "softmax" else -np.inf)
        want, scale = softmax_reference(op, comparable(s, dtype).astype(np.float64)[2:4], 1)
        assert_close(softmax(host, op, dtype, s, 1, mode)[2:4], want, dtype, scale, f"{op} {dtype} {mode} specials")


# ---- nll_loss -------------------------------------------------------------------------------------


def loss_args(host: HostKernels, keep: list, out: np.ndarray, x: np.ndarray, target: np.ndarray,
              weight: np.ndarray | None, c: int, reduction: str, smoothing: float) -> object:
    args = host.ffi.new("eg_loss_args *")
    scratch = np.zeros(1, np.float64)
    keep.append(scratch)
    args.out, args.x = host.pointer(out), host.pointer(x)
    args.target = host.ffi.cast("long long *", host.pointer(target))
    args.weight = host.pointer(weight) if weight is not None else host.ffi.NULL
    args.scratch = host.ffi.cast("double *", host.pointer(scratch))
    args.n, args.c, args.ignore_index = target.size, c, IGNORE
    args.smoothing, args.reduction = smoothing, REDUCTIONS[reduction]
    return args


def nll_reference(lp: np.ndarray, target: np.ndarray, w: np.ndarray, reduction: str, s: float) -> np.ndarray:
    counts = target != IGNORE
    t = np.where(counts, target, 0)
    rows = np.arange(len(t))
    loss = -((1 - s) * w[t] * lp[rows, t] + s / lp.shape[1] * (lp * w).sum(axis=1))
    loss = np.where(counts, loss, 0.0)
    if reduction == "none":
        return loss
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.array(loss.sum() if reduction == "sum" else loss.sum() / w[t][counts].sum())


def nll_grad_reference(g: np.ndarray, target: np.ndarray, w: np.ndarray, c: int, reduction: str,
                       s: float) -> np.ndarray:
    counts = target != IGNORE
    t = np.where(counts, target, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        divisor = w[t][counts].sum() if reduction == "mean" else 1.0
        scale = g if reduction == "none" else np.full(len(t), g.item() / divisor)
        grad = -scale[:, None] * ((1 - s) * w[t][:, None] * np.eye(c)[t] + s / c * w[None, :])
    return np.where(counts[:, None], grad, 0.0)


LOSS_CASES = [(n, c, weighted, s, ignored) for n, c in ((7, 5), (600, 13)) for weighted in (False, True)
              for s in (0.0, 0.1) for ignored in (0.0, 0.3)] + [(6, 4, True, 0.0, 1.0), (0, 4, False, 0.0, 0.0)]


@pytest.mark.parametrize("dtype", LOSS_DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss_and_grad_match_reference(host: HostKernels, dtype: str, reduction: str) -> None:
    rng = np.random.default_rng(len(dtype) * 7 + len(reduction))
    for n, c, weighted, s, ignored in LOSS_CASES:
        what = f"{dtype} {reduction} n={n} c={c} weighted={weighted} smoothing={s} ignored={ignored}"
        lp = stored(-rng.exponential(2.0, (n, c)), dtype)
        target = np.where(rng.random(n) < ignored, IGNORE, rng.integers(0, c, n)).astype(np.int64)
        weight = stored(rng.uniform(0.5, 2.0, c), dtype) if weighted else None
        w = comparable(weight, dtype).astype(np.float64) if weighted else np.ones(c)
        keep: list = []
        out = np.zeros(n if reduction == "none" else (), NUMPY[dtype])
        args = loss_args(host, keep, out, lp, target, weight, c, reduction, s)
        args.mode = ROWS if reduction == "none" else TOTAL
        if n or reduction != "none":
            host.launch(f"eg_loss_nll_loss_{dtype}", args, 1 if reduction != "none" else 3,
                        BLOCK if reduction != "none" else 32)
        want = nll_reference(comparable(lp, dtype).astype(np.float64), target, w, reduction, s)
        assert_close(out, want, dtype, 0.0, f"nll_loss {what}")

        g = stored(rng.normal(0, 1, n if reduction == "none" else ()), dtype)
        grad = stored(np.full((n, c), np.nan), dtype)  # every element must be written
        args = loss_args(host, keep, grad, g, target, weight, c, reduction, s)
        if reduction == "mean":
            args.mode = DIVISOR
            host.launch(f"eg_loss_nll_loss_grad_{dtype}", args, 1, BLOCK)
        args.mode = ROWS
        if n:
            host.launch(f"eg_loss_nll_loss_grad_{dtype}", args, 3, 64)
        want = nll_grad_reference(comparable(g, dtype).astype(np.float64), target, w, c, reduction, s)
        assert_close(grad, want, dtype, 0.0, f"nll_loss_grad {what}")


def test_nll_loss_bad_target_gives_nan_not_a_wild_read(host: HostKernels) -> None:
    lp = np.zeros((3, 4), np.float32)
    target = np.array([1, 4, -1], np.int64)
    out = np.zeros(3, np.float32)
    args = loss_args(host, [], out, lp, target, None, 4, "none", 0.0)
    args.mode = ROWS
    host.launch("eg_loss_nll_loss_float32", args, 1, 32)
    assert out[0] == 0 and np.isnan(out[1:]).all()


# ---- layer_norm / group_norm ----------------------------------------------------------------------


def norm(host: HostKernels, dtype: str, x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None,
         rows: int, span: int, groups: int, eps: float) -> np.ndarray:
    out = np.zeros_like(x)
    d = x.size // rows
    args = host.ffi.new("eg_norm_args *")
    args.out, args.x = host.pointer(out), host.pointer(x)
    args.weight = host.pointer(weight) if weight is not None else host.ffi.NULL
    args.bias = host.pointer(bias) if bias is not None else host.ffi.NULL
    args.rows, args.d, args.span, args.groups, args.eps = rows, d, span, groups, eps
    block = d > 64
    args.mode = int(block)
    host.launch(f"eg_norm_rows_{dtype}", args, 3, BLOCK if block else 32)
    return out


def norm_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, groups: int, eps: float) -> np.ndarray:
    """group_norm of x (N, C, S) in float64 (layer_norm: x (M, D, 1), one group, w and b per D)."""
    n, c, s = x.shape
    rows = x.reshape(n, groups, -1)
    mean = rows.mean(axis=2, keepdims=True)
    var = ((rows - mean) ** 2).mean(axis=2, keepdims=True)
    xhat = ((rows - mean) / np.sqrt(var + eps)).reshape(n, c, s)
    return xhat * w[None, :, None] + b[None, :, None]


NORM_CASES = [((9, 20, 1), 1), ((5, 300, 1), 1), ((4, 6, 5), 3), ((2, 8, 40), 2), ((3, 4, 1), 4)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_and_group_norm_match_reference(host: HostKernels, dtype: str) -> None:
    """layer_norm is the (M, D, 1) case with one group; weight and bias present or absent; an
    offset mean (the centred second pass keeps the variance)."""
    rng = np.random.default_rng(len(dtype))
    for (n, c, s), groups in NORM_CASES:
        x = stored(rng.normal(3, 2, (n, c, s)), dtype)
        for affine in (True, False):
            w = stored(rng.uniform(0.5, 2, c), dtype) if affine else None
            b = stored(rng.normal(0, 1, c), dtype) if affine else None
            got = norm(host, dtype, x, w, b, n * groups, s, groups, 1e-5)
            wv = comparable(w, dtype).astype(np.float64) if affine else np.ones(c)
            bv = comparable(b, dtype).astype(np.float64) if affine else np.zeros(c)
            want = norm_reference(comparable(x, dtype).astype(np.float64), wv, bv, groups, 1e-5)
            assert_close(got, want, dtype, 4.0, f"norm {dtype} {(n, c, s)} groups={groups} affine={affine}")


# ---- dropout --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_dropout_matches_ember_cpu_bit_for_bit(host: HostKernels, dtype: str) -> None:
    """The composite on ember-cpu (bernoulli's mask at the same Philox position, x * scale) and
    the kernel agree to the bit: n not a multiple of 4, an offset past 2**32, p 0 and near 1."""
    rng = np.random.default_rng(3)
    for n, p, seed, offset in ((1001, 0.3, 7, 0), (13, 0.0, 1, 5), (64, 0.9, 2**40 + 3, 2**32 - 2)):
        x = stored(rng.normal(0, 2, n), dtype)
        out = np.full_like(x, 7)
        args = host.ffi.new("eg_dropout_args *")
        args.out, args.x, args.n, args.seed, args.offset = host.pointer(out), host.pointer(x), n, seed, offset
        args.scale, args.threshold = 1.0 / (1.0 - p), 1.0 - p
        host.launch(f"eg_dropout_dropout_{dtype}", args)
        want = from_ember(em.dropout(to_ember(x, dtype), p, seed=seed, offset=offset))
        assert out.tobytes() == want.tobytes(), f"dropout {dtype} n={n} p={p}: {out[out != want][:5]}"


def test_batch_norm_train_matches_reference(host: HostKernels) -> None:
    """Per channel of (n, c, s): the statistics into stats (2, c), out normalized and scaled;
    weight and bias present or absent; s of 1 (an (N, C) batch) and more; an offset mean."""
    for dtype in DTYPES:
        rng = np.random.default_rng(len(dtype) + 1)
        for n, c, s in ((8, 3, 1), (4, 5, 70), (3, 2, 9)):
            x = stored(rng.normal(5, 2, (n, c, s)), dtype)
            for affine in (True, False):
                w = stored(rng.uniform(0.5, 2, c), dtype) if affine else None
                b = stored(rng.normal(0, 1, c), dtype) if affine else None
                out, stats = np.zeros_like(x), stored(np.full((2, c), np.nan), dtype)
                args = host.ffi.new("eg_batchnorm_args *")
                args.out, args.stats, args.x = host.pointer(out), host.pointer(stats), host.pointer(x)
                args.weight = host.pointer(w) if affine else host.ffi.NULL
                args.bias = host.pointer(b) if affine else host.ffi.NULL
                args.n, args.c, args.s, args.eps = n, c, s, 1e-5
                host.launch(f"eg_batchnorm_train_{dtype}", args, 2, BLOCK)
                xv = comparable(x, dtype).astype(np.float64)
                what = f"batch_norm_train {dtype} {(n, c, s)} affine={affine}"
                mean, var = xv.mean(axis=(0, 2)), xv.var(axis=(0, 2))
                assert_close(stats, np.stack([mean, var]), dtype, 1.0, what + " stats")
                wv = comparable(w, dtype).astype(np.float64) if affine else np.ones(c)
                bv = comparable(b, dtype).astype(np.float64) if affine else np.zeros(c)
                want = (xv - mean[:, None]) / np.sqrt(var[:, None] + 1e-5) * wv[:, None] + bv[:, None]
                assert_close(out, want, dtype, 8.0, what)


# ---- sgd_step / adam_step -------------------------------------------------------------------------

SGD_CASES = [{"lr": 0.1, "momentum": 0.9, "dampening": 0.0, "weight_decay": 0.0, "nesterov": False, "maximize": False,
              "first_step": True},
             {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 1e-2, "nesterov": False,
              "maximize": True, "first_step": False},
             {"lr": 0.01, "momentum": 0.8, "dampening": 0.0, "weight_decay": 1e-3, "nesterov": True,
              "maximize": False, "first_step": False}]
ADAM_CASES = [{"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "step": 1, "weight_decay": 0.0,
               "decoupled": False, "maximize": False},
              {"lr": 3e-3, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "step": 7, "weight_decay": 1e-2,
               "decoupled": True, "maximize": True},
              {"lr": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "step": 3, "weight_decay": 1e-2,
               "decoupled": False, "maximize": False}]


def update(host: HostKernels, kernel: str, tensors: list[np.ndarray], coefficients: list[float], flags: int) -> None:
    args = host.ffi.new("eg_update_args *")
    args.param, args.grad = host.pointer(tensors[0]), host.pointer(tensors[1])
    args.buf0 = host.pointer(tensors[2])
    args.buf1 = host.pointer(tensors[3]) if len(tensors) > 3 else host.ffi.NULL
    args.n, args.flags = tensors[0].size, flags
    for j, c in enumerate(coefficients):
        args.c[j] = c
    host.launch(kernel, args)


@pytest.mark.parametrize("dtype", DTYPES)
def test_optimizer_steps_give_the_composites_bits(host: HostKernels, dtype: str) -> None:
    """sgd_step and adam_step on 1001 elements against the composites on ember-cpu, to the bit:
    momentum's first step, dampening, weight decay (L2 and decoupled), Nesterov, maximize."""
    from ember_core.ops.optim_composites import adam_coefficients

    rng = np.random.default_rng(29)
    for kw in SGD_CASES:
        arrays = [stored(rng.normal(0, 1, 1001), dtype) for _ in range(3)]
        refs = [to_ember(a, dtype) for a in arrays]
        em.sgd_step(*refs, **kw)
        flags = 1 * kw["maximize"] | 2 * kw["nesterov"] | 4 * kw["first_step"] | 8 * bool(kw["weight_decay"])
        update(host, f"eg_update_sgd_{dtype}", arrays,
               [kw["lr"], kw["momentum"], 1.0 - kw["dampening"], kw["weight_decay"]], flags)
        for name, got, want in zip(("param", "momentum_buffer"), (arrays[0], arrays[2]), (refs[0], refs[2])):
            assert got.tobytes() == from_ember(want).tobytes(), f"sgd_step {dtype} {kw} {name}"
    for kw in ADAM_CASES:
        arrays = [stored(rng.normal(0, 1, 1001), dtype), stored(rng.normal(0, 1, 1001), dtype),
                  stored(rng.normal(0, 0.1, 1001), dtype), stored(rng.uniform(0, 0.1, 1001), dtype)]
        refs = [to_ember(a, dtype) for a in arrays]
        em.adam_step(*refs, **kw)
        coefficients = adam_coefficients(**{k: kw[k] for k in kw if k != "maximize"})
        flags = 1 * kw["maximize"] | 8 * bool(kw["weight_decay"]) | 16 * kw["decoupled"]
        update(host, f"eg_update_adam_{dtype}", arrays, list(coefficients), flags)
        for name, got, want in zip(("param", "exp_avg", "exp_avg_sq"), (arrays[0], *arrays[2:]), (refs[0], *refs[2:])):
            assert got.tobytes() == from_ember(want).tobytes(), f"adam_step {dtype} {kw} {name}"

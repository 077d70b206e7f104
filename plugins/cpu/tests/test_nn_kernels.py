"""ember-cpu's nn kernels (softmax.c, loss.c, linear.c) against the core's composites of the same
ops, on the layouts and special values where a fused loop could diverge from the op-by-op form."""

from __future__ import annotations

import numpy as np
import pytest
from ember_conformance.references import conv2d_weight_grad_reference
from ember_cpu.kernels import KERNELS
from native_util import desc, ffi, lib

import ember_core as em
from ember_core.ops import nn_composites as composite


def same_values(got: np.ndarray, want: np.ndarray, rtol: float) -> None:
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(got)], want[~np.isnan(want)], rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_special_values_match_the_composite(dtype, axis, name):
    x = np.random.default_rng(0).standard_normal((3, 40, 5)).astype(dtype) * 20
    x[1, 2, 3] = np.nan
    x[0, :, 1] = -np.inf
    x[2, 1, 0] = np.inf
    got = np.asarray(getattr(em, name)(em.asarray(x), axis=axis))
    want = np.asarray(getattr(composite, name)(em.asarray(x), axis=axis))
    same_values(got, want, 1e-5 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("rows", [1, 7, 300])
@pytest.mark.parametrize("classes", [1, 10, 1500])
def test_softmax_rows_short_and_long(rows, classes):
    x = np.random.default_rng(1).standard_normal((rows, classes)) * 5
    want = np.exp(x - x.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    np.testing.assert_allclose(np.asarray(em.softmax(em.asarray(x), axis=1)), want, rtol=1e-12, atol=1e-300)


def test_nll_kernel_refuses_an_unchecked_target():
    """The core checks targets first; the kernel checks again before reading a row."""
    log_probs, out = em.zeros((2, 3)), em.zeros(())
    with pytest.raises(em.IndexOutOfRangeError):
        KERNELS["nll_loss"](out, log_probs, em.asarray([0, 3]), None, ignore_index=-100, reduction="mean",
                            label_smoothing=0.0)


def test_linear_epilogue_keeps_nan_and_matches_the_composite():
    rng = np.random.default_rng(2)
    x, w, b = rng.standard_normal((5, 7)), rng.standard_normal((4, 7)), rng.standard_normal(4)
    x[1, 2] = np.nan
    with em.providers(exclude=["xnnpack"]):
        got = np.asarray(em.linear(em.asarray(x), em.asarray(w), em.asarray(b), activation="relu"))
    want = np.asarray(composite.linear(em.asarray(x), em.asarray(w), em.asarray(b), activation="relu"))
    same_values(got, want, 1e-12)


POOL_GEOMETRIES = [
    {"kernel_size": 2},
    {"kernel_size": 3, "stride": 2, "padding": 1},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
    {"kernel_size": (2, 3), "stride": (1, 2), "padding": (1, 1)},   # overlapping rows
    {"kernel_size": 3, "stride": 1, "padding": 1},                  # every input in nine windows
]


def pool_input(dtype: str, width: int = 11) -> np.ndarray:
    """Ties (values rounded to halves), NaN, +-inf, -0 and a window of -inf, where the first-maximum
    and NaN rules decide the result; rows as wide as `width` (wide ones take the vectorized loops)."""
    x = np.round(np.random.default_rng(3).standard_normal((2, 3, 9, width)) * 2) / 2
    x[0, 0, 2, 3] = np.nan
    x[0, 1, 4, :] = np.inf
    x[1, 0, :3, :3] = -np.inf
    x[1, 2] = -0.0
    return x.astype(dtype)


def native_and_composite(name: str, *args, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    with em.providers(exclude=["xnnpack"]):
        got = np.asarray(getattr(em, name)(*args, **kwargs))
    return got, np.asarray(getattr(composite, name)(*args, **kwargs))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("geometry", [*POOL_GEOMETRIES, {"kernel_size": (2, 3), "stride": (1, 2), "dilation": (2, 1),
                                                         "padding": (1, 1)}])
@pytest.mark.parametrize("width", [11, 77])
def test_max_pool2d_and_its_gradient_match_the_composite(dtype, geometry, width):
    x = em.asarray(pool_input(dtype, width))
    got, want = native_and_composite("max_pool2d", x, **geometry)
    np.testing.assert_array_equal(got, want)
    assert (np.signbit(got) == np.signbit(want)).all()
    grad = np.random.default_rng(4).standard_normal(got.shape).astype(dtype)
    grad[:, :, ::2, 1::3] = -0.0   # copied where windows do not overlap, added (+0) where they do
    got, want = native_and_composite("max_pool2d_grad", em.asarray(grad), x, **geometry)
    same_values(got, want, 1e-6 if dtype == "float32" else 1e-14)   # overlapping windows add in another order
    assert (np.signbit(got) == np.signbit(want)).all()


TILING_GRADIENTS = {"max_pool2d": lambda grad, x, kernel: ("max_pool2d_grad", (grad, x, kernel), {}),
                    "avg_pool2d": lambda grad, x, kernel: ("avg_pool2d_grad", (grad,),
                                                           {"input_shape": x.shape, "kernel_size": kernel})}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("pool", sorted(TILING_GRADIENTS))
@pytest.mark.parametrize(("kernel", "crop"), [(2, (8, 12)), (2, (8, 20)), (2, (6, 36)), (2, (8, 76)), (2, (2, 2)),
                                             ((2, 3), (8, 12)), (3, (9, 12))])
def test_pools_and_gradients_of_tiling_windows_match_the_composite(dtype, pool, kernel, crop):
    """Windows that tile the input exactly take their own path (each element written once); for
    float32 2x2 windows a vector one, 16 windows per step: rows of 1, 6, 10, 18 and 38 windows
    cover its full and partial steps."""
    x = em.asarray(np.ascontiguousarray(pool_input(dtype, 77)[:, :, :crop[0], :crop[1]]))
    got, want = native_and_composite(pool, x, kernel)
    np.testing.assert_array_equal(got, want)   # the same taps, in the same order
    assert (np.signbit(got) == np.signbit(want)).all()
    out_shape = got.shape
    grad = np.random.default_rng(7).standard_normal(out_shape).astype(dtype)
    grad[:, :, ::2, 1::3] = -0.0
    name, args, kwargs = TILING_GRADIENTS[pool](em.asarray(grad), x, kernel)
    got, want = native_and_composite(name, *args, **kwargs)
    same_values(got, want, 0.0)   # no window overlaps: one operation per element
    assert (np.signbit(got) == np.signbit(want)).all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("geometry", POOL_GEOMETRIES)
@pytest.mark.parametrize("width", [11, 77])
def test_avg_pool2d_and_its_gradient_match_the_composite(dtype, count_include_pad, geometry, width):
    x = em.asarray(pool_input(dtype, width))
    got, want = native_and_composite("avg_pool2d", x, count_include_pad=count_include_pad, **geometry)
    np.testing.assert_array_equal(got, want)   # the same taps summed in the same order
    assert (np.signbit(got) == np.signbit(want)).all()
    grad = np.random.default_rng(5).standard_normal(got.shape).astype(dtype)
    grad[:, :, ::2, 1::3] = -0.0   # copied where windows do not overlap, added (+0) where they do
    grad = em.asarray(grad)
    got, want = native_and_composite("avg_pool2d_grad", grad, input_shape=x.shape,
                                     count_include_pad=count_include_pad, **geometry)
    same_values(got, want, 1e-6 if dtype == "float32" else 1e-14)   # overlapping windows add in another order
    assert (np.signbit(got) == np.signbit(want)).all()


def test_pool_kernels_are_served_natively():
    """The demo's backward runs max_pool2d_grad here, not as a composite of ~20 ops."""
    x = em.asarray(np.zeros((1, 1, 4, 4), np.float32))
    with em.providers(exclude=["xnnpack"]), em.trace_dispatch() as log:
        em.max_pool2d_grad(em.max_pool2d(x, 2), x, 2)
        em.avg_pool2d_grad(em.avg_pool2d(x, 2), input_shape=x.shape, kernel_size=2)
    served = log.providers()
    assert all(set(served[op]) == {"cpu"} for op in ("max_pool2d", "max_pool2d_grad", "avg_pool2d", "avg_pool2d_grad"))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("x_shape,weight_shape,stride,padding,dilation,groups", [
    ((2, 4, 9, 11), (6, 4, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((3, 6, 10, 7), (4, 3, 2, 3), (2, 1), (1, 0), (1, 2), 2),
    ((2, 4, 8, 8), (4, 1, 3, 3), (1, 1), (1, 1), (1, 1), 4),        # depthwise
    ((32, 16, 8, 8), (32, 16, 3, 3), (1, 1), (1, 1), (1, 1), 1),    # the demo's second conv
    ((2, 3, 5, 37), (2, 3, 3, 4), (1, 1), (1, 2), (1, 1), 1),       # rows of 38: 16 + 16 + 6, padding both sides
    ((1, 3, 12, 12), (8, 3, 5, 5), (3, 3), (2, 2), (1, 1), 1),
    ((3, 8, 64, 64), (4, 8, 5, 5), (1, 1), (2, 2), (1, 1), 1),      # 3.3 MB of patches per image: two chunks
    ((2, 3, 6, 41), (4, 3, 3, 3), (2, 2), (1, 1), (1, 1), 1),       # stride 2: outputs 16 + 5, padding both sides
    ((2, 2, 5, 70), (3, 2, 4, 4), (1, 2), (0, 1), (1, 2), 1),       # stride 2, dilated: 16 + 16 + 2 outputs
    ((40, 32, 9, 9), (8, 32, 3, 3), (2, 2), (1, 1), (1, 1), 1),     # 40 images in equal chunks of 20
    ((0, 3, 5, 5), (2, 3, 3, 3), (1, 1), (0, 0), (1, 1), 1),        # empty batch: zeros
])
def test_conv2d_weight_grad_is_exact(dtype, x_shape, weight_shape, stride, padding, dilation, groups):
    """Small integers make every product and sum exact: any dropped, doubled or misplaced tap shows."""
    rng = np.random.default_rng(6)
    x = rng.integers(-3, 4, x_shape).astype(dtype)
    oh, ow = ((n + 2 * p - d * (k - 1) - 1) // s + 1
              for n, p, d, k, s in zip(x_shape[2:], padding, dilation, weight_shape[2:], stride))
    grad = rng.integers(-3, 4, (x_shape[0], weight_shape[0], oh, ow)).astype(dtype)
    with em.providers(exclude=["xnnpack"]), em.trace_dispatch() as log:
        got = np.asarray(em.conv2d_weight_grad(em.asarray(x), em.asarray(grad), weight_shape=weight_shape,
                                               stride=stride, padding=padding, dilation=dilation, groups=groups))
    assert set(log.providers()["conv2d_weight_grad"]) == {"cpu"}
    np.testing.assert_array_equal(got, conv2d_weight_grad_reference(x, grad, weight_shape, stride, padding, dilation,
                                                                  groups))


def test_conv2d_weight_grad_kernel_rejects_mismatched_operands():
    """The core never passes these; the C entry point answers with a status, not a crash."""
    x, grad = np.zeros((2, 4, 5, 5), np.float32), np.zeros((2, 6, 3, 3), np.float32)
    window = ffi.new("ember_cpu_window *", (3, 3, 1, 1, 0, 0, 1, 1))
    for out in (np.zeros((6, 3, 3, 3), np.float32),    # channels do not match x
                np.zeros((6, 4, 2, 3), np.float32),    # kernel does not match the window
                np.zeros((5, 4, 3, 3), np.float32)):   # filters do not match grad_output
        status = lib.ember_cpu_conv2d_weight_grad(desc(out), desc(x), desc(grad), window, 1)
        assert status == lib.EMBER_ERR_INVALID_ARGUMENT


UPDATES = {  # op -> (its state tensors, keywords per step 0, 1, and the variants to run)
    "adam_step": (2, lambda i: {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "step": i + 1},
                  {"adam": {}, "l2": {"weight_decay": 0.1}, "adamw": {"weight_decay": 0.1, "decoupled": True},
                   "maximize": {"maximize": True}}),
    "sgd_step": (1, lambda i: {"lr": 0.01, "momentum": 0.9, "first_step": i == 0},
                 {"momentum": {}, "dampening-l2": {"dampening": 0.3, "weight_decay": 0.1},
                  "nesterov": {"nesterov": True, "weight_decay": 0.1}, "maximize": {"maximize": True}}),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [7, 100_003])  # one thread; split over the team
@pytest.mark.parametrize(("name", "options"), [(n, o) for n in UPDATES for o in UPDATES[n][2].values()],
                         ids=[f"{n}-{o}" for n in UPDATES for o in UPDATES[n][2]])
def test_update_equals_the_composite_bit_for_bit(dtype, n, name, options):
    """optim.c rounds every product and sum as the composite's ops do (no fused multiply-add), with
    special values in every tensor."""
    from ember_core.ops import optim_composites

    states, step_kwargs, _ = UPDATES[name]
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal(n).astype(dtype) * 3 for _ in range(3)] + [rng.random(n).astype(dtype)]
    for a, special in zip(arrays, [np.nan, np.inf, -np.inf, 0.0]):
        a[n // 2] = special
    arrays = arrays[:2 + states]
    results = []
    for fn in (getattr(em, name), getattr(optim_composites, name)):
        tensors = [em.asarray(a.copy()) for a in arrays]
        with em.trace_dispatch() as log:
            for step in (0, 1):
                fn(*tensors, **step_kwargs(step), **options)
        results.append([t.numpy() for t in tensors])
        if fn is getattr(em, name):
            assert log.providers()[name] == {"cpu": 2}
    for got, want in zip(*results):
        assert got.tobytes() == want.tobytes()

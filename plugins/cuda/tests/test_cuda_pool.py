"""ember-cuda's pooling kernels (max_pool2d, max_pool2d_grad, max_pool2d_select, avg_pool2d, avg_pool2d_grad,
adaptive_avg_pool2d) on ember-gpu's fake driver running the real kernels on the host, against ember-cpu on
the same inputs in every claimed dtype: padded, strided, dilated and ceil_mode windows, both
count_include_pad settings, NaN and infinities, the gradients through autograd; each op's own kernel ran
(the fake's launch log) and nothing went through the CPU fallback.  float32 / float64 give ember-cpu's bits
(its kernels' order of every sum); float16 / bfloat16: ember-cpu runs the composites (rounding at every
step), the kernels round once, so the sums may differ by a few of the dtype's epsilons (TOLERANCE)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import ember_core as em

ember_cuda = pytest.importorskip("ember_cuda")
from test_cuda_nn import _claimed, _host  # noqa: E402 (ember-cuda's nn tests: the claims, host values)

pytestmark = [pytest.mark.no_device]

TOLERANCE = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 0.0, "float64": 0.0}
WINDOWS = [  # (x shape, kernel_size, stride, padding, dilation, ceil_mode)
    ((2, 3, 8, 8), 2, None, 0, 1, False),
    ((1, 2, 9, 7), 3, 2, 1, 1, True),
    ((2, 1, 10, 9), (3, 2), (1, 2), (1, 0), (2, 1), False),
    ((1, 2, 6, 11), (2, 3), 2, (1, 1), 1, True),
]
# kind -> each window's keyword arguments (avg: no dilation, both count_include_pad settings)
WINDOW_KWARGS = {
    "max": [(shape, {"kernel_size": k, "stride": s, "padding": p, "dilation": d, "ceil_mode": ceil})
            for shape, k, s, p, d, ceil in WINDOWS],
    "avg": [(shape, {"kernel_size": k, "stride": s, "padding": p, "ceil_mode": ceil, "count_include_pad": include})
            for shape, k, s, p, _, ceil in WINDOWS for include in (True, False)],
}
GRADIENTS = {"max": lambda g, x, kw: em.max_pool2d_grad(g, x, **kw),
             "avg": lambda g, x, kw: em.avg_pool2d_grad(g, input_shape=x.shape, **kw)}


def _close(got: Any, want: Any, what: str) -> None:
    """Within TOLERANCE (float32 / float64: the same bits, zeros' signs included)."""
    assert (got.dtype, got.shape) == (want.dtype, want.shape), f"{what}: {got.dtype}{got.shape}"
    g, w = _host(got), _host(want)
    tol = TOLERANCE[want.dtype.name]
    if tol:
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True, err_msg=what)
        return
    same = ((g == w) & (np.signbit(g) == np.signbit(w))) | (np.isnan(g) & np.isnan(w))
    assert same.all(), f"{what}: {g[~same][:5]} != ember-cpu {w[~same][:5]}"


def _ran(fake: Any, kernel: str) -> bool:
    return any(launch.kernel == kernel for launch in fake.launches)


def _on_gpu(*tensors: Any) -> list[Any]:
    return [t.to_device("cuda:0") for t in tensors]


def _input(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, specials: bool = True) -> Any:
    """Values with ties (integers) and, when asked, NaN and infinities."""
    v = np.round(rng.normal(0, 3, shape))
    if specials:
        v = np.where(rng.random(shape) < 0.05, rng.choice([math.nan, math.inf, -math.inf], shape), v)
    return em.asarray(v).astype(dtype)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pooling_and_its_gradient_match_ember_cpu(no_claimed_op_falls_back: Any, kind: str) -> None:
    """<kind>_pool2d and <kind>_pool2d_grad (max: and max_pool2d_select), each op's own kernel."""
    rng = np.random.default_rng(41 if kind == "max" else 43)
    fake = no_claimed_op_falls_back
    forward, gradient = getattr(em, f"{kind}_pool2d"), GRADIENTS[kind]
    for dtype in _claimed(f"{kind}_pool2d"):
        for shape, kw in WINDOW_KWARGS[kind]:
            what = f"{dtype} {shape} {kw}"
            x = _input(rng, shape, dtype)
            fake.launches.clear()
            pooled = forward(x, **kw)
            _close(forward(*_on_gpu(x), **kw), pooled, f"{kind}_pool2d {what}")
            g = _input(rng, pooled.shape, dtype, specials=False)
            _close(gradient(*_on_gpu(g, x), kw), gradient(g, x, kw), f"{kind}_pool2d_grad {what}")
            ops = [f"{kind}_pool2d", f"{kind}_pool2d_grad"]
            if kind == "max":
                values = _input(rng, shape, dtype, specials=False)
                got = em.max_pool2d_select(*_on_gpu(values, x), **kw)
                _close(got, em.max_pool2d_select(values, x, **kw), f"max_pool2d_select {what}")
                ops.append("max_pool2d_select")
            for op in ops:
                assert _ran(fake, f"eg_pool_{op}_{dtype}"), f"{op} {what}: its kernel did not run"


def test_adaptive_avg_pool2d_matches_a_float64_mean(no_claimed_op_falls_back: Any) -> None:
    """Against the float64 mean of each PyTorch window (finite inputs: the composite's pooling matrices
    spread an infinity across whole rows), within the dtype's rounding; output sizes below, equal to and
    above the input's."""
    rng = np.random.default_rng(47)
    fake = no_claimed_op_falls_back
    for dtype in _claimed("adaptive_avg_pool2d"):
        for shape, size in (((2, 3, 7, 9), (3, 4)), ((1, 2, 5, 5), 5), ((1, 1, 3, 4), (5, 6)), ((2, 2, 6, 6), 1),
                            ((2, 3, 20, 21), 1), ((1, 2, 30, 30), (2, 3))):  # the last two: a block per output
            x = _input(rng, shape, dtype, specials=False)
            fake.launches.clear()
            got = em.adaptive_avg_pool2d(x.to_device("cuda:0"), size)
            assert _ran(fake, f"eg_pool_adaptive_avg_pool2d_{dtype}"), f"adaptive_avg_pool2d {dtype} {shape}"
            want = em.adaptive_avg_pool2d(x.astype("float64"), size).astype(dtype)  # ember-cpu in float64, rounded
            tol = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 2e-7, "float64": 1e-15}[dtype]
            np.testing.assert_allclose(_host(got), _host(want), rtol=tol, atol=tol, err_msg=f"{dtype} {shape} {size}")


def test_pooling_gradients_through_autograd_match_ember_cpu(no_claimed_op_falls_back: Any) -> None:
    """A max and an average pool in one graph, backward on both devices: the gradient kernels ran."""
    rng = np.random.default_rng(53)
    x0 = rng.normal(0, 1, (2, 3, 9, 9))
    weight = rng.normal(0, 1, (2, 3, 4, 4))
    grads = []
    for device in ("cpu", "cuda:0"):
        x = em.asarray(x0).astype("float32").to_device(device).requires_grad_()
        y = em.avg_pool2d(em.max_pool2d(x, 3, stride=2, padding=1), 2, stride=1, count_include_pad=False)
        (y * em.asarray(weight).astype("float32").to_device(device)).sum().backward()
        grads.append(x.grad)
    _close(grads[1], grads[0], "the gradient of avg_pool2d(max_pool2d(x))")
    for op in ("max_pool2d_grad", "avg_pool2d_grad"):
        assert _ran(no_claimed_op_falls_back, f"eg_pool_{op}_float32"), op


def test_empty_inputs_launch_nothing_and_fail_as_on_cpu(no_claimed_op_falls_back: Any) -> None:
    """An empty batch gives an empty result without a launch; an empty plane's adaptive windows are
    declined by the kernel, so the error is the composite's, as on ember-cpu."""
    fake = no_claimed_op_falls_back
    fake.launches.clear()
    x = em.zeros((0, 3, 6, 6), device="cuda:0")
    assert em.max_pool2d(x, 2).shape == (0, 3, 3, 3) and em.adaptive_avg_pool2d(x, 2).shape == (0, 3, 2, 2)
    assert not [launch for launch in fake.launches if launch.kernel.startswith("eg_pool_")]
    with pytest.raises(Exception) as on_cpu:
        em.adaptive_avg_pool2d(em.zeros((1, 1, 0, 3)), 2)
    with pytest.raises(type(on_cpu.value)):
        em.adaptive_avg_pool2d(em.zeros((1, 1, 0, 3), device="cuda:0"), 2)

"""ember-cuda's norm gradients on ember-gpu's fake driver running the real kernels on the host,
against ember-cpu on the same inputs in every claimed dtype: layer_norm's, group_norm's and
batch_norm_train's gradients through autograd (x, weight and bias), the affine-only ops called
directly, batch norm in eval mode (elementwise kernels only); each gradient op ran natively on cuda
(dispatch trace) with its own kernels (the fake's launch log), and nothing went through the CPU
fallback.  float16 / bfloat16: ember-cpu runs the composites (rounding at every step), the kernels
round once, so the comparison allows a few of the dtype's epsilons (TOLERANCE, relative to the
largest reference value of each result: the gradients are differences of cancelling terms)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember_core as em
from ember_core.nn import functional as F

ember_cuda = pytest.importorskip("ember_cuda")
from test_cuda_nn import _claimed, _host, _ran  # noqa: E402

pytestmark = [pytest.mark.no_device]

TOLERANCE = {"float16": 1e-2, "bfloat16": 6e-2, "float32": 1e-5, "float64": 1e-12}
GRADIENT_OPS = ("layer_norm_input_grad", "layer_norm_affine_grad", "group_norm_input_grad", "group_norm_affine_grad",
                "batch_norm_backward_reduce", "batch_norm_input_grad")


def _close(got: Any, want: Any, what: str) -> None:
    assert (got.dtype, got.shape) == (want.dtype, want.shape), f"{what}: {got.dtype}{got.shape}"
    reference = _host(want)
    tol = TOLERANCE[want.dtype.name] * max(1.0, float(np.abs(reference).max(initial=0)))
    np.testing.assert_allclose(_host(got), reference, rtol=0, atol=tol, err_msg=what)


def _gradients(device: str, forward: Any, tensors: list[Any], grad: Any) -> list[Any]:
    """The gradients of forward(*tensors) . grad with respect to each tensor, on device."""
    leaves = [t.to_device(device).requires_grad_() for t in tensors]
    out = forward(*leaves)
    out.backward(grad.to_device(device))
    return [leaf.grad for leaf in leaves]


def _check_backward(fake: Any, forward: Any, tensors: list[Any], kernels: tuple[str, ...], what: str) -> None:
    rng = np.random.default_rng(len(what))
    grad = em.asarray(rng.normal(0, 1, forward(*tensors).shape)).astype(tensors[0].dtype)
    fake.launches.clear()
    with em.trace_dispatch() as log:
        got = _gradients("cuda:0", forward, tensors, grad)
    ran = {op: how for op, how in log.providers().items() if op in GRADIENT_OPS}
    assert ran and all(how == {"cuda": sum(how.values())} for how in ran.values()), f"{what}: {ran}"
    for kernel in kernels:
        assert _ran(fake, f"{kernel}_{tensors[0].dtype.name}"), f"{what}: {kernel} did not run"
    want = _gradients("cpu", forward, tensors, grad)
    for name, g, w in zip(("x", "weight", "bias"), got, want):
        _close(g, w, f"{what}: the gradient of {name}")


def test_layer_norm_backward_matches_ember_cpu(no_claimed_op_falls_back: Any) -> None:
    """Rows of 30 (a thread per row) and of 300 (a block per row); the weight and bias gradients
    from the x-gradient's pass (its saved statistics), summed over a few rows and over many (parts)."""
    rng = np.random.default_rng(41)
    for dtype in _claimed("layer_norm_input_grad"):
        for shape, normalized in (((6, 4, 30), (4, 30)), ((3, 300), (300,)), ((150, 8), (8,))):
            x = em.asarray(rng.normal(2, 3, shape)).astype(dtype)
            w = em.asarray(rng.uniform(0.5, 2, normalized)).astype(dtype)
            b = em.asarray(rng.normal(0, 1, normalized)).astype(dtype)
            _check_backward(no_claimed_op_falls_back, lambda x, w, b, n=normalized: em.layer_norm(x, n, w, b),
                            [x, w, b], ("eg_normgrad_rows", "eg_normgrad_channels"), f"layer_norm {dtype} {shape}")


def test_group_norm_backward_matches_ember_cpu(no_claimed_op_falls_back: Any) -> None:
    rng = np.random.default_rng(43)
    for dtype in _claimed("group_norm_input_grad"):
        for shape, groups in (((4, 6, 5, 5), 3), ((2, 4, 40), 2), ((70, 8), 4)):
            x = em.asarray(rng.normal(1, 2, shape)).astype(dtype)
            w = em.asarray(rng.uniform(0.5, 2, shape[1])).astype(dtype)
            b = em.asarray(rng.normal(0, 1, shape[1])).astype(dtype)
            _check_backward(no_claimed_op_falls_back, lambda x, w, b, g=groups: em.group_norm(x, g, w, b), [x, w, b],
                            ("eg_normgrad_rows", "eg_normgrad_channels"), f"group_norm {dtype} {shape} groups={groups}")


def test_batch_norm_train_backward_matches_ember_cpu(no_claimed_op_falls_back: Any) -> None:
    """Channels of long runs (a block per channel) and an (N, C) batch (a thread per channel and
    part of the samples)."""
    rng = np.random.default_rng(47)
    for dtype in _claimed("batch_norm_input_grad"):
        for shape in ((5, 3, 8, 8), (200, 6)):
            x = em.asarray(rng.normal(1, 2, shape)).astype(dtype)
            w = em.asarray(rng.uniform(0.5, 2, shape[1])).astype(dtype)
            b = em.asarray(rng.normal(0, 1, shape[1])).astype(dtype)

            def forward(x: Any, w: Any, b: Any) -> Any:
                return em.batch_norm_train(x, em.empty((2, x.shape[1]), dtype=x.dtype, device=x.device), w, b)

            _check_backward(no_claimed_op_falls_back, forward, [x, w, b],
                            ("eg_normgrad_channels", "eg_normgrad_bninput"), f"batch_norm_train {dtype} {shape}")


def test_affine_grads_alone_match_ember_cpu(no_claimed_op_falls_back: Any) -> None:
    rng = np.random.default_rng(53)
    for dtype in _claimed("group_norm_affine_grad"):
        x = em.asarray(rng.normal(1, 2, (5, 6, 7))).astype(dtype)
        g = em.asarray(rng.normal(0, 1, (5, 6, 7))).astype(dtype)
        on_gpu = [t.to_device("cuda:0") for t in (g, x)]
        no_claimed_op_falls_back.launches.clear()
        _close(em.group_norm_affine_grad(*on_gpu, 3), em.group_norm_affine_grad(g, x, 3), f"group_norm_affine {dtype}")
        _close(em.layer_norm_affine_grad(*on_gpu, (6, 7)), em.layer_norm_affine_grad(g, x, (6, 7)),
               f"layer_norm_affine {dtype}")
        assert _ran(no_claimed_op_falls_back, f"eg_normgrad_channels_{dtype}"), dtype


def test_batch_norm_eval_runs_natively(no_claimed_op_falls_back: Any) -> None:
    """Eval mode is a per-channel affine map of elementwise ops: every op of it native on cuda
    (nothing composite, nothing on the host), every launch an elementwise kernel (or the fill that
    makes eps a tensor)."""
    rng = np.random.default_rng(59)
    for dtype in _claimed("batch_norm_train"):
        x = em.asarray(rng.normal(1, 2, (4, 3, 5, 5))).astype(dtype)
        mean, var = em.asarray(rng.normal(0, 1, 3)).astype(dtype), em.asarray(rng.uniform(0.5, 2, 3)).astype(dtype)
        w, b = em.asarray(rng.uniform(0.5, 2, 3)).astype(dtype), em.asarray(rng.normal(0, 1, 3)).astype(dtype)
        on_gpu = [t.to_device("cuda:0") for t in (x, mean, var, w, b)]
        no_claimed_op_falls_back.launches.clear()
        with em.trace_dispatch() as log:
            got = F.batch_norm(*on_gpu[:3], on_gpu[3], on_gpu[4], training=False)
        served = log.providers()
        assert served and all(set(how) == {"cuda"} for how in served.values()), f"{dtype}: {served}"
        kernels = {launch.kernel.split("_")[1] for launch in no_claimed_op_falls_back.launches}
        assert kernels <= {"unary", "binary", "fill"}, f"{dtype}: {kernels}"  # fill: eps as a tensor
        _close(got, F.batch_norm(x, mean, var, w, b, training=False), f"batch_norm eval {dtype}")

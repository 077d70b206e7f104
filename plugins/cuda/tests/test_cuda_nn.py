"""ember-cuda's nn and optimizer kernels (softmax, log_softmax, nll_loss, nll_loss_grad, layer_norm,
group_norm, batch_norm_train, dropout, sgd_step, adam_step) on ember-gpu's fake driver running the
real kernels on the host, against ember-cpu on the same inputs: every claimed dtype, softmax along
the last and a middle axis (both launch modes), the loss for every reduction with class weights,
label smoothing and ignored rows, cross_entropy's gradient through autograd, the norms with and
without affine parameters (batch norm's statistics too), dropout and the optimizer steps to the
bit; each op's own kernel ran (checked in the fake's launch log) and nothing went through the CPU
fallback.  float16 / bfloat16: ember-cpu runs the composites (rounding at every step), the kernels
round once, so the comparison allows a few of the dtype's epsilons."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember_core as em
from ember_core import dtypes
from ember_core.nn import functional as F

ember_cuda = pytest.importorskip("ember_cuda")
from ember_gpu import ops  # noqa: E402

pytestmark = [pytest.mark.no_device]

CLAIMED = ops.claimed(ops.OpLayer(ops.kernel_index(ops.package_kernels("ember_cuda"))).table())
TOLERANCE = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 2e-6, "float64": 1e-13}


def _claimed(op: str) -> list[str]:
    assert op in CLAIMED, f"{op} is not in the kernel table: rebuild the fatbins (ember_gpu.build.build_images)"
    return CLAIMED[op]


def _host(t: Any) -> np.ndarray:
    t = t.to_device("cpu")
    return (t.astype("float32") if t.dtype == dtypes.bfloat16 else t).numpy().astype(np.float64)


def _close(got: Any, want: Any, what: str) -> None:
    assert (got.dtype, got.shape) == (want.dtype, want.shape), f"{what}: {got.dtype}{got.shape}"
    tol = TOLERANCE[want.dtype.name]
    np.testing.assert_allclose(_host(got), _host(want), rtol=tol, atol=tol, equal_nan=True, err_msg=what)


def _ran(fake: Any, prefix: str) -> bool:
    return any(launch.kernel.startswith(prefix) for launch in fake.launches)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_matches_ember_cpu(no_claimed_op_falls_back: Any, op: str) -> None:
    rng = np.random.default_rng(5)
    for dtype in _claimed(op):
        for shape, axis in (((6, 10), -1), ((3, 300), 1), ((2, 7, 5), 1), ((4,), 0)):
            x = em.asarray(rng.normal(0, 3, shape)).astype(dtype)
            no_claimed_op_falls_back.launches.clear()
            got = getattr(em, op)(x.to_device("cuda:0"), axis=axis)
            assert _ran(no_claimed_op_falls_back, f"eg_softmax_{op}_{dtype}"), f"{op} {dtype}: its kernel did not run"
            _close(got, getattr(em, op)(x, axis=axis), f"{op} {dtype} {shape} axis={axis}")


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_nll_loss_and_its_gradient_match_ember_cpu(no_claimed_op_falls_back: Any, reduction: str) -> None:
    rng = np.random.default_rng(9)
    n, c = 40, 7
    for dtype in _claimed("nll_loss"):
        lp = em.asarray(-rng.exponential(2.0, (n, c))).astype(dtype)
        target = em.asarray(np.where(rng.random(n) < 0.2, -100, rng.integers(0, c, n)).astype(np.int64))
        for weight in (None, em.asarray(rng.uniform(0.5, 2.0, c)).astype(dtype)):
            for smoothing in (0.0, 0.2):
                what = f"{dtype} {reduction} weighted={weight is not None} smoothing={smoothing}"
                kw = {"reduction": reduction, "label_smoothing": smoothing}
                cuda_weight = None if weight is None else weight.to_device("cuda:0")
                no_claimed_op_falls_back.launches.clear()
                got = em.nll_loss(lp.to_device("cuda:0"), target.to_device("cuda:0"), cuda_weight, **kw)
                assert _ran(no_claimed_op_falls_back, f"eg_loss_nll_loss_{dtype}"), what
                _close(got, em.nll_loss(lp, target, weight, **kw), f"nll_loss {what}")
                g = em.asarray(rng.normal(0, 1, n if reduction == "none" else ())).astype(dtype)
                got = em.nll_loss_grad(g.to_device("cuda:0"), target.to_device("cuda:0"), cuda_weight, n_classes=c,
                                       **kw)
                assert _ran(no_claimed_op_falls_back, f"eg_loss_nll_loss_grad_{dtype}"), what
                _close(got, em.nll_loss_grad(g, target, weight, n_classes=c, **kw), f"nll_loss_grad {what}")


def test_cross_entropy_backward_matches_ember_cpu(no_claimed_op_falls_back: Any) -> None:
    rng = np.random.default_rng(13)
    logits = rng.normal(0, 2, (32, 10))
    target = em.asarray(rng.integers(0, 10, 32).astype(np.int64))
    grads = []
    for device in ("cpu", "cuda:0"):
        x = em.asarray(logits).astype("float32").to_device(device).requires_grad_()
        F.cross_entropy(x, target.to_device(device), label_smoothing=0.1).backward()
        grads.append(x.grad)
    _close(grads[1], grads[0], "cross_entropy's gradient")
    assert _ran(no_claimed_op_falls_back, "eg_loss_nll_loss_grad_float32")


def test_layer_and_group_norm_match_ember_cpu(no_claimed_op_falls_back: Any) -> None:
    rng = np.random.default_rng(17)
    for dtype in _claimed("layer_norm"):
        x = em.asarray(rng.normal(2, 3, (6, 4, 30))).astype(dtype)
        w = em.asarray(rng.uniform(0.5, 2, (4, 30))).astype(dtype)
        b = em.asarray(rng.normal(0, 1, (4, 30))).astype(dtype)
        no_claimed_op_falls_back.launches.clear()
        got = em.layer_norm(x.to_device("cuda:0"), (4, 30), w.to_device("cuda:0"), b.to_device("cuda:0"))
        assert _ran(no_claimed_op_falls_back, f"eg_norm_rows_{dtype}"), f"layer_norm {dtype}"
        _close(got, em.layer_norm(x, (4, 30), w, b), f"layer_norm {dtype}")
        gw, gb = em.asarray(rng.uniform(0.5, 2, 4)).astype(dtype), em.asarray(rng.normal(0, 1, 4)).astype(dtype)
        for weight, bias in ((gw, gb), (None, None)):
            on_gpu = [None if t is None else t.to_device("cuda:0") for t in (weight, bias)]
            got = em.group_norm(x.to_device("cuda:0"), 2, *on_gpu)
            _close(got, em.group_norm(x, 2, weight, bias), f"group_norm {dtype} affine={weight is not None}")


def test_batch_norm_train_matches_ember_cpu(no_claimed_op_falls_back: Any) -> None:
    rng = np.random.default_rng(19)
    for dtype in _claimed("batch_norm_train"):
        x = em.asarray(rng.normal(1, 2, (5, 3, 4, 4))).astype(dtype)
        w, b = em.asarray(rng.uniform(0.5, 2, 3)).astype(dtype), em.asarray(rng.normal(0, 1, 3)).astype(dtype)
        stats, cuda_stats = em.empty((2, 3), dtype=x.dtype), em.empty((2, 3), dtype=x.dtype, device="cuda:0")
        no_claimed_op_falls_back.launches.clear()
        got = em.batch_norm_train(x.to_device("cuda:0"), cuda_stats, w.to_device("cuda:0"), b.to_device("cuda:0"))
        assert _ran(no_claimed_op_falls_back, f"eg_batchnorm_train_{dtype}"), f"batch_norm_train {dtype}"
        _close(got, em.batch_norm_train(x, stats, w, b), f"batch_norm_train {dtype}")
        _close(cuda_stats, stats, f"batch_norm_train {dtype} stats")


def test_dropout_gives_ember_cpus_bits(no_claimed_op_falls_back: Any) -> None:
    rng = np.random.default_rng(23)
    for dtype in _claimed("dropout"):
        x = em.asarray(rng.normal(0, 1, (7, 33))).astype(dtype)
        no_claimed_op_falls_back.launches.clear()
        got = em.dropout(x.to_device("cuda:0"), 0.25, seed=11, offset=3)
        assert _ran(no_claimed_op_falls_back, f"eg_dropout_dropout_{dtype}"), f"dropout {dtype}"
        want = em.dropout(x, 0.25, seed=11, offset=3)
        assert _host(got).tobytes() == _host(want).tobytes(), f"dropout {dtype}"


def test_optimizer_steps_give_ember_cpus_bits(no_claimed_op_falls_back: Any) -> None:
    rng = np.random.default_rng(31)
    sgd = {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 1e-2}
    adam = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "step": 2, "weight_decay": 1e-2, "decoupled": True}
    for dtype in _claimed("sgd_step"):
        for op, kw, count in (("sgd_step", sgd, 3), ("adam_step", adam, 4)):
            tensors = [em.asarray(rng.uniform(0, 1, (9, 13))).astype(dtype) for _ in range(count)]
            on_gpu = [t.to_device("cuda:0") for t in tensors]
            no_claimed_op_falls_back.launches.clear()
            getattr(em, op)(*on_gpu, **kw)
            getattr(em, op)(*tensors, **kw)
            assert _ran(no_claimed_op_falls_back, f"eg_update_{op.split('_')[0]}_{dtype}"), f"{op} {dtype}"
            for k, (got, want) in enumerate(zip(on_gpu, tensors)):
                assert _host(got).tobytes() == _host(want).tobytes(), f"{op} {dtype} tensor {k}"

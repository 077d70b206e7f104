"""ember-cuda's optimizer steps over whole parameter groups on ember-gpu's fake driver running the
real kernels on the host: sgd_step and adam_step given lists make ONE launch of the group kernel
(eg_updates_<sgd|adam>_<dtype>) and give ember-cpu's bits for every parameter in every claimed dtype;
a group of one and a group that is not all contiguous take the per-parameter kernel; the
optimizers (SGD, Adam) run one group launch per step, uploading at most one item array per step
(none when the group's tensors are the ones of an earlier step)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember_core as em
from ember_core import dtypes

ember_cuda = pytest.importorskip("ember_cuda")
from ember_gpu import ops  # noqa: E402

pytestmark = [pytest.mark.no_device]

CLAIMED = ops.claimed(ops.OpLayer(ops.kernel_index(ops.package_kernels("ember_cuda"))).table())
SHAPES = ((9, 13), (1,), (300,), (4, 4, 4))
SGD = {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 1e-2}
ADAM = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "step": 2, "weight_decay": 1e-2, "decoupled": True}
STEPS = {"sgd_step": (SGD, 3), "adam_step": (ADAM, 4)}  # op -> (attributes, tensors per parameter)


def _host_bits(t: Any) -> bytes:
    t = t.to_device("cpu")
    return (t.astype("float32") if t.dtype == dtypes.bfloat16 else t).numpy().tobytes()


def _launched(fake: Any, prefix: str) -> int:
    return sum(launch.kernel.startswith(prefix) for launch in fake.launches)


def _group(rng: np.random.Generator, dtype: str, count: int, shapes: tuple = SHAPES) -> list[list[Any]]:
    """count lists (param, grad, state...) of one tensor per shape, on the host."""
    return [[em.asarray(rng.uniform(0, 1, shape)).astype(dtype) for shape in shapes] for _ in range(count)]


@pytest.mark.parametrize("op", sorted(STEPS))
def test_a_group_is_one_launch_with_ember_cpus_bits(no_claimed_op_falls_back: Any, op: str) -> None:
    rng = np.random.default_rng(61)
    kw, count = STEPS[op]
    name = op.split("_")[0]
    for dtype in CLAIMED[op]:
        lists = _group(rng, dtype, count)
        on_gpu = [[t.to_device("cuda:0") for t in tensors] for tensors in lists]
        no_claimed_op_falls_back.launches.clear()
        getattr(em, op)(*on_gpu, **kw)
        assert _launched(no_claimed_op_falls_back, f"eg_updates_{name}_{dtype}") == 1, f"{op} {dtype}"
        assert _launched(no_claimed_op_falls_back, f"eg_update_{name}_") == 0, f"{op} {dtype}"
        before = no_claimed_op_falls_back.count("memcpy_htod_async")
        getattr(em, op)(*on_gpu, **kw)  # the same tensors again: their item array is reused
        assert no_claimed_op_falls_back.count("memcpy_htod_async") == before, f"{op} {dtype}: uploaded again"
        for _ in range(2):
            getattr(em, op)(*lists, **kw)
        for k, (got, want) in enumerate(zip(on_gpu, lists)):
            for i, (g, w) in enumerate(zip(got, want)):
                assert _host_bits(g) == _host_bits(w), f"{op} {dtype} tensor {k} of parameter {i}"


def test_one_parameter_or_a_strided_one_runs_per_parameter(no_claimed_op_falls_back: Any) -> None:
    rng = np.random.default_rng(67)
    single = [[t.to_device("cuda:0")] for t in (em.asarray(rng.uniform(0, 1, 5)).astype("float32") for _ in range(3))]
    no_claimed_op_falls_back.launches.clear()
    em.sgd_step(*single, **SGD)
    assert _launched(no_claimed_op_falls_back, "eg_update_sgd_float32") == 1
    assert _launched(no_claimed_op_falls_back, "eg_updates_") == 0
    lists = [[t.to_device("cuda:0") for t in tensors] for tensors in _group(rng, "float32", 3, ((6, 4), (5,)))]
    lists[0][0] = lists[0][0].permute_dims((1, 0))  # a transposed param (its gradient and buffer alike)
    lists[1][0], lists[2][0] = lists[1][0].permute_dims((1, 0)), lists[2][0].permute_dims((1, 0))
    want = [[t.to_device("cpu") for t in tensors] for tensors in lists]
    no_claimed_op_falls_back.launches.clear()
    em.sgd_step(*lists, **SGD)
    em.sgd_step(*want, **SGD)
    assert _launched(no_claimed_op_falls_back, "eg_updates_") == 0
    for got, expected in zip(lists, want):
        for g, w in zip(got, expected):
            assert _host_bits(g) == _host_bits(w)


def test_optimizers_step_each_group_in_one_launch(no_claimed_op_falls_back: Any) -> None:
    """SGD with momentum and Adam over a small model's parameters: one group launch per step, at
    most one upload (the gradients are new tensors each step), results as on cpu."""
    rng = np.random.default_rng(73)
    for make, name in ((lambda p: em.optim.SGD(p, lr=0.1, momentum=0.9), "sgd"),
                       (lambda p: em.optim.Adam(p, lr=1e-2), "adam")):
        values = [rng.normal(0, 1, shape) for shape in SHAPES]
        grads = [rng.normal(0, 1, shape) for shape in SHAPES]
        runs = {}
        for device in ("cpu", "cuda:0"):
            params = [em.asarray(v).astype("float32").to_device(device).requires_grad_() for v in values]
            optimizer = make(params)
            no_claimed_op_falls_back.launches.clear()
            uploads = []
            for _ in range(3):
                for p, g in zip(params, grads):
                    p.grad = em.asarray(g).astype("float32").to_device(device)
                before = no_claimed_op_falls_back.count("memcpy_htod_async")
                optimizer.step()
                uploads.append(no_claimed_op_falls_back.count("memcpy_htod_async") - before)
            if device != "cpu":
                assert _launched(no_claimed_op_falls_back, f"eg_updates_{name}_float32") == 3, name
                assert _launched(no_claimed_op_falls_back, f"eg_update_{name}_") == 0, name
                assert all(n <= 1 for n in uploads), f"{name}: uploads per step {uploads}"
            runs[device] = [_host_bits(p.detach()) for p in params]
        assert runs["cpu"] == runs["cuda:0"], name

"""The update family (ember_core/ops/optim.toml): adam_step against a float64 reference, its
in-place contract (what is written, version counters, the composite for other layouts) and its
bad inputs.  That a native kernel equals the composite bit for bit is ember-cpu's test."""

from __future__ import annotations

import numpy as np
import pytest
from ember_conformance.references import adam_reference as reference

import ember_core as em
from ember_core.ops.optim_composites import adam_step as composite

HYPER = {"lr": 0.05, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}


def state(dtype: str, shape=(6, 7), seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    p, g, m = (rng.standard_normal(shape) for _ in range(3))
    return [a.astype(dtype) for a in (p, g, m, rng.random(shape))]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("options", [{}, {"weight_decay": 0.1}, {"weight_decay": 0.1, "decoupled": True},
                                     {"maximize": True}], ids=["adam", "l2", "adamw", "maximize"])
@pytest.mark.parametrize("fn", [em.adam_step, composite], ids=["op", "composite"])
def test_adam_step_matches_the_reference(dtype, options, fn):
    arrays = state("float32")
    tensors = [em.asarray(a).astype(getattr(em, dtype)) for a in arrays]
    want = [a.astype(np.float64) for a in arrays]
    for step in (1, 2, 3):
        kwargs = {**HYPER, "step": step, **options}
        assert fn(*tensors, **kwargs) is tensors[0]
        want[0], want[2], want[3] = reference(*want, **kwargs)
    tol = {"float32": 1e-5, "float64": 1e-12, "float16": 2e-2, "bfloat16": 5e-2}[dtype]
    for got, expected in zip(tensors[::2] + tensors[3:], want[::2] + want[3:]):
        np.testing.assert_allclose(got.astype(em.float64).numpy(), expected, rtol=tol, atol=tol)


def test_adam_step_writes_param_and_state_and_moves_their_versions():
    p, g, m, v = (em.asarray(a) for a in state("float32"))
    before = [t._storage.version for t in (p, g, m, v)]
    grad_values = g.numpy().copy()
    em.adam_step(p, g, m, v, **HYPER, step=1)
    after = [t._storage.version for t in (p, g, m, v)]
    assert [b - a for a, b in zip(before, after)] == [1, 0, 1, 1]
    np.testing.assert_array_equal(g.numpy(), grad_values)


def test_adam_step_on_views_runs_the_composite_and_writes_through():
    arrays = state("float32", (6, 14))
    tensors = [em.asarray(a) for a in arrays]
    views = [t[:, ::2] for t in tensors]
    with em.trace_dispatch() as log:
        em.adam_step(*views, **HYPER, step=2)
    assert log.providers()["adam_step"] == {"composite": 1}
    want = reference(*(a[:, ::2].astype(np.float64) for a in arrays), **HYPER, step=2)
    np.testing.assert_allclose(tensors[0].numpy()[:, ::2], want[0], rtol=1e-5)
    np.testing.assert_array_equal(tensors[0].numpy()[:, 1::2], arrays[0][:, 1::2])  # the rest untouched


@pytest.mark.parametrize(("change", "error"), [
    (lambda t: [t[0], t[1], t[2][:5], t[3]], em.ShapeError),
    (lambda t: [t[0], t[1].astype(em.float64), t[2], t[3]], em.DTypeError),
    (lambda t: [t[0], t[1], t[0], t[3]], ValueError),  # exp_avg is the parameter itself
    (lambda t: [t[0].astype(em.int32), t[1].astype(em.int32), t[2].astype(em.int32), t[3].astype(em.int32)],
     em.DTypeError),
])
def test_adam_step_rejects_mismatched_tensors(change, error):
    tensors = [em.asarray(a) for a in state("float32")]
    snapshot = [t.numpy().copy() for t in tensors]
    with pytest.raises(error):
        em.adam_step(*change(tensors), **HYPER, step=1)
    for t, before in zip(tensors, snapshot):
        np.testing.assert_array_equal(t.numpy(), before)  # nothing was written


@pytest.mark.parametrize("bad", [{"step": 0}, {"step": 1.5}, {"beta1": 1.0}, {"lr": -0.1}, {"eps": float("nan")},
                                 {"weight_decay": float("inf")}])
def test_adam_step_rejects_bad_hyperparameters(bad):
    tensors = [em.asarray(a) for a in state("float32")]
    with pytest.raises(ValueError):
        em.adam_step(*tensors, **{**HYPER, "step": 1, **bad})


def test_adam_step_refuses_to_write_a_parameter_that_autograd_records():
    p, g, m, v = (em.asarray(a) for a in state("float32"))
    p.requires_grad = True
    with pytest.raises(RuntimeError, match="no_grad"):
        em.adam_step(p, g, m, v, **HYPER, step=1)
    with em.no_grad():
        em.adam_step(p, g, m, v, **HYPER, step=1)

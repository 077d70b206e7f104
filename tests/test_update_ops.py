"""The update family (ember_core/ops/optim.toml): adam_step and sgd_step against float64
references, their in-place contract (what is written, version counters, the composite for other
layouts) and their bad inputs.  That a native kernel equals the composite bit for bit is
ember-cpu's test."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pytest
from ember_conformance.references import adam_reference, sgd_reference

import ember_core as em
from ember_core.ops import optim_composites


class Update(NamedTuple):
    op: Any
    composite: Any
    reference: Any  # float64 arrays -> the new values of the written tensors, in order
    tensors: int  # param, grad, then the state
    hyper: dict[str, Any]  # a valid call's keywords

    @property
    def written(self) -> list[int]:  # every tensor but the gradient
        return [0, *range(2, self.tensors)]


UPDATES = {
    "adam_step": Update(em.adam_step, optim_composites.adam_step, adam_reference, 4,
                        {"lr": 0.05, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "step": 1}),
    "sgd_step": Update(em.sgd_step, optim_composites.sgd_step, sgd_reference, 3, {"lr": 0.05, "momentum": 0.9}),
}
# per step: the keywords that change as training goes on
STEPS = {"adam_step": lambda i: {"step": i + 1}, "sgd_step": lambda i: {"first_step": i == 0}}
OPTIONS = {
    "adam_step": {"adam": {}, "l2": {"weight_decay": 0.1}, "adamw": {"weight_decay": 0.1, "decoupled": True},
                  "maximize": {"maximize": True}},
    "sgd_step": {"momentum": {}, "dampening-l2": {"dampening": 0.3, "weight_decay": 0.1},
                 "nesterov": {"nesterov": True, "weight_decay": 0.1}, "maximize": {"maximize": True}},
}
TOLERANCE = {"float32": 1e-5, "float64": 1e-12, "float16": 2e-2, "bfloat16": 5e-2}


def state(update: Update, dtype: str = "float32", shape=(6, 7), seed: int = 0) -> list[np.ndarray]:
    """param, grad and state arrays; the last of four (Adam's second moment) is >= 0."""
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(shape) for _ in range(3)] + [rng.random(shape)]
    return [a.astype(dtype) for a in arrays[:update.tensors]]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize(("name", "options"), [(n, o) for n in OPTIONS for o in OPTIONS[n].values()],
                         ids=[f"{n}-{o}" for n in OPTIONS for o in OPTIONS[n]])
@pytest.mark.parametrize("through", ["op", "composite"])
def test_update_matches_the_reference(dtype, name, options, through):
    update = UPDATES[name]
    fn = update.op if through == "op" else update.composite
    arrays = state(update)
    tensors = [em.asarray(a).astype(getattr(em, dtype)) for a in arrays]
    want = [a.astype(np.float64) for a in arrays]
    for i in range(3):
        kwargs = {**update.hyper, **options, **STEPS[name](i)}
        assert fn(*tensors, **kwargs) is tensors[0]
        for k, value in zip(update.written, update.reference(*want, **kwargs)):
            want[k] = value
    tol = TOLERANCE[dtype]
    for k in update.written:
        np.testing.assert_allclose(tensors[k].astype(em.float64).numpy(), want[k], rtol=tol, atol=tol)


def test_sgd_step_first_step_takes_the_gradient_as_the_buffer_whatever_it_held():
    update = UPDATES["sgd_step"]
    p, g, b = (em.asarray(a) for a in state(update, "float64"))
    b[...] = float("nan")  # an empty_like buffer may hold anything
    em.sgd_step(p, g, b, lr=0.1, momentum=0.9, dampening=0.5, first_step=True)
    np.testing.assert_array_equal(b.numpy(), g.numpy())


@pytest.mark.parametrize("name", UPDATES)
def test_update_writes_param_and_state_and_moves_their_versions(name):
    update = UPDATES[name]
    tensors = [em.asarray(a) for a in state(update)]
    before = [t._storage.version for t in tensors]
    grad_values = tensors[1].numpy().copy()
    update.op(*tensors, **update.hyper)
    moved = [t._storage.version - v for t, v in zip(tensors, before)]
    assert moved == [int(k in update.written) for k in range(update.tensors)]
    np.testing.assert_array_equal(tensors[1].numpy(), grad_values)


@pytest.mark.parametrize("name", UPDATES)
def test_update_on_views_runs_the_composite_and_writes_through(name):
    update = UPDATES[name]
    arrays = state(update, shape=(6, 14))
    tensors = [em.asarray(a) for a in arrays]
    with em.trace_dispatch() as log:
        update.op(*(t[:, ::2] for t in tensors), **update.hyper)
    assert log.providers()[name] == {"composite": 1}
    want = update.reference(*(a[:, ::2].astype(np.float64) for a in arrays), **update.hyper)
    np.testing.assert_allclose(tensors[0].numpy()[:, ::2], want[0], rtol=1e-5)
    np.testing.assert_array_equal(tensors[0].numpy()[:, 1::2], arrays[0][:, 1::2])  # the rest untouched


@pytest.mark.parametrize("name", UPDATES)
@pytest.mark.parametrize(("change", "error"), [
    (lambda t: [*t[:2], t[2][:5], *t[3:]], em.ShapeError),
    (lambda t: [t[0], t[1].astype(em.float64), *t[2:]], em.DTypeError),
    (lambda t: [t[0], t[1], t[0], *t[3:]], ValueError),  # the state is the parameter itself
    (lambda t: [x.astype(em.int32) for x in t], em.DTypeError),
], ids=["shape", "dtype", "aliased", "integer"])
def test_update_rejects_mismatched_tensors(name, change, error):
    update = UPDATES[name]
    tensors = [em.asarray(a) for a in state(update)]
    snapshot = [t.numpy().copy() for t in tensors]
    with pytest.raises(error):
        update.op(*change(tensors), **update.hyper)
    for t, before in zip(tensors, snapshot):
        np.testing.assert_array_equal(t.numpy(), before)  # nothing was written


@pytest.mark.parametrize(("name", "bad", "match"), [
    ("adam_step", {"step": 0}, "step"), ("adam_step", {"step": 1.5}, "step"), ("adam_step", {"beta1": 1.0}, "below 1"),
    ("adam_step", {"lr": -0.1}, "lr"), ("adam_step", {"eps": float("nan")}, "eps"),
    ("adam_step", {"weight_decay": float("inf")}, "weight_decay"),
    ("sgd_step", {"momentum": 0.0}, "momentum > 0"), ("sgd_step", {"nesterov": True, "dampening": 0.1}, "dampening"),
    ("sgd_step", {"lr": -0.1}, "lr"), ("sgd_step", {"momentum": float("nan")}, "momentum"),
    ("sgd_step", {"dampening": True}, "dampening"), ("adam_step", {"lr": [0.1]}, "lr"),
])
def test_update_rejects_bad_hyperparameters(name, bad, match):
    update = UPDATES[name]
    tensors = [em.asarray(a) for a in state(update)]
    with pytest.raises(ValueError, match=match):
        update.op(*tensors, **{**update.hyper, **bad})


@pytest.mark.parametrize(("name", "good", "bad"), [("adam_step", {"step": 1}, {"step": True}),
                                                 ("sgd_step", {"dampening": 1}, {"dampening": True}),
                                                 ("adam_step", {"lr": 0.0}, {"lr": False})])
def test_a_validated_setting_admits_no_equal_value_of_another_type(name, good, bad):
    """Hyperparameters are validated once per setting: True == 1, but only 1 is a number."""
    update = UPDATES[name]
    tensors = [em.asarray(a) for a in state(update)]
    update.op(*tensors, **{**update.hyper, **good})
    with pytest.raises(ValueError):
        update.op(*tensors, **{**update.hyper, **bad})


@pytest.mark.parametrize("name", UPDATES)
def test_update_refuses_to_write_a_parameter_that_autograd_records(name):
    update = UPDATES[name]
    tensors = [em.asarray(a) for a in state(update)]
    tensors[0].requires_grad = True
    with pytest.raises(RuntimeError, match="no_grad"):
        update.op(*tensors, **update.hyper)
    with em.no_grad():
        update.op(*tensors, **update.hyper)


@pytest.mark.parametrize("name", UPDATES)
def test_lists_update_a_group_as_separate_calls_would(name):
    """One call over lists of tensors (an optimizer's parameter group, mixed shapes, a strided one
    that takes the composite) writes the bits that one call per tensor writes."""
    update = UPDATES[name]
    shapes = [(3, 4), (7,), (2, 3, 5)]
    arrays = [state(update, shape=shape, seed=i) for i, shape in enumerate(shapes)]
    one_by_one = [[em.asarray(a) for a in group] for group in arrays]
    for group in one_by_one:
        update.op(*group, **update.hyper)
    grouped = [[em.asarray(a) for a in group] for group in arrays]
    grouped[1] = [em.asarray(np.stack([a, a], axis=1))[:, 0] for a in arrays[1]]  # strided: the composite
    returned = update.op(*([group[k] for group in grouped] for k in range(update.tensors)), **update.hyper)
    assert [r is group[0] for r, group in zip(returned, grouped)] == [True] * len(shapes)
    for want, got in zip(one_by_one, grouped):
        for k in update.written:
            np.testing.assert_array_equal(got[k].numpy(), want[k].numpy())


@pytest.mark.parametrize("name", UPDATES)
def test_a_bad_list_entry_fails_the_call_before_anything_is_written(name):
    update = UPDATES[name]
    good = [em.asarray(a) for a in state(update, seed=1)]
    bad = [em.asarray(a) for a in state(update, seed=2)]
    bad[update.tensors - 1] = bad[update.tensors - 1][:5]  # a state of the wrong shape, at index 1
    before = good[0].numpy().copy()
    with pytest.raises(em.ShapeError):
        update.op(*([g, b] for g, b in zip(good, bad)), **update.hyper)
    np.testing.assert_array_equal(good[0].numpy(), before)
    with pytest.raises(ValueError, match="appears again"):  # one parameter twice in the group
        update.op(*([g, g] for g in good), **update.hyper)
    with pytest.raises(TypeError, match="all lists of one length"):
        update.op(*([g] for g in good[:-1]), [good[-1], good[-1]], **update.hyper)
    with pytest.raises(TypeError, match="all lists of one length"):
        update.op([good[0]], *good[1:], **update.hyper)


def test_a_traced_update_kernel_keeps_its_grouped_form():
    """Under trace_dispatch a kernel's whole-group form still runs (one call for the group), and the
    trace counts it per parameter, as the per-parameter calls would count."""
    from ember_core.dispatch import Trace, _traced

    calls = []

    def kernel(*args, **attrs):
        calls.append("one")

    def grouped(params, grads, **attrs):
        calls.append(len(params))

    kernel.grouped = grouped
    log = Trace()
    traced = _traced(kernel, log, "sgd_step", "toy", em.float32, "toy", "native")
    traced.grouped([1, 2, 3], [4, 5, 6], lr=0.1)
    assert calls == [3] and log.counts == {("sgd_step", "toy", "float32", "toy", "native"): 3}

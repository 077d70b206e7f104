"""A 0-d tensor and an axis (issue 24, item 6).  PyTorch's rule, which the Array API leaves to the
library: axis 0 or -1 is accepted on a 0-d tensor, the op sees one element along that axis, and
its result is 0-d (a reduction of a 0-d tensor is that value).  Every op whose registry signature
takes an axis has a case here, checked against torch 2.13 (values, shape, dtype and the gradient
of a 0-d result with respect to the 0-d input) on cpu and on vulkan:0 (conftest.py's device
fixture); a new axis op fails
test_every_axis_op_has_a_case until it has one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch

import ember_core as em
from ember_core.ops.registry import REGISTRY

AXIS_PARAMS = frozenset({"axis", "axes", "dim", "start_dim", "end_dim", "source", "destination"})
VALUE = 3.5


class Case(NamedTuple):
    ember: Callable[[Any, int], Any]  # (0-d x, axis) -> result
    torch: Callable[[Any, int], Any] | None  # (0-d t, dim) -> the reference; None: ember refuses, as torch does
    differentiable: bool = True


def _torch_on_one_element(fn: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
    """The rule spelled out for ops torch itself refuses on a 0-d tensor (roll, unbind, tensordot):
    torch on the one-element 1-d view, the result given back as 0-d."""
    def reference(t: Any, dim: int) -> Any:
        out = fn(t.reshape(1), dim)
        return tuple(o.reshape(()) for o in out) if isinstance(out, tuple) else out.reshape(())

    return reference


def _index(device: Any) -> Any:
    return em.asarray([0], device=device)


CASES: dict[str, Case] = {
    "sum": Case(lambda x, a: em.sum(x, axis=a), lambda t, d: torch.sum(t, dim=d)),
    "prod": Case(lambda x, a: em.prod(x, axis=a, keepdims=True), lambda t, d: torch.prod(t, dim=d, keepdim=True)),
    "max": Case(lambda x, a: em.max(x, axis=a), lambda t, d: torch.amax(t, dim=d)),
    "min": Case(lambda x, a: em.min(x, axis=(a,), keepdims=True), lambda t, d: torch.amin(t, dim=d, keepdim=True)),
    "any": Case(lambda x, a: em.any(x, axis=a), lambda t, d: torch.any(t, dim=d), False),
    "all": Case(lambda x, a: em.all(x, axis=a), lambda t, d: torch.all(t, dim=d), False),
    "argmax": Case(lambda x, a: em.argmax(x, axis=a), lambda t, d: torch.argmax(t, dim=d), False),
    "argmin": Case(lambda x, a: em.argmin(x, axis=a, keepdims=True), lambda t, d: torch.argmin(t, dim=d, keepdim=True),
                   False),
    "cumulative_sum": Case(lambda x, a: em.cumulative_sum(x, axis=a), lambda t, d: torch.cumsum(t, dim=d)),
    "cumulative_prod": Case(lambda x, a: em.cumulative_prod(x, axis=a), lambda t, d: torch.cumprod(t, dim=d)),
    "sort": Case(lambda x, a: em.sort(x, axis=a, descending=True), lambda t, d: torch.sort(t, dim=d).values),
    "argsort": Case(lambda x, a: em.argsort(x, axis=a), lambda t, d: torch.argsort(t, dim=d), False),
    "mean": Case(lambda x, a: em.mean(x, axis=a), lambda t, d: torch.mean(t, dim=d)),
    "var": Case(lambda x, a: em.var(x, axis=a), lambda t, d: torch.var(t, dim=d, correction=0)),
    "std": Case(lambda x, a: em.std(x, axis=a, keepdims=True), lambda t, d: torch.std(t, dim=d, correction=0,
                                                                                     keepdim=True)),
    "count_nonzero": Case(lambda x, a: em.count_nonzero(x, axis=a), lambda t, d: torch.count_nonzero(t, dim=d),
                          False),
    "vecdot": Case(lambda x, a: em.vecdot(x, x * 2.0, axis=a), lambda t, d: torch.linalg.vecdot(t, t * 2.0, dim=d)),
    "tensordot": Case(lambda x, a: em.tensordot(x, x * 2.0, axes=([a], [a])),
                      _torch_on_one_element(lambda t, d: torch.tensordot(t, t * 2.0, dims=([d], [d])))),
    "softmax": Case(lambda x, a: em.softmax(x, a), lambda t, d: torch.softmax(t, dim=d)),
    "log_softmax": Case(lambda x, a: em.nn.functional.log_softmax(x, a), lambda t, d: torch.log_softmax(t, dim=d)),
    "take": Case(lambda x, a: em.take(x, _index(x.device), axis=a),
                 lambda t, d: torch.index_select(t, d, torch.tensor([0]))),
    "index_put": Case(lambda x, a: em.index_put(x.detach() + 0.0, _index(x.device), 1.0, axis=a, accumulate=True),
                      lambda t, d: t.detach().clone().index_add_(d, torch.tensor([0]), torch.tensor(1.0)), False),
    "roll": Case(lambda x, a: em.roll(x, 1, axis=a), _torch_on_one_element(lambda t, d: torch.roll(t, 1, d))),
    "unstack": Case(lambda x, a: em.unstack(x, axis=a), _torch_on_one_element(lambda t, d: torch.unbind(t, d))),
    "views.squeeze": Case(lambda x, a: em.squeeze(x, a), lambda t, d: torch.squeeze(t, d)),
    "views.flip_view": Case(lambda x, a: em.flip(x, axis=a), lambda t, d: torch.flip(t, (d,))),
    "views.expand_dims": Case(lambda x, a: em.expand_dims(x, axis=a), lambda t, d: torch.unsqueeze(t, d)),
    "stack": Case(lambda x, a: em.stack([x, x * 2.0], axis=a), lambda t, d: torch.stack([t, t * 2.0], dim=d)),
    # the result would not be 0-d: refused with a ShapeError that says what to do (PyTorch refuses too)
    "repeat": Case(lambda x, a: em.repeat(x, 2, axis=a), None),
    "concat": Case(lambda x, a: em.concat([x, x], axis=a), None),
    # the standard asks for a permutation of every axis: a 0-d tensor's is ()
    "views.permute_dims": Case(lambda x, a: em.permute_dims(x, (a,)), None),
}
# axis functions that are not registry ops
CASES_OUTSIDE_THE_REGISTRY: dict[str, Case] = {
    "moveaxis": Case(lambda x, a: em.moveaxis(x, a, 0), lambda t, d: torch.movedim(t, d, 0)),
    "transpose": Case(lambda x, a: x.transpose(a, 0), lambda t, d: torch.transpose(t, d, 0)),
    "flatten": Case(lambda x, a: x.flatten(a, a), lambda t, d: torch.flatten(t, d, d)),
}
ALL_CASES = {**CASES, **CASES_OUTSIDE_THE_REGISTRY}


def axis_ops() -> list[str]:
    return sorted(s.name for s in REGISTRY if AXIS_PARAMS & {p.name for p in s.params})


def test_every_axis_op_has_a_case():
    missing = [name for name in axis_ops() if name not in CASES]
    assert not missing, f"ops that take an axis without a 0-d case in {__file__}: {missing}"
    assert not set(CASES) - set(axis_ops()), "a case for an op that takes no axis"


def _results(out: Any) -> tuple[Any, ...]:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _torch_dtype_name(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def _check_matches_torch(out: Any, ref: Any) -> None:
    outs, refs = _results(out), _results(ref)
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs):
        assert o.shape == tuple(r.shape)
        assert o.dtype.name == _torch_dtype_name(r)
        np.testing.assert_allclose(np.asarray(o.tolist(), dtype=np.float64), r.double().detach().numpy(),
                                   rtol=1e-6, atol=0)


@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("name", sorted(ALL_CASES))
def test_zero_dim_axis_follows_torch(name, axis, device):
    case = ALL_CASES[name]
    x = em.asarray(VALUE, dtype=em.float32, device=device)
    if case.torch is None:
        with pytest.raises(em.ShapeError, match="0-d"):
            case.ember(x, axis)
        return
    out = case.ember(x, axis)
    _check_matches_torch(out, case.torch(torch.tensor(VALUE, dtype=torch.float32), axis))
    if case.differentiable:
        x.requires_grad = True
        loss = sum(em.sum(o) for o in _results(case.ember(x, axis)))
        loss.backward()
        t = torch.tensor(VALUE, dtype=torch.float32, requires_grad=True)
        sum(torch.sum(r) for r in _results(case.torch(t, axis))).backward()
        assert x.grad.shape == () and x.grad.device == x.device
        np.testing.assert_allclose(float(x.grad.item()), float(t.grad), rtol=1e-6)


@pytest.mark.parametrize("name", sorted(ALL_CASES))
def test_zero_dim_axis_out_of_range_is_refused(name):
    """Axis 1 (and -2) is out of range for a 0-d tensor in every op (expand_dims: the Array API's
    IndexError; the others: ShapeError, a ValueError)."""
    x = em.asarray(VALUE)
    error = IndexError if name == "views.expand_dims" else em.ShapeError
    for axis in (1, -2):
        with pytest.raises(error):
            ALL_CASES[name].ember(x, axis)


def test_repeated_axis_of_a_zero_dim_tensor_is_refused():
    x = em.asarray(VALUE)
    for reduce in (em.sum, em.max, em.squeeze, em.flip):
        with pytest.raises(em.ShapeError, match="repeated axis"):
            reduce(x, axis=(0, -1)) if reduce is not em.squeeze else reduce(x, (0, -1))


def test_cumulative_include_initial_of_a_zero_dim_tensor_is_refused():
    """The result with its initial value holds two values, which a 0-d result cannot."""
    for scan in (em.cumulative_sum, em.cumulative_prod):
        with pytest.raises(em.ShapeError, match="0-d"):
            scan(em.asarray(VALUE), axis=0, include_initial=True)


def test_take_from_a_zero_dim_tensor_takes_one_index():
    x = em.asarray(VALUE)
    assert em.take(x, em.asarray([-1]), axis=0).item() == VALUE
    with pytest.raises(em.ShapeError, match="exactly one index"):
        em.take(x, em.asarray([0, 0]), axis=0)
    with pytest.raises(IndexError):
        em.take(x, em.asarray([1]), axis=0)


def test_index_put_writes_a_zero_dim_tensor_in_place():
    x = em.asarray(VALUE)
    out = em.index_put(x, em.asarray([0, -1]), em.asarray([1.0, 2.0]), axis=-1, accumulate=True)
    assert out is x and x.shape == () and x.item() == VALUE + 3.0

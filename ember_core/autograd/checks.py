"""Gradients checked against central finite differences in float64 (complex128 for complex).

For every output element k (and, for complex outputs, also i times it), the analytical
vector-Jacobian product with that one-hot vector is compared with the numerical derivative of
L(x) = Re(sum(conj(v) * f(x))), whose gradient under ember's convention (PyTorch's conjugate
Wirtinger one) is dL/dRe(x) + i dL/dIm(x).  Inputs are small in tests, so the full Jacobian is
affordable and every entry is compared.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember_core import dtypes as dt
from ember_core.autograd.engine import grad as autograd_grad
from ember_core.autograd.grad_mode import no_grad
from ember_core.tensor import Tensor


class GradcheckError(AssertionError):
    """The analytical and numerical gradients disagree (the message has the worst entry)."""


def _outputs(fn: Callable[..., Any], inputs: Sequence[Any]) -> list[Tensor]:
    out = fn(*inputs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return [o for o in outs if isinstance(o, Tensor) and o._dtype.kind in "fc"]


def _set_element(t: Tensor, flat_index: int, value: Any) -> None:
    from ember_core.creation import asarray

    with no_grad():
        t.reshape((-1,))[flat_index] = asarray(value, dtype=t._dtype, device=t._device)


def _element(t: Tensor, flat_index: int) -> Any:
    return t.reshape((-1,))[flat_index].item()


def gradcheck(fn: Callable[..., Any], inputs: Any, *, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              raise_exception: bool = True) -> bool:
    """True when fn's gradients w.r.t. every input that requires grad match finite differences.

    Inputs that require grad must be float64 or complex128 and contiguous (they are perturbed in
    place, one element at a time, and restored)."""
    inputs = list(inputs) if isinstance(inputs, (tuple, list)) else [inputs]
    wrt = [t for t in inputs if isinstance(t, Tensor) and t._requires_grad]
    if not wrt:
        raise ValueError("gradcheck: no input requires grad")
    for t in wrt:
        if t._dtype not in (dt.float64, dt.complex128):
            raise TypeError(f"gradcheck needs float64/complex128 inputs for accurate finite differences, got "
                            f"{t._dtype.name}; convert with .astype(ember_core.float64)")
    outs = _outputs(fn, inputs)
    jacobians = [_numerical_jacobians(fn, inputs, t, eps) for t in wrt]  # per input: (re, im) steps
    for k_out, out in enumerate(outs):
        directions = [1.0, 1j] if out._dtype.kind == "c" else [1.0]
        for k in range(out._numel):
            for v in directions:
                analytical = _analytical(fn, inputs, wrt, k_out, k, v)
                for i, t in enumerate(wrt):
                    numerical = sum(step * (np.conj(v) * jac[k_out][k]).real for step, jac in jacobians[i])
                    numerical = np.asarray(numerical).reshape(t._shape)
                    a = analytical[i]
                    if not np.allclose(a, numerical, atol=atol, rtol=rtol, equal_nan=True):
                        worst = int(np.argmax(np.abs(a - numerical)))
                        message = (f"gradcheck: input {i} (shape {t._shape}), output {k_out} element {k} direction "
                                   f"{v}: analytical {a.reshape(-1)[worst]} vs numerical "
                                   f"{numerical.reshape(-1)[worst]} at element {worst} (atol {atol}, rtol {rtol})")
                        if raise_exception:
                            raise GradcheckError(message)
                        return False
    return True


def _analytical(fn: Callable[..., Any], inputs: list[Any], wrt: list[Tensor], k_out: int, k: int,
                v: complex) -> list[np.ndarray]:
    from ember_core.creation import zeros

    outs = _outputs(fn, inputs)
    out = outs[k_out]
    if not out._requires_grad:
        return [np.zeros(t._shape, dtype=t._dtype.numpy) for t in wrt]
    seed = zeros(out._shape, dtype=out._dtype, device=out._device)
    _set_element(seed, k, v)
    grads = autograd_grad([out], wrt, [seed], retain_graph=False, allow_unused=True)
    return [np.zeros(t._shape, dtype=t._dtype.numpy) if g is None else np.asarray(g) for t, g in zip(wrt, grads)]


def _numerical_jacobians(fn: Callable[..., Any], inputs: list[Any], t: Tensor, eps: float
                         ) -> list[tuple[complex, list[np.ndarray]]]:
    """For each perturbation direction of t's elements (1, and i for complex t): per output, the
    matrix d out[k] / d t[j] (complex), by central differences."""
    steps = [1.0, 1j] if t._dtype.kind == "c" else [1.0]
    result = []
    for step in steps:
        columns: list[list[np.ndarray]] = []
        for j in range(t._numel):
            original = _element(t, j)
            _set_element(t, j, original + step * eps)
            plus = _evaluate(fn, inputs)
            _set_element(t, j, original - step * eps)
            minus = _evaluate(fn, inputs)
            _set_element(t, j, original)
            columns.append([(p - m) / (2 * eps) for p, m in zip(plus, minus)])
        if columns:
            per_output = [np.stack([c[o] for c in columns], axis=1) for o in range(len(columns[0]))]
        else:  # t has no elements: no column, but a row per output element
            per_output = [np.zeros((o.size, 0), dtype=np.complex128) for o in _evaluate(fn, inputs)]
        result.append((step, per_output))
    return result


def _evaluate(fn: Callable[..., Any], inputs: list[Any]) -> list[np.ndarray]:
    # grad mode stays on: gradgradcheck's fn itself calls grad(..., create_graph=True)
    return [np.asarray(o.detach()).astype(np.complex128).reshape(-1) for o in _outputs(fn, inputs)]


def gradgradcheck(fn: Callable[..., Any], inputs: Any, grad_outputs: Any = None, *, eps: float = 1e-6,
                  atol: float = 1e-5, rtol: float = 1e-3, raise_exception: bool = True) -> bool:
    """gradcheck of the gradient itself: checks second derivatives (create_graph=True)."""
    from ember_core.creation import asarray

    inputs = list(inputs) if isinstance(inputs, (tuple, list)) else [inputs]
    wrt = [t for t in inputs if isinstance(t, Tensor) and t._requires_grad]
    outs = _outputs(fn, inputs)
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        grad_outputs = [asarray(rng.standard_normal(o._shape) + (1j * rng.standard_normal(o._shape)
                                                                if o._dtype.kind == "c" else 0),
                                dtype=o._dtype, device=o._device).requires_grad_() for o in outs]
    grad_outputs = list(grad_outputs) if isinstance(grad_outputs, (tuple, list)) else [grad_outputs]

    def first_order(*args: Any) -> tuple[Tensor, ...]:
        ins, gos = list(args[: len(inputs)]), list(args[len(inputs):])
        targets = [t for t in ins if isinstance(t, Tensor) and t._requires_grad]
        grads = autograd_grad(_outputs(fn, ins), targets, gos, create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    if not wrt:
        raise ValueError("gradgradcheck: no input requires grad")
    return gradcheck(first_order, [*inputs, *grad_outputs], eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception)

"""Function transforms built on ``grad``: ``vjp``, ``jvp``, ``jacobian``, ``hessian``.

``jvp`` uses the double-vjp identity: J v = d/du (u^T J)^T v, so reverse mode alone gives forward
derivatives (it costs two backward passes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ember_core.autograd.engine import as_tensor_list, grad
from ember_core.tensor import Tensor


def _as_inputs(inputs: Any) -> tuple[list[Tensor], bool]:
    single = isinstance(inputs, Tensor)
    items = [inputs] if single else list(inputs)
    return [t.detach().requires_grad_() for t in items], single


def _zeros_for_unused(grads: Sequence[Tensor | None], like: Sequence[Tensor]) -> list[Tensor]:
    from ember_core.creation import zeros_like

    return [zeros_like(t) if g is None else g for g, t in zip(grads, like)]


def vjp(func: Callable[..., Any], inputs: Any, v: Any = None, *, create_graph: bool = False) -> tuple[Any, Any]:
    """(func(inputs), v^T J): the vector-Jacobian product (v may be omitted for a scalar output)."""
    ins, single = _as_inputs(inputs)
    out = func(*ins)
    outs = as_tensor_list(out)
    vs = None if v is None else as_tensor_list(v)
    grads = _zeros_for_unused(grad(outs, ins, vs, create_graph=create_graph, allow_unused=True), ins)
    result = [g if create_graph else g.detach() for g in grads]
    return (out if create_graph else _detach(out)), (result[0] if single else tuple(result))


def jvp(func: Callable[..., Any], inputs: Any, v: Any, *, create_graph: bool = False) -> tuple[Any, Any]:
    """(func(inputs), J v): the Jacobian-vector product, through two reverse passes."""
    from ember_core.creation import zeros_like

    ins, _ = _as_inputs(inputs)
    vs = as_tensor_list(v)
    out = func(*ins)
    outs = as_tensor_list(out)
    dummies = [zeros_like(o).requires_grad_() for o in outs]
    grads = _zeros_for_unused(grad(outs, ins, dummies, create_graph=True, allow_unused=True), ins)
    result = grad(grads, dummies, vs, create_graph=create_graph, allow_unused=True)
    result = _zeros_for_unused(result, outs)
    result = [r if create_graph else r.detach() for r in result]
    return (out if create_graph else _detach(out)), (result[0] if isinstance(out, Tensor) else tuple(result))


def jacobian(func: Callable[..., Any], inputs: Any, *, create_graph: bool = False) -> Any:
    """d out / d in with shape out.shape + in.shape (a tuple per input when inputs is a sequence)."""
    from ember_core.creation import zeros
    from ember_core.ops import namespace as ops

    ins, single = _as_inputs(inputs)
    out = func(*ins)
    if not isinstance(out, Tensor):
        raise TypeError("jacobian supports a function with one tensor output")
    rows: list[list[Tensor]] = [[] for _ in ins]
    for k in range(out.size):
        seed = zeros((out.size,), dtype=out.dtype, device=out.device)
        seed[k] = 1
        grads = grad([out], ins, [seed.reshape(out.shape)], retain_graph=True, create_graph=create_graph,
                     allow_unused=True)
        for i, g in enumerate(_zeros_for_unused(grads, ins)):
            rows[i].append(g if create_graph else g.detach())
    jac = [ops.stack(r).reshape((*out.shape, *t.shape)) if r else zeros((*out.shape, *t.shape), dtype=out.dtype)
           for r, t in zip(rows, ins)]
    return jac[0] if single else tuple(jac)


def hessian(func: Callable[..., Any], inputs: Any) -> Any:
    """Second derivatives of a scalar function: the jacobian of its gradient."""
    ins, single = _as_inputs(inputs)

    def gradient(*xs: Tensor) -> Tensor:
        from ember_core.ops import namespace as ops

        gs = _zeros_for_unused(grad([func(*xs)], list(xs), create_graph=True, allow_unused=True), xs)
        return ops.concat([g.reshape((-1,)) for g in gs])

    full = jacobian(gradient, ins if not single else ins[0])
    if single:
        return full.reshape((*ins[0].shape, *ins[0].shape))
    return full


def _detach(out: Any) -> Any:
    return out.detach() if isinstance(out, Tensor) else tuple(o.detach() for o in out)

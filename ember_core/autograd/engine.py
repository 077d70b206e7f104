"""Reverse-mode execution: walk the graph from the outputs in dependency order, without recursion.

1. Count, for every node reachable from the roots, how many edges point at it (an explicit stack,
   so a chain of 100,000 ops is fine).
2. Start from the roots with their initial gradients; a node runs once every edge into it has
   delivered (gradients arriving on the same output are summed), then its input gradients are
   summed to each input's shape, cast to its dtype and handed on.
3. Leaves accumulate into ``.grad`` (``backward``) or are captured (``grad``).

Independent graphs may run backward concurrently from several threads: the engine keeps all of
its state on the stack of the call.
"""

from __future__ import annotations

import sys
from typing import Any

from ember_core import dtypes as dt
from ember_core.autograd.grad_mode import _ModeSwitch
from ember_core.autograd.graph import AccumulateGrad, Edge, Node, edge_of
from ember_core.device import Device
from ember_core.errors import DeviceError, DTypeError, ShapeError
from ember_core.tensor import Tensor


def _dependencies(roots: list[Node]) -> dict[Node, int]:
    deps: dict[Node, int] = {}
    seen = set(roots)
    stack = list(roots)
    while stack:
        node = stack.pop()
        for edge in node.next:
            if edge is None:
                continue
            nxt = edge[0]
            deps[nxt] = deps.get(nxt, 0) + 1
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return deps


def fit_gradient(grad: Tensor, shape: tuple[int, ...], dtype: dt.DType, device: Device) -> Tensor:
    """Move a gradient to the input's device, sum it over the dims it was broadcast along, and cast
    it to the input's dtype (the real part for a real input that met complex values)."""
    from ember_core.autograd.formulas import sum_to

    if grad._device is not device:
        grad = grad.to_device(device)
    if grad._shape != shape:
        grad = sum_to(grad, shape)
    if grad._dtype is not dtype:
        if grad._dtype.kind == "c" and dtype.kind != "c":
            from ember_core.ops import namespace as ops

            grad = ops.real(grad)
        if grad._dtype is not dtype:
            grad = grad.astype(dtype)
    return grad


def as_tensor_list(value: Any) -> list[Any]:
    """One tensor or a sequence of them, as a list (the form every entry point accepts)."""
    return [value] if isinstance(value, Tensor) or not isinstance(value, (list, tuple)) else list(value)


def _add(a: Tensor | None, b: Tensor) -> Tensor:
    return b if a is None else a + b


def run_backward(roots: list[Edge], grads: list[Tensor], *, retain_graph: bool, create_graph: bool,
                 capture: list[Edge] | None = None) -> list[Tensor | None] | None:
    """Propagate ``grads`` (one per root edge) through the graph.

    With ``capture`` (autograd.grad), the gradients arriving at those edges are returned and no
    leaf's ``.grad`` is touched; otherwise leaves accumulate."""
    with _ModeSwitch(create_graph):
        return _run(roots, grads, retain_graph, create_graph, capture)


def _run(roots: list[Edge], grads: list[Tensor], retain_graph: bool, create_graph: bool,
         capture: list[Edge] | None) -> list[Tensor | None] | None:
    buffers: dict[Node, list[Tensor | None]] = {}

    def deliver(edge: Edge, g: Tensor) -> None:
        node, nr = edge
        buf = buffers.get(node)
        if buf is None:
            buf = buffers[node] = [None] * (nr + 1)
        elif len(buf) <= nr:
            buf.extend([None] * (nr + 1 - len(buf)))
        buf[nr] = _add(buf[nr], g)

    root_nodes = []
    for edge, g in zip(roots, grads):
        deliver(edge, g)
        root_nodes.append(edge[0])
    deps = _dependencies(root_nodes)
    wanted = {(id(e[0]), e[1]): i for i, e in enumerate(capture)} if capture is not None else None
    captured: list[Tensor | None] = [None] * (len(capture) if capture is not None else 0)
    ready = [n for n in dict.fromkeys(root_nodes) if deps.get(n, 0) == 0]
    while ready:
        node = ready.pop()
        buf = buffers.pop(node)
        if node.pre_hooks:
            for nr, hooks in node.pre_hooks.items():
                if nr < len(buf) and buf[nr] is not None:
                    buf[nr] = _run_hooks(hooks, buf[nr], f"output {nr} of {node.name}")
        if node.retained:
            for nr, ref in node.retained:
                t = ref()
                if t is not None and nr < len(buf) and buf[nr] is not None:
                    g = buf[nr] if create_graph else buf[nr].detach()
                    t.grad = g if t.grad is None else t.grad + g
        if wanted is not None:
            for nr, g in enumerate(buf):
                i = wanted.get((id(node), nr))
                if i is not None and g is not None:
                    captured[i] = _add(captured[i], g)
        if isinstance(node, AccumulateGrad):
            if wanted is None:
                _accumulate(node, buf.pop(), create_graph)  # the engine keeps no reference to it
            continue
        node.check_saved()
        delivered = buf[0] is not None if len(buf) == 1 else any(g is not None for g in buf)
        input_grads = node.backward(buf) if delivered else [None] * len(node.next)
        if not retain_graph:
            node.release()
        for edge, meta, g in zip(node.next, node.meta, input_grads):
            if edge is None:
                continue
            nxt = edge[0]
            if g is not None:
                if g._shape != meta[0] or g._dtype is not meta[1] or g._device is not meta[2]:
                    g = fit_gradient(g, *meta)
                deliver(edge, g)
            elif nxt not in buffers:
                buffers[nxt] = [None]
            left = deps[nxt] - 1
            deps[nxt] = left
            if not left:
                ready.append(nxt)
        input_grads = g = None  # drop this node's references: a leaf may take a gradient's buffer
    return captured if capture is not None else None


def _accumulate(node: AccumulateGrad, grad: Tensor | None, create_graph: bool) -> None:
    if grad is None:
        return
    leaf = node.leaf
    if leaf._autograd is not None and leaf._autograd.hooks:
        grad = _run_hooks(leaf._autograd.hooks, grad, "a leaf")
    if create_graph:
        leaf.grad = grad if leaf.grad is None else leaf.grad + grad
        return
    if leaf.grad is None:
        # .grad is a buffer the user may mutate: take the gradient's own buffer only when
        # nothing else can see it, otherwise copy it (PyTorch's rule, by reference counts)
        leaf.grad = grad.detach() if _owned_by_engine(grad) else grad.detach().clone()
    else:
        with _ModeSwitch(False):
            leaf.grad += grad
    leaf.grad._requires_grad = False
    leaf.grad.grad_fn = None


def _run_hooks(hooks: list[Any], grad: Tensor, owner: str) -> Tensor:
    """Each hook in turn on the gradient of ``owner`` (words for the tensor it is registered on);
    one that returns a tensor replaces the gradient, which must keep its shape, dtype and device."""
    for hook in hooks:
        replaced = hook(grad)
        if replaced is None:
            continue
        what = (f"hook {getattr(hook, '__name__', repr(hook))!r} on {owner} (gradient of shape {grad._shape}, "
                f"{grad._dtype.name}, on {grad._device}) returned")
        must = "a hook returns None or a tensor of its gradient's shape, dtype and device"
        if not isinstance(replaced, Tensor):
            raise DTypeError(f"{what} an object of type {type(replaced).__name__}: {must}")
        if replaced._shape != grad._shape:
            raise ShapeError(f"{what} one of shape {replaced._shape}: {must}")
        if replaced._dtype is not grad._dtype:
            raise DTypeError(f"{what} one of dtype {replaced._dtype.name}: {must} (cast with .astype())")
        if replaced._device is not grad._device:
            raise DeviceError(f"{what} one on {replaced._device}: {must} (move it with .to_device())")
        grad = replaced
    return grad


# references to an unshared gradient while _owned_by_engine counts them: _accumulate's argument,
# its own and getrefcount's; to its storage: the tensor's and getrefcount's
_ENGINE_REFS, _STORAGE_REFS = 3, 2


def _owned_by_engine(grad: Tensor) -> bool:
    """Whether the engine holds the only reference to this gradient and to its storage (a fresh
    result of a formula, not a user's tensor, a view, or a gradient delivered to two places)."""
    return (grad._base is None and sys.getrefcount(grad) <= _ENGINE_REFS
            and sys.getrefcount(grad._storage) <= _STORAGE_REFS)


def initial_gradients(outputs: list[Tensor], grad_outputs: list[Any] | None) -> list[Tensor]:
    """1 for scalar outputs; an explicit gradient of the output's shape otherwise."""
    from ember_core.creation import asarray, ones_like

    result = []
    for i, out in enumerate(outputs):
        g = None if grad_outputs is None else grad_outputs[i]
        if g is None:
            if out._numel != 1:
                raise RuntimeError(
                    f"grad can be implicitly created only for outputs with one element; this output has shape "
                    f"{out._shape}: pass gradient= (a tensor of that shape) to backward()"
                )
            g = ones_like(out)
        elif not isinstance(g, Tensor):
            g = asarray(g, dtype=out._dtype, device=out._device)
        if g._shape != out._shape:
            raise RuntimeError(f"gradient has shape {g._shape} but the output has shape {out._shape}")
        if g._device is not out._device:
            raise RuntimeError(f"gradient is on {g._device} but the output is on {out._device}")
        result.append(g)
    return result


def backward(tensors: Any, grad_tensors: Any = None, retain_graph: bool | None = None,
             create_graph: bool = False, inputs: Any = None) -> None:
    """Accumulate into ``.grad`` of the leaves the gradients of ``tensors`` (see Tensor.backward)."""
    outputs = as_tensor_list(tensors)
    _check_outputs(outputs)
    grads = initial_gradients(outputs, None if grad_tensors is None else as_tensor_list(grad_tensors))
    roots = [_edge(o) for o in outputs]
    retain = create_graph if retain_graph is None else retain_graph
    if inputs is None:
        run_backward(roots, grads, retain_graph=retain, create_graph=create_graph)
        return
    inputs = as_tensor_list(inputs)
    if not inputs:
        raise RuntimeError("backward(inputs=[]) accumulates into nothing: pass the tensors whose .grad to fill, "
                           "or leave inputs out to fill every leaf's")
    _check_inputs(inputs, "backward(inputs=...)")
    captured = run_backward(roots, grads, retain_graph=retain, create_graph=create_graph,
                            capture=[_edge(t) for t in inputs])
    assert captured is not None
    for t, g in zip(inputs, captured):
        if g is not None:
            _accumulate(AccumulateGrad(t), g, create_graph)


def grad(outputs: Any, inputs: Any, grad_outputs: Any = None, retain_graph: bool | None = None,
         create_graph: bool = False, allow_unused: bool = False) -> tuple[Tensor | None, ...]:
    """The gradients of ``outputs`` with respect to ``inputs``, returned (no ``.grad`` is touched)."""
    outs, ins = as_tensor_list(outputs), as_tensor_list(inputs)
    _check_outputs(outs)
    _check_inputs(ins, "grad()")
    grads = initial_gradients(outs, None if grad_outputs is None else as_tensor_list(grad_outputs))
    retain = create_graph if retain_graph is None else retain_graph
    captured = run_backward([_edge(o) for o in outs], grads, retain_graph=retain, create_graph=create_graph,
                            capture=[_edge(t) for t in ins])
    assert captured is not None
    result = []
    for t, g in zip(ins, captured):
        if g is None and not allow_unused:
            raise RuntimeError(
                f"one of the inputs (shape {t._shape}) was not used to compute the outputs; pass allow_unused=True "
                f"to get None for it"
            )
        if g is not None:
            g = fit_gradient(g, t._shape, t._dtype, t._device)
            if not create_graph:
                g = g.detach()
        result.append(g)
    return tuple(result)


def _check_outputs(outputs: list[Tensor]) -> None:
    for o in outputs:
        if not isinstance(o, Tensor):
            raise TypeError(f"backward needs ember tensors, got {type(o).__name__}")
        if not o._requires_grad:
            raise RuntimeError(
                "this tensor does not require grad and has no grad_fn: none of its inputs required grad (set "
                "requires_grad=True on the leaves), or it was computed under no_grad()"
            )


def _check_inputs(inputs: list[Any], where: str) -> None:
    for t in inputs:
        if not isinstance(t, Tensor):
            raise TypeError(f"every input of {where} must be an ember tensor, got {type(t).__name__}")
        if not t._requires_grad:
            raise RuntimeError(f"every input of {where} must be a tensor that requires grad; this one (shape "
                               f"{t._shape}) does not: set requires_grad=True on it before computing the outputs")


def _edge(t: Tensor) -> Edge:
    edge = edge_of(t)
    assert edge is not None  # callers checked requires_grad
    return edge

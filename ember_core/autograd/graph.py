"""The recorded graph: one Node per differentiable op run on inputs that require grad.

A Node knows where its input gradients go (``next``: one edge per differentiable input, an edge
being the producer's node and output index, or None) and how to turn the gradient of its output
into gradients of its inputs (``backward``).  Leaves that require grad end in an
``AccumulateGrad`` node that adds into ``tensor.grad``.

What a node saves for backward is checked against the storage version counters when it runs:
an in-place write in between is an error that names the op, never a silently wrong gradient.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from ember_core.tensor import Tensor

Edge = tuple["Node", int]


class Node:
    """One op in the graph.  Subclasses implement ``backward(grads) -> input grads``."""

    __slots__ = ("__weakref__", "meta", "name", "next", "pre_hooks", "released", "retained", "saved_versions")

    def __init__(self, name: str, inputs: list[Tensor | None]) -> None:
        self.name = name
        self.next: tuple[Edge | None, ...] = tuple([edge_of(t) for t in inputs])
        # (shape, dtype, device) per input: gradients are summed to the input's shape, cast to its
        # dtype and moved to its device (astype(x, dtype, device=d) is one op across two devices)
        self.meta = tuple([None if t is None else (t._shape, t._dtype, t._device) for t in inputs])
        self.pre_hooks: dict[int, list[Callable[[Tensor], Tensor | None]]] | None = None
        self.retained: list[tuple[int, weakref.ref[Tensor]]] | None = None
        self.saved_versions: tuple[tuple[Tensor, int], ...] = ()
        self.released = False

    def check_saved(self) -> None:
        if self.released:
            raise RuntimeError(
                f"trying to run backward through the graph of {self.name} a second time (or to use saved "
                f"tensors after they were freed); pass retain_graph=True to the first backward() or grad() "
                f"call if you need to backward twice"
            )
        for t, version in self.saved_versions:
            if t._storage.version != version:
                raise RuntimeError(
                    f"a tensor saved for the gradient of {self.name} (shape {t._shape}, {t._dtype.name}) was "
                    f"modified by an in-place operation: its version is {t._storage.version}, expected "
                    f"{version}; compute on a copy (x.clone()) or make the in-place op out-of-place"
                )

    def backward(self, grads: list[Tensor | None]) -> list[Any]:
        raise NotImplementedError

    def release(self) -> None:
        """Free what backward needed (the graph edges stay, so a second backward is diagnosed)."""
        self.released = True
        self.saved_versions = ()

    def __repr__(self) -> str:
        return f"<{self.name}Backward>"


class AccumulateGrad(Node):
    """The end of a leaf's path: adds the incoming gradient into ``leaf.grad``."""

    __slots__ = ("leaf",)

    def __init__(self, leaf: Tensor) -> None:
        super().__init__("AccumulateGrad", [])
        self.leaf = leaf

    def backward(self, grads: list[Tensor | None]) -> list[Any]:
        return []

    def release(self) -> None:  # a leaf's accumulator lives as long as the leaf
        pass


class FunctionNode(Node):
    """A node whose vector-Jacobian product is a Python callable: grads -> input grads."""

    __slots__ = ("fn",)

    def __init__(self, name: str, inputs: list[Tensor | None], fn: Callable[[list[Tensor | None]], list[Any]]) -> None:
        super().__init__(name, inputs)
        self.fn = fn

    def backward(self, grads: list[Tensor | None]) -> list[Any]:
        return self.fn(grads)

    def release(self) -> None:
        super().release()
        self.fn = _freed


def _freed(grads: list[Tensor | None]) -> list[Any]:  # pragma: no cover - check_saved raises first
    raise RuntimeError("backward through a freed graph")


# ---- per-tensor autograd state ------------------------------------------------------------------

class TensorMeta:
    """What a few tensors need beyond grad_fn: output index, hooks, retain_grad, accumulator, and
    for a recorded view the storage version its grad_fn describes (an in-place write to the
    storage after that makes the view's history stale: see ``edge_of``)."""

    __slots__ = ("accumulator", "hooks", "output_nr", "retains_grad", "view_version")

    def __init__(self) -> None:
        self.output_nr = 0
        self.retains_grad = False
        self.hooks: list[Callable[[Tensor], Tensor | None]] = []
        self.accumulator: weakref.ref[AccumulateGrad] | None = None
        self.view_version: int | None = None


def meta_of(t: Tensor) -> TensorMeta:
    m = t._autograd
    if m is None:
        m = t._autograd = TensorMeta()
    return m


def accumulator(leaf: Tensor) -> AccumulateGrad:
    """The leaf's AccumulateGrad node, shared by every graph the leaf takes part in."""
    m = leaf._autograd
    node = m.accumulator() if m is not None and m.accumulator is not None else None
    if node is None:
        node = AccumulateGrad(leaf)
        meta_of(leaf).accumulator = weakref.ref(node)
    return node


def edge_of(t: Tensor | None) -> Edge | None:
    """Where a gradient for t goes: its producer, its accumulator, or nowhere."""
    if t is None or not t._requires_grad:
        return None
    if t.grad_fn is not None:
        m = t._autograd
        if m is None:
            return (t.grad_fn, 0)
        if m.view_version is not None and m.view_version != t._storage.version:
            # the storage was written in place since this view was taken: its values now come from
            # the writer's history, so the view's gradient goes through its base's current grad_fn
            from ember_core.autograd.storage_grad import regenerate_view

            regenerate_view(t)
        return (t.grad_fn, m.output_nr)
    return (accumulator(t), 0)


def attach(outputs: list[Tensor], node: Node) -> None:
    """Make ``node`` the producer of each output (index = position)."""
    for i, out in enumerate(outputs):
        out.grad_fn = node
        out._requires_grad = True
        if i:
            meta_of(out).output_nr = i


class RemovableHandle:
    """Returned by ``register_hook``; ``remove()`` takes the hook off again."""

    def __init__(self, hooks: list[Any], hook: Any) -> None:
        self._hooks = hooks
        self._hook = hook

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


def register_hook(t: Tensor, hook: Callable[[Tensor], Tensor | None]) -> RemovableHandle:
    """Call ``hook(grad)`` when t's gradient is computed; a returned tensor replaces it."""
    if not t._requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that does not require grad")
    if t.grad_fn is None:  # a leaf: hooks run in its accumulator before .grad is written
        hooks = meta_of(t).hooks
    else:
        node = t.grad_fn
        if node.pre_hooks is None:
            node.pre_hooks = {}
        hooks = node.pre_hooks.setdefault(meta_of(t).output_nr if t._autograd else 0, [])
    hooks.append(hook)
    return RemovableHandle(hooks, hook)


def retain_grad(t: Tensor) -> None:
    """Keep the gradient of a non-leaf in ``t.grad`` after backward (leaves always keep theirs)."""
    if not t._requires_grad:
        raise RuntimeError("retain_grad() needs a tensor that requires grad")
    if t.grad_fn is None:
        return
    m = meta_of(t)
    if m.retains_grad:
        return
    m.retains_grad = True
    node = t.grad_fn
    if node.retained is None:
        node.retained = []
    node.retained.append((m.output_nr, weakref.ref(t)))

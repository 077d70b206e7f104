"""Gradients that move between layouts of one storage: general views and in-place writes.

A view or a write touches storage positions; its gradient is a scatter-add of the incoming
gradient onto those positions followed by a gather at the positions of the other layout.  Both
steps are linear and each is the other's adjoint, so they record themselves (create_graph works).

In-place writes (``x += y``, ``x[key] = v``, ``view.mul_(...)`` through operators) rebase the
history of the tensor that owns the storage, as PyTorch's CopySlices does: the old value's
gradient is the incoming one with the written region zeroed, the written value's is that region.
"""

from __future__ import annotations

import math
from typing import Any

from ember_core import dtypes as dt
from ember_core.autograd.grad_mode import MODE, _ModeSwitch
from ember_core.autograd.graph import FunctionNode, attach
from ember_core.tensor import Tensor, span

Layout = tuple[tuple[int, ...], tuple[int, ...], int]


def layout(t: Tensor) -> Layout:
    return (t._shape, t._strides, t._offset)


def positions(where: Layout, n: int, device: Any) -> Tensor:
    """The storage position of every element of a layout (int64, the layout's shape)."""
    from ember_core.creation import arange
    from ember_core.views import RAW

    return RAW["as_strided"](arange(n, dtype=dt.int64, device=device), *where)


def extent(*layouts: Layout) -> int:
    return max(span(*lay)[1] for lay in layouts) + 1


def _linear(name: str, out: Tensor, source: Tensor, adjoint: Any) -> Tensor:
    """Record out = L(source) for a linear L whose adjoint is given (only under create_graph)."""
    if MODE.enabled and source._requires_grad:
        attach([out], FunctionNode(name, [source], lambda grads: [adjoint(grads[0])]))
    return out


def scatter(g: Tensor, pos: Tensor, n: int) -> Tensor:
    """A length-n storage-space tensor: g added at positions pos."""
    from ember_core.creation import zeros
    from ember_core.ops import namespace as ops

    with _ModeSwitch(False):
        out = zeros((n,), dtype=g._dtype, device=g._device)
        ops.index_put(out, pos.reshape(-1), g.reshape(-1), accumulate=True)
    return _linear("scatter", out, g, lambda gg: gather(gg, pos))


def gather(s: Tensor, pos: Tensor) -> Tensor:
    """The storage-space tensor s read at positions pos (pos's shape)."""
    from ember_core.ops import namespace as ops

    n = s._shape[0]
    with _ModeSwitch(False):
        out = ops.take(s, pos.reshape(-1), axis=0).reshape(pos._shape)
    return _linear("gather", out, s, lambda gg: scatter(gg, pos, n))


def restride(g: Tensor, src: Layout, dst: Layout) -> Tensor:
    """Move a gradient laid out as ``src`` onto the layout ``dst`` of the same storage."""
    n = extent(src, dst)
    return gather(scatter(g, positions(src, n, g._device), n), positions(dst, n, g._device))


def basic_view_grad(g: Tensor, x: Any, key: Any) -> Tensor:
    """x's gradient from the gradient g of its view x[key]: g added where the view's elements sit
    among x's own elements.  Found in x's element order, not its storage's: a broadcast x holds one
    storage element at many places, and a gradient through the storage would sum over them there,
    before the broadcast's own gradient sums them again."""
    from ember_core.creation import arange
    from ember_core.views import RAW

    n = math.prod(x.shape)
    selected = RAW["basic_view"](arange(n, dtype=dt.int64, device=g._device).reshape(x.shape), key)
    return scatter(g, selected, n).reshape(x.shape)


# ---- in-place writes ---------------------------------------------------------------------------

def needs_rebase(dst: Tensor, src: Tensor) -> bool:
    base = dst if dst._base is None else dst._base
    return MODE.enabled and (src._requires_grad or dst._requires_grad or base._requires_grad)


def check_leaf(dst: Tensor) -> None:
    base = dst if dst._base is None else dst._base
    for t in (dst, base):
        if t._requires_grad and t.grad_fn is None:
            raise RuntimeError(
                "a leaf tensor that requires grad (or a view of one) is used in an in-place operation; update "
                "parameters inside `with ember_core.no_grad():`, or write into a copy"
            )


def rebase(dst: Tensor, src: Tensor, region: Tensor | None = None) -> None:
    """After ``src`` was written into ``dst`` (a tensor or a view; at storage positions ``region``
    when given, else at dst's own positions), make the graph say so."""
    base = dst if dst._base is None else dst._base
    n = extent(layout(base), layout(dst))
    device = base._device
    base_pos = positions(layout(base), n, device)
    region = positions(layout(dst), n, device) if region is None else region
    from ember_core.creation import ones
    from ember_core.ops import namespace as ops

    with _ModeSwitch(False):
        keep = ones((n,), dtype=base._dtype if base._dtype.kind in "fc" else dt.float32, device=device)
        ops.index_put(keep, region.reshape(-1), 0, accumulate=False)

    def backward(grads: list[Tensor | None]) -> list[Any]:
        g_storage = scatter(grads[0], base_pos, n)
        return [gather(g_storage * keep, base_pos), gather(g_storage, region)]

    attach([base], FunctionNode("CopySlices", [base if base._requires_grad else None, src], backward))
    if dst is not base:
        regenerate_view(dst)


def regenerate_view(view: Tensor) -> None:
    """Make ``view``'s history a gather from its base's current history (after an in-place write
    to their storage), and remember the storage version that history describes."""
    from ember_core.autograd.graph import meta_of

    base = view._base
    n = extent(layout(base), layout(view))
    base_pos = positions(layout(base), n, base._device)
    view_pos = positions(layout(view), n, base._device)
    attach([view], FunctionNode("AsStrided", [base], lambda grads: [gather(scatter(grads[0], view_pos, n),
                                                                           base_pos)]))
    meta_of(view).view_version = view._storage.version

"""Indexing and views, which the core builds from the backend's copy, take, index_put and nonzero
kernels: every expression runs on ember (``xp = ember_core``) and on numpy (``xp = numpy``)."""

from __future__ import annotations

from typing import Any

from ember_conformance.samples.base import Arr, Sample, rng_for, typical

EXPRESSIONS = {
    "slice-steps": "x[1:, ::-2]",
    "int-ellipsis-newaxis": "x[1, ..., None]",
    "negative-index": "x[-1]",
    "int-array": "x[xp.asarray([2, 0, 2], device=x.device)]",
    "int-arrays-two-axes": "x[xp.asarray([0, 2], device=x.device), :, xp.asarray([4, 1], device=x.device)]",
    "bool-mask": "x[x > 0]",
    "reshape-needs-copy": "xp.reshape(xp.permute_dims(x, (2, 0, 1)), (-1,))",
    "permute-dims": "xp.permute_dims(x, (1, 0, 2))",
    "moveaxis": "xp.moveaxis(x, 0, -1)",
    "flip": "xp.flip(x, axis=1)",
    "broadcast-to": "xp.broadcast_to(x[:1], (3, 4, 5))",
    "expand-squeeze": "xp.squeeze(xp.expand_dims(x, axis=1), axis=1)",
    "setitem-slice-scalar": "x[1:, ::2] = 7",
    "setitem-broadcast-tensor": "x[..., 1:3] = x[..., :2] * 2",
    "setitem-int-array": "x[xp.asarray([0, 2], device=x.device)] = 1",
    "setitem-mask": "x[x > 1] = 0",
}


def views(dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for("views", dtype)
    out = []
    for name, expression in EXPRESSIONS.items():
        for layout in ("contiguous", "strided"):
            x = Arr(typical(rng, (3, 4, 5), dtype), dtype, layout)
            out.append(Sample(f"{name}-{layout}", (x,), expression=expression))
    return out


# the registry's view ops (family "view"): arguments per op, in every layout of a (3, 1, 4) tensor
VIEW_OP_ARGS: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "reshape": (((4, 3),), {}), "permute_dims": (((2, 0, 1),), {}), "broadcast_to": (((2, 3, 5, 4),), {}),
    "squeeze": ((1,), {}), "expand_dims": ((), {"axis": 1}), "flip_view": (((0, 2),), {}),
}


def view_op(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    from ember_conformance.execute import SkipCase

    name = schema.name.rsplit(".", 1)[-1]
    if name not in VIEW_OP_ARGS:
        def check(device: str, dtype: str) -> str | None:
            raise SkipCase(f"{schema.name} is exercised through indexing (the 'views' cases), not on its own")

        return [Sample("via-views", custom=check)]
    rng = rng_for(schema.name, dtype)
    args, kwargs = VIEW_OP_ARGS[name]
    return [Sample(layout, (Arr(typical(rng, (3, 1, 4), dtype), dtype, layout), *args), dict(kwargs))
            for layout in ("contiguous", "strided", "flipped")]

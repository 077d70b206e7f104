"""Indexing and views, which the core builds from the backend's copy, take, index_put and nonzero
kernels: every expression runs on ember (``xp = ember_core``) and on numpy (``xp = numpy``)."""

from __future__ import annotations

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

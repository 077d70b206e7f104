"""The matmul family: the floating dtypes on the vendor's BLAS or ember's own tiled GEMM kernel
(``ember_gpu.blas`` chooses), the integer ones on eg_matmul_matmul_<dtype> (wrapping, one thread per
output element).  One family, as the op layer serves each op from one."""

from __future__ import annotations

import itertools
from typing import Any

from ember_core.views import coalesce
from ember_gpu import abi, blas
from ember_gpu.ops import Entry, OpLayer
from ember_gpu.ops_sort import built_dtypes


def _integer_matmul(layer: OpLayer) -> Any:
    def matmul(out: Any, a: Any, b: Any) -> None:
        """(..., M, K) @ (..., K, N): the batch dims merged, one launch per index of all but the
        last merged batch dim."""
        if not out._numel:
            return
        ops = layer.device_ops(out)
        *_, m, k = a._shape
        n = b._shape[-1]
        operands = (out, a, b)
        pointers = [layer.address(ops, t) if k or t is out else 0 for t in operands]  # k == 0: a, b not read
        shape, strides = coalesce(out._shape[:-2], *[t._strides[:-2] for t in operands])
        batch, steps = (shape[-1], [st[-1] for st in strides]) if shape else (1, [0, 0, 0])
        kernel = layer.kernel(ops, f"eg_matmul_matmul_{out._dtype.name}")
        grid = ops.grid(batch * m * n)
        size = out._dtype.itemsize
        for at in itertools.product(*[range(s) for s in shape[:-1]]):
            moved = [p + sum(i * step for i, step in zip(at, st)) * size for p, st in zip(pointers, strides)]
            kernel(grid, (abi.BLOCK, 1, 1), {
                "out": moved[0], "a": moved[1], "b": moved[2], "batch": batch, "m": m, "n": n, "k": k,
                **{f"{name}_strides": [step, *t._strides[-2:]]
                   for name, step, t in zip(("out", "a", "b"), steps, operands)}})

    return matmul


def kernels(layer: OpLayer) -> dict[str, Entry]:
    floats, float_dtypes = blas.kernels(layer)["matmul"]
    integers = built_dtypes(layer, "eg_matmul_matmul")
    integer = _integer_matmul(layer)

    def matmul(out: Any, a: Any, b: Any) -> Any:
        if out._dtype.name in integers:
            return integer(out, a, b)
        done = floats(out, a, b)
        if done is NotImplemented:  # a layout the BLAS cannot walk (blas.Blas.matmul): contiguous operands it can
            done = floats(out, layer.contiguous(a), layer.contiguous(b))
        return done

    return {"matmul": (matmul, float_dtypes | integers)}

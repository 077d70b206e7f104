"""The scan kernels (csrc/eg_scan.h): ``eg_scan_<op>_<dtype>`` for cumulative_sum and
cumulative_prod along the last dim, one image per op.  x arrives in the result dtype (the core
accumulates bool and integers in int64 unless asked otherwise, so bool never reaches them); the
running total is kept in ember-cpu's accumulator (gen_reduce's sum and prod op structs)."""

from __future__ import annotations

from ember_gpu.codegen import HEADER, Source
from ember_gpu.gen_reduce import reduction_op, registry_dtypes

OPS = {"cumulative_sum": "sum", "cumulative_prod": "prod"}


def sources() -> dict[str, Source]:
    out = {}
    for op, reduction in OPS.items():
        parts, kernels = [HEADER], []
        for d in registry_dtypes(op):
            name = f"eg_scan_{op}_{d.name}"
            parts.append(reduction_op(reduction, d, f"{name}_op"))
            parts.append(f"EG_SCAN_KERNEL({name}, {name}_op)\n\n")
            kernels.append(name)
        out[f"scan_{op}"] = Source("".join(parts), kernels)
    return out

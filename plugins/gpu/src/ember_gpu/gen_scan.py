"""The scan kernels (csrc/eg_scan.h): ``eg_scan_<op>_<dtype>`` for cumulative_sum and
cumulative_prod along the last dim, one image per op.  x arrives in the result dtype (the core
accumulates bool and integers in int64 unless asked otherwise, so bool never reaches them); the
running total is kept in ember-cpu's accumulator (gen_reduce's sum and prod op structs)."""

from __future__ import annotations

from ember_gpu.codegen import Source
from ember_gpu.gen_reduce import op_sources

OPS = {"cumulative_sum": "sum", "cumulative_prod": "prod"}


def sources() -> dict[str, Source]:
    return op_sources("scan", OPS, "EG_SCAN_KERNEL")

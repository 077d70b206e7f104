"""The case list of a run: groups (level, op, dtype), each with its samples, derived from the op
registry at run time, so new ops and dtypes are covered without touching the suite.

Level 1 tests each op in its primary dtype (float32 when it accepts it, else int32, int64 or bool)
plus indexing and views; level 2 every other dtype the op declares; level 3 float32 gradients of
the differentiable ops; level 4 the demo.  The parent and every worker call ``group_samples``
independently and get the same samples, so only case ids cross the process boundary.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from functools import lru_cache

from ember_conformance import contract, deep, precision
from ember_conformance.execute import case_id
from ember_conformance.samples.base import Sample, primary_dtype
from ember_conformance.samples.catalog import generator_for, samples_for
from ember_conformance.samples.views import views

DTYPE_ORDER = contract.ALL_DTYPES


@dataclass(frozen=True)
class Options:
    device: str
    max_level: int = 4
    ops: tuple[str, ...] = ()  # fnmatch patterns; empty = every op
    dtypes: tuple[str, ...] = ()  # empty = every dtype
    demo_epochs: int = 10

    def wants_op(self, op: str) -> bool:
        return not self.ops or any(fnmatch.fnmatchcase(op, p) for p in self.ops)

    def wants_dtype(self, dtype: str) -> bool:
        return not self.dtypes or dtype in self.dtypes


def levels_left_out(ops: list[str], max_level: int) -> str:
    """What an --ops selection leaves out of levels 1..max_level, in words ("" when nothing)."""
    opts = Options("cpu", max_level, tuple(ops))
    parts = []
    if max_level >= 1:
        parts.append("levels 1-3 test only the selected ops, so they prove nothing about the others")
    if max_level >= 4 and not opts.wants_op("demo"):
        parts.append("level 4 (add 'demo' to --ops to run it)")
    return "; ".join(parts)


def _schemas() -> list:
    from ember_core.ops.registry import REGISTRY

    return sorted(REGISTRY, key=lambda s: s.name)


def groups(opts: Options) -> list[tuple[int, str, str]]:
    out: list[tuple[int, str, str]] = [(0, name, dtype) for name, dtype in contract.contract_groups()
                                       if dtype == "-" or opts.wants_dtype(dtype)]
    for schema in _schemas():
        if not opts.wants_op(schema.name):
            continue
        accepted = {d.name for d in schema.dtypes}
        primary = primary_dtype(accepted)
        if opts.max_level >= 1 and primary and opts.wants_dtype(primary):
            out.append((1, schema.name, primary))
        if opts.max_level >= 2:
            out += [(2, schema.name, d) for d in DTYPE_ORDER if d in accepted and d != primary and opts.wants_dtype(d)]
        wants_grad = "float32" in accepted and opts.wants_dtype("float32")
        if opts.max_level >= 3 and deep.differentiable(schema) and wants_grad:
            out.append((3, schema.name, "float32"))
    if opts.max_level >= 1 and opts.wants_op("views") and opts.wants_dtype("float32"):
        out.append((1, "views", "float32"))
    if opts.wants_op("numerics"):  # the precision profile's special values, float32 at level 1
        out += [(1 if d == "float32" else 2, "numerics", d) for d in precision.FLOAT_DTYPES
                if opts.wants_dtype(d) and opts.max_level >= (1 if d == "float32" else 2)]
    if opts.max_level >= 4 and opts.wants_op("demo"):
        out.append((4, "demo", "float32"))
    return out


@lru_cache(maxsize=64)
def group_samples(level: int, op: str, dtype: str, device: str, demo_epochs: int = 10) -> tuple[Sample, ...]:
    if level == 0:
        return tuple(contract.contract_samples(op, dtype))
    if level == 4:
        return (deep.demo_sample(demo_epochs),)
    if op == "views":
        return tuple(views(dtype, device, level))
    if op == "numerics":
        return (Sample("special-values", custom=precision.numerics_check),)
    from ember_core.ops.registry import REGISTRY

    schema = REGISTRY[op]
    if level == 3:
        return tuple(deep.grad_samples(schema, dtype, device))
    if generator_for(schema) is None:
        return (Sample("no-sampler", custom=_no_sampler(schema.family)),)
    return tuple(samples_for(schema, dtype, device, level))


def _no_sampler(family: str):
    from ember_conformance.execute import SkipCase

    def check(device: str, dtype: str) -> str | None:
        raise SkipCase(f"the suite has no sample generator for family {family!r} yet")

    return check


def case_ids(opts: Options) -> list[str]:
    return [case_id(level, op, dtype, s.name) for level, op, dtype in groups(opts)
            for s in group_samples(level, op, dtype, opts.device, opts.demo_epochs)]

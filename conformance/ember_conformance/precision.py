"""The precision profile: how the device's floating point differs from the host's.

* Special values (group ``numerics`` at level 1, one case per float dtype): flush-to-zero of
  denormal inputs and outputs, and IEEE semantics of x/0, 0/0, inf*0, inf-inf, log of negative
  values and of zero, sqrt(-0), the sign of -0 + -0.  Each runs on the device only: an op that
  does not run there natively skips the check with the reason.
* Declared deviations: a manifest may declare, per device type, which dtypes flush denormals and
  per op:dtype a bound in ulps or an absolute bound over an input range (GPU trig is specified so)::

      [deviations.vulkan]
      ftz = ["float32"]
      "sin:float32" = { abs = 1e-6, range = [-3.1416, 3.1416] }
      "exp:float32" = { ulp = 4 }

      [[deviations.vulkan.when]]                        # only on devices reporting these properties
      properties = { float32_subnormals = "flushed" }   # (ember_device_properties; a.b reads a nested key)
      ftz = ["float32"]

  A case that misses the suite's tolerance but keeps within its declared bound is ``xfail``
  ("declared deviation"); so is one that passes once the subnormals of a declared ftz dtype are
  flushed (in the inputs or in the outputs). An undeclared deviation is a failure.
* The table (``report["precision"]``): per op:dtype the worst error in ulps, relative and absolute
  terms over the cases that ran on the device, and the declared bound beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
TINY = {"float16": 2.0 ** -24, "bfloat16": 2.0 ** -133, "float32": 2.0 ** -149, "float64": 2.0 ** -1074}
NORMAL_MIN = {"float16": 2.0 ** -14, "bfloat16": 2.0 ** -126, "float32": 2.0 ** -126, "float64": 2.0 ** -1022}


@lru_cache(maxsize=16)
def deviations(device: str) -> dict[str, Any]:
    """What the plugins serving the device declare for it, merged: each ``[deviations.<device type>]``
    table, with the ``when`` entries whose ``properties`` the device reports (``ftz`` lists are joined)."""
    from ember_core.plugins import MANAGER

    MANAGER.ensure_discovered()
    device_type = device.split(":")[0]
    backends = [*MANAGER.providers(device_type)]
    owner = MANAGER.device_owner.get(device_type)
    if owner is not None and owner not in backends:
        backends.append(owner)
    out: dict[str, Any] = {}
    for backend in backends:
        path = backend.info.manifest
        if path is None:
            continue
        with open(path, "rb") as f:
            table = dict(tomllib.load(f).get("deviations", {}).get(device_type, {}))
        conditional = table.pop("when", [])
        matching = [entry for entry in conditional if _reports(device, entry.get("properties", {}))]
        for declared in (table, *({k: v for k, v in e.items() if k != "properties"} for e in matching)):
            for key, value in declared.items():
                if key == "ftz" and key in out:
                    value = sorted({*out[key][0], *value})
                out[key] = (value, backend.package)
    return out


def _reports(device: str, wanted: dict[str, Any]) -> bool:
    """Whether the device's properties hold every wanted value (``a.b``: key b of the mapping under a)."""
    from ember_core.device import as_device

    try:
        d = as_device(device)
        props: Any = dict(d.backend.hooks["ember_device_properties"](d))
    except Exception:  # an unusable device reports nothing: level 0 says why
        return False
    for key, value in wanted.items():
        found: Any = props
        for part in key.split("."):
            found = found.get(part) if hasattr(found, "get") else None
        if found != value:
            return False
    return True


def declared_ftz(device: str, dtype: str) -> str | None:
    """The package declaring that the device flushes this dtype's subnormals (None: not declared)."""
    entry = deviations(device).get("ftz")
    return entry[1] if entry and dtype in entry[0] else None


def flushed(values: Any, dtype: str) -> Any:
    """Host values with the subnormals of ``dtype`` replaced by zeros of their sign, as a flushing device
    reads or writes them (non-float values unchanged)."""
    if isinstance(values, (list, tuple)):
        return type(values)(flushed(v, dtype) for v in values)
    array = np.asarray(values)
    if array.dtype.kind != "f":
        return values
    with np.errstate(all="ignore"):
        tiny = np.abs(array) < NORMAL_MIN[dtype]
    return np.where(tiny, np.copysign(0.0, array), array).astype(array.dtype)


def within_declared(device: str, op: str, dtype: str, max_ulp: float | None) -> str | None:
    """The ulp declaration a measured error keeps within (None: no declaration covers it)."""
    entry = deviations(device).get(f"{op}:{dtype}")
    if entry is None or "ulp" not in entry[0] or max_ulp is None or max_ulp > entry[0]["ulp"]:
        return None
    return f"within the declared deviation of {entry[0]['ulp']} ulp ({entry[1]})"


def within_declared_range(device: str, op: str, dtype: str, got: np.ndarray, want: np.ndarray,
                          x: np.ndarray, rtol: float, atol: float) -> str | None:
    """For an elementwise op with an absolute bound declared over an input range: elements whose input
    lies in the range keep within the bound, the others within the suite's tolerance (None: they do not)."""
    entry = deviations(device).get(f"{op}:{dtype}")
    if entry is None or "abs" not in entry[0] or np.shape(x) != np.shape(want) or np.iscomplexobj(want):
        return None
    bound, package = entry
    lo, hi = bound.get("range", (-np.inf, np.inf))
    with np.errstate(all="ignore"):
        err = np.abs(got.astype(np.float64) - want)
        inside = (x >= lo) & (x <= hi)
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        ok = same | np.where(inside, err <= bound["abs"], err <= atol + rtol * np.abs(want))
    if not ok.all():
        return None
    return f"within the declared absolute error {bound['abs']:g} on [{lo:g}, {hi:g}] ({package})"


# ---- special values on the device ------------------------------------------------------------------

def _on_device(device: str, dtype: str, *ops: str) -> None:
    """SkipCase unless every op runs natively on the device in this dtype (the host's numerics prove nothing)."""
    from ember_conformance.execute import SkipCase, decide

    device_type = device.split(":")[0]
    missing = [op for op in ops if (c := decide(op, device_type, dtype)) is None or c.how != "native"]
    if missing:
        raise SkipCase(f"{', '.join(missing)} does not run natively on the device in {dtype}")


def _run(device: str, dtype: str, fn: Callable[..., Any], *columns: list[float]) -> np.ndarray:
    import ember_core as em
    from ember_conformance.layouts import to_numpy

    args = [em.asarray(np.array(c, dtype=np.float64), device=device).astype(dtype) for c in columns]
    return to_numpy(fn(*args)).astype(np.float64)


def flush_to_zero(device: str, dtype: str) -> str | None:
    """Denormal inputs (x * 1) and outputs (tiny * 0.5) survive unless the manifest declares ftz."""
    _on_device(device, dtype, "multiply")
    tiny = TINY[dtype]
    got = _run(device, dtype, lambda a, b: a * b, [tiny * 3, tiny * 4], [1.0, 0.5])
    flushed = [what for what, v in zip(("denormal inputs", "denormal outputs"), got) if v == 0.0]
    if not flushed:
        return None
    package = declared_ftz(device, dtype)
    if package is not None:
        return None
    return (f"flushes {' and '.join(flushed)} to zero in {dtype}, undeclared: declare it with "
            f'[deviations.{device.split(":")[0]}] ftz = ["{dtype}"] in the manifest, or keep denormals')


SPECIALS: tuple[tuple[str, tuple[str, ...], Callable[..., Any], list[list[float]], list[float]], ...] = (
    ("x/0, 0/0", ("divide",), lambda a, b: a / b, [[1.0, -1.0, 0.0], [0.0, 0.0, 0.0]], [np.inf, -np.inf, np.nan]),
    ("inf*0", ("multiply",), lambda a, b: a * b, [[np.inf], [0.0]], [np.nan]),
    ("inf-inf", ("subtract",), lambda a, b: a - b, [[np.inf], [np.inf]], [np.nan]),
    ("-0 + -0", ("add",), lambda a, b: a + b, [[-0.0], [-0.0]], [-0.0]),
    ("log of -1, 0", ("log",), lambda a: a.log(), [[-1.0, 0.0]], [np.nan, -np.inf]),
    ("sqrt of -0, -1", ("sqrt",), lambda a: a.sqrt(), [[-0.0, -1.0]], [-0.0, np.nan]),
)


def special_values(device: str, dtype: str) -> str | None:
    """IEEE results for the special cases whose ops run on the device; the others are named as skipped."""
    from ember_conformance.execute import SkipCase

    problems, skipped = [], []
    for what, ops, fn, columns, want in SPECIALS:
        try:
            _on_device(device, dtype, *ops)
        except SkipCase:
            skipped.append(what)
            continue
        got = _run(device, dtype, fn, *columns)
        want_a = np.array(want)
        same = ((got == want_a) & (np.signbit(got) == np.signbit(want_a))) | (np.isnan(got) & np.isnan(want_a))
        if not same.all():
            problems.append(f"{what}: got {got.tolist()}, IEEE 754 gives {want}")
    if len(skipped) == len(SPECIALS):
        raise SkipCase(f"none of the ops of the special-value checks runs natively in {dtype}")
    return "; ".join(problems) or None


def numerics_check(device: str, dtype: str) -> str | None:
    return "; ".join(p for p in (flush_to_zero(device, dtype), special_values(device, dtype)) if p) or None


# ---- the table --------------------------------------------------------------------------------------

def table(cases: list[dict[str, Any]], device: str) -> dict[str, dict[str, Any]]:
    """Per op:dtype over the cases that ran on the device: worst ulps, relative and absolute error, and
    the declared deviation if any."""
    declared = deviations(device) if device else {}
    out: dict[str, dict[str, Any]] = {}
    for c in cases:
        if c["level"] not in (1, 2) or c.get("how") not in ("native", "composite") or c.get("max_ulp") is None:
            continue
        key = f"{c['op']}:{c['dtype']}"
        row = out.setdefault(key, {"max_ulp": 0.0, "max_rel": 0.0, "max_abs": 0.0, "cases": 0})
        row["cases"] += 1
        for k, src in (("max_ulp", "max_ulp"), ("max_rel", "max_rel_error"), ("max_abs", "max_abs_error")):
            if c.get(src) is not None:
                row[k] = max(row[k], float(c[src]))
        if key in declared:
            row["declared"] = declared[key][0]
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["max_ulp"]))

"""Running one sample on the device and turning what happened into a verdict.

Before the call, ``dispatch.choose`` says how the (op, dtype) will run: a provider's native
kernel, the core's composite, the CPU fallback, or nothing (unsupported).  The fallback ledger
(``ember_core.fallback_report()``) read before and after the call confirms it.  A correct result
is then ``pass`` (native), ``composite`` (every op inside ran natively) or ``fallback`` (never a
pass: the device did not run it, also when a composite's inner op or a documented error came from
the host); a wrong one is ``fail``, or ``xfail`` when the serving plugin's manifest declares it.
Levels 3 and 4 run with the fallback policy ``error``: an op without a kernel raises there.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from ember_conformance import references, verdicts
from ember_conformance.layouts import place, to_numpy
from ember_conformance.precision import declared_ftz, flushed, within_declared, within_declared_range
from ember_conformance.reproducer import render
from ember_conformance.samples.base import Arr, Sample, is_statement
from ember_conformance.tolerances import Comparison, compare


class SkipCase(Exception):
    """Raised by a check that cannot run here; the message is the reason."""


class Passed(str):
    """What a custom check returns to pass with a note for the report (the demo's accuracy)."""


def materialize(value: Any, device: str) -> Any:
    if isinstance(value, Arr):
        if value.layout == "on-cpu":
            return place(value.values, value.dtype, "contiguous", "cpu")
        return place(value.values, value.dtype, value.layout, device)
    if isinstance(value, list):
        return [materialize(v, device) for v in value]
    return value


def host_values(value: Any) -> Any:
    if isinstance(value, Arr):
        return value.values.copy()
    if isinstance(value, list):
        return [host_values(v) for v in value]
    return value


def decide(op: str, device_type: str, dtype: str) -> Any:
    """The dispatcher's choice for the dtype the op computes in (None: nothing can run it)."""
    from ember_core import dispatch
    from ember_core import dtypes as dt
    from ember_core.ops.registry import REGISTRY

    schema = REGISTRY.get(op)
    if schema is None or dtype not in dt.BY_NAME:
        return None
    d = dt.BY_NAME[dtype]
    if d.kind in "biu" and (schema.result == "accumulate" or schema.int_to_float):
        d = dt.int64 if schema.result == "accumulate" else dt.default_float
    return dispatch.choose(op, device_type, d, schema.composite is not None, schema.fallback)


def declared_xfail(device_type: str, op: str, dtype: str, sample: str) -> str | None:
    """The reason a plugin serving this device type gives for an expected failure, if any."""
    from ember_core.plugins import MANAGER

    backends = list(MANAGER.providers(device_type))
    owner = MANAGER.device_owner.get(device_type)
    if owner is not None and owner not in backends:
        backends.append(owner)
    for backend in backends:
        table = backend.manifest.xfail.get(device_type, {})
        for key in (f"{op}:{dtype}:{sample}", f"{op}:{dtype}", f"{op}:*"):
            if key in table:
                return f"{table[key]} (declared by {backend.package})"
    return None


def declared_deterministic(device_type: str, provider: str | None, op: str) -> str | None:
    """The serving plugin's package when its manifest declares ``op`` deterministic on this device type."""
    from ember_core.plugins import MANAGER

    backend = MANAGER.backends.get(provider or "")
    if backend is not None and backend.manifest.deterministic.get(device_type, {}).get(op) is True:
        return backend.package
    return None


def _bits_differ(first: Any, second: Any) -> int:
    """How many output elements differ in their bits between two runs (NaN payloads included)."""
    differing = 0
    for a, b in zip(_flatten(first), _flatten(second)):
        x, y = np.ascontiguousarray(to_numpy(a)), np.ascontiguousarray(to_numpy(b))
        rows = max(x.size, 1)
        differing += int(np.count_nonzero((x.view(np.uint8).reshape(rows, -1) != y.view(np.uint8).reshape(rows, -1))
                                          .any(axis=1))) if x.size else 0
    return differing


def _ledger(device: str) -> dict[str, int]:
    """Fallback calls per op on this device (the ledger names devices with their index: ``zero:0``)."""
    import ember_core as em
    from ember_core.device import as_device

    name = str(as_device(device))
    return {e["op"]: e["calls"] for e in em.fallback_report() if e["device"] == name}


def _flatten(result: Any) -> list[Any]:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def judge(op: str, sample: Sample, result: Any, expected: Any, np_args: tuple[Any, ...]) -> Comparison:
    """Compare every output tensor with its reference; the worst comparison wins."""
    from ember_core import Tensor

    got_list, ref_list = _flatten(result), _flatten(expected)
    if len(got_list) != len(ref_list):
        return Comparison(False, f"returned {len(got_list)} outputs, expected {len(ref_list)}")
    magnitude = references.magnitude(op, np_args, sample.kwargs)
    worst = Comparison(True, max_abs=0.0, max_rel=0.0, max_ulp=0.0)
    for i, (got, ref) in enumerate(zip(got_list, ref_list)):
        if not isinstance(got, Tensor):
            return Comparison(False, f"output {i} is a {type(got).__name__}, not an ember tensor")
        ref = np.asarray(ref)
        if tuple(got.shape) != ref.shape:
            return Comparison(False, f"output {i} has shape {tuple(got.shape)}, expected {ref.shape}")
        cmp = compare(to_numpy(got), ref, got.dtype.name, magnitude=magnitude if len(got_list) == 1 else None,
                      rtol=sample.rtol, atol=sample.atol)
        if not cmp.ok:
            return cmp
        if cmp.max_ulp is not None and (worst.max_ulp is None or cmp.max_ulp >= worst.max_ulp):
            worst = cmp
    return worst


Reference = Callable[[tuple[Any, ...]], Any]


def _call(op: str, sample: Sample, device: str) -> tuple[Any, Any, tuple[Any, ...], Reference | None]:
    """Run the sample on the device and the reference on the host: (result, expected, numpy args, the
    reference for other numpy args; None for an expression)."""
    import ember_core as em

    if sample.expression is not None:
        statement = is_statement(sample.expression)
        scope: dict[str, Any] = {"x": materialize(sample.args[0], device), "xp": em}
        ref_scope: dict[str, Any] = {"x": host_values(sample.args[0]), "xp": np}
        if statement:
            exec(sample.expression, {}, scope)
            exec(sample.expression, {}, ref_scope)
            return scope["x"], ref_scope["x"], (), None
        return eval(sample.expression, {}, scope), eval(sample.expression, {}, ref_scope), (), None
    args = tuple(materialize(a, device) for a in sample.args)
    kwargs = {k: materialize(v, device) for k, v in sample.kwargs.items()}
    result = em.ops.call(op, *args, **kwargs)
    np_args = tuple(host_values(a) for a in sample.args)
    np_kwargs = {k: host_values(v) for k, v in sample.kwargs.items() if k not in ("device",)}
    reference = sample.reference or references.REFERENCES.get(op)
    if reference is None:
        raise SkipCase(f"no numpy reference for {op}")

    def on(args: tuple[Any, ...]) -> Any:
        with np.errstate(all="ignore"):
            return reference(*args, **np_kwargs)

    return result, on(np_args), np_args, on


def run_sample(level: int, op: str, dtype: str, sample: Sample, device: str) -> verdicts.CaseResult:
    """One case, in this process.  Never raises: every outcome becomes a verdict."""
    from ember_core.device import as_device

    device_type = as_device(device).type
    res = verdicts.CaseResult(id=case_id(level, op, dtype, sample.name), level=level, op=op, dtype=dtype,
                              sample=sample.name, verdict=verdicts.PASS)
    start = time.perf_counter()
    dispatched = level in (1, 2) and not core_served(op)
    choice = decide(op, device_type, dtype) if dispatched else None
    if choice is not None:
        res.how, res.provider = choice.how, choice.provider
    elif dispatched:
        res.how = "unsupported"
    try:
        with _policy(level):
            _run(res, op, dtype, sample, device, device_type)
    except SkipCase as exc:
        res.verdict, res.message = verdicts.SKIP, str(exc)
    res.seconds = time.perf_counter() - start
    if res.verdict in verdicts.BAD:
        reason = (declared_xfail(device_type, op, dtype, sample.name) or res.extra.pop("declared", None)
                  or within_declared(device, op, dtype, res.max_ulp))
        if reason is not None:
            res.verdict, res.message = verdicts.XFAIL, f"{reason}; {res.message}"
        res.reproducer = render(op, sample, dtype, device)
    elif res.verdict in verdicts.GOOD and declared_xfail(device_type, op, dtype, sample.name):
        res.message = "declared as an expected failure but passed: remove the xfail entry from the manifest"
    return res


def core_served(op: str) -> bool:
    """Views (views.toml, the ``views`` group) are the core's, ``numerics`` checks several ops: nothing to dispatch."""
    from ember_core.ops.registry import REGISTRY

    schema = REGISTRY.get(op)
    return op in ("views", "numerics") or (schema is not None and schema.file.endswith("views.toml"))


def _policy(level: int) -> Any:
    """Levels 3 and 4 prove autograd and the demo run on the device: the host fallback raises."""
    import ember_core as em

    return em.fallback_policy("error") if level >= 3 else contextlib.nullcontext()


def _run(res: verdicts.CaseResult, op: str, dtype: str, sample: Sample, device: str, device_type: str) -> None:
    from ember_core.errors import UnsupportedOpError

    if sample.custom is not None:
        try:
            message = sample.custom(device, dtype)
        except SkipCase:
            raise
        except Exception as exc:
            message = _describe(exc)
        if message and not isinstance(message, Passed):
            res.verdict, res.message = verdicts.FAIL, message
        else:
            res.verdict, res.message = _success_verdict(res.how), message or ""
        return
    before = _ledger(device) if device_type != "cpu" else {}
    try:
        result, expected, np_args, reference = _call(op, sample, device)
    except SkipCase:
        raise
    except Exception as exc:
        if sample.error is not None and isinstance(exc, sample.error):
            res.verdict = _success_verdict(res.how)
            res.message = f"raised {type(exc).__name__} as documented" + (
                "" if res.verdict != verdicts.FALLBACK else ", but on the host (the op has no kernel on the device)")
        elif sample.error is None and res.how == "unsupported" and isinstance(exc, UnsupportedOpError):
            res.verdict, res.message = verdicts.UNSUPPORTED, str(exc)
        else:
            wanted = f"expected {_names(sample.error)}, " if sample.error is not None else ""
            res.verdict, res.message = verdicts.FAIL, f"{wanted}raised {_describe(exc)}"
        return
    if sample.error is not None:
        res.verdict, res.message = verdicts.FAIL, f"expected {_names(sample.error)}, but the call returned normally"
        return
    after = _ledger(device) if device_type != "cpu" else {}
    fell_back = sorted(k for k, n in after.items() if n > before.get(k, 0))
    if fell_back:
        res.extra["fell_back"] = fell_back
    if res.how == "native" and op in fell_back:  # e.g. sum(x, dtype=float64) where only float32 is claimed
        res.verdict = verdicts.FALLBACK
        res.message = "the dispatcher has a native kernel for the input dtype, yet this call ran on the host"
        return
    cmp = judge(op, sample, result, expected, np_args)
    res.max_abs_error, res.max_rel_error, res.max_ulp = cmp.max_abs, cmp.max_rel, cmp.max_ulp
    res.tolerance = {"rtol": cmp.rtol, "atol": cmp.atol}
    if not cmp.ok and len(np_args) == 1 and not isinstance(result, (tuple, list)):
        declared = within_declared_range(device, op, dtype, to_numpy(result), np.asarray(expected),
                                         np.asarray(np_args[0]), cmp.rtol, cmp.atol)
        if declared:
            res.extra["declared"] = declared
    if not cmp.ok and reference is not None and (package := declared_ftz(device, dtype)):
        if _flushing_explains(op, sample, dtype, result, expected, np_args, reference):
            res.extra["declared"] = f"within the declared flush-to-zero of {dtype} subnormals ({package})"
    if cmp.ok and res.how == "native" and (package := declared_deterministic(device_type, res.provider, op)):
        differing = _bits_differ(result, _call(op, sample, device)[0])
        if differing:
            res.verdict = verdicts.FAIL
            res.message = (f"declared deterministic ({package}), but a second run with the same inputs differs in "
                           f"{differing} element(s)")
            return
    if cmp.ok and res.how in ("composite", "core") and fell_back:
        res.verdict = verdicts.FALLBACK
        res.message = f"correct, but {', '.join(fell_back)} ran on the host through the fallback"
    elif cmp.ok:
        res.verdict = _success_verdict(res.how)
    else:
        res.verdict, res.message = verdicts.FAIL, cmp.message


def _flushing_explains(op: str, sample: Sample, dtype: str, result: Any, expected: Any, np_args: tuple[Any, ...],
                       reference: Reference) -> bool:
    """Whether the result is right once the dtype's subnormals are flushed: in the outputs only, or in the
    inputs too (the reference run on flushed inputs), as a device without denormal support computes."""
    import ember_core as em

    got = [em.asarray(flushed(to_numpy(t), dtype), dtype=t.dtype) if isinstance(t, em.Tensor) else t
           for t in _flatten(result)]
    got_result = got if isinstance(result, (tuple, list)) else got[0]
    if judge(op, sample, got_result, flushed(expected, dtype), np_args).ok:
        return True
    try:
        want = reference(flushed(np_args, dtype))
    except Exception:  # a reference that rejects the flushed inputs explains nothing
        return False
    return judge(op, sample, got_result, flushed(want, dtype), np_args).ok


def _success_verdict(how: str) -> str:
    return {"composite": verdicts.COMPOSITE, "fallback": verdicts.FALLBACK}.get(how, verdicts.PASS)


def _names(error: Any) -> str:
    return " or ".join(e.__name__ for e in (error if isinstance(error, tuple) else (error,)))


def _describe(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    loc = f" (at {where.filename}:{where.lineno})" if where else ""
    return f"{type(exc).__name__}: {exc}{loc}"


def case_id(level: int, op: str, dtype: str, sample: str) -> str:
    return f"L{level}/{op}/{dtype}/{sample}"


def parse_case_id(case: str) -> tuple[int, str, str, str]:
    level, op, dtype, sample = case.split("/", 3)
    return int(level[1:]), op, dtype, sample

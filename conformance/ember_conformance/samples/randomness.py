"""Random ops, judged statistically with fixed seeds (so a verdict never flickers): the same seed
gives the same stream, draws have the distribution's moments, and a device reproduces the cpu
stream bit for bit (uniform, integers) as the Philox contract promises."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ember_conformance.layouts import to_numpy
from ember_conformance.samples.base import Arr, Sample

N = 20000
SIGMAS = 6.0  # bounds are this many standard errors wide: with fixed seeds, a pass is a pass


def _draw(op: str, device: str, dtype: str, seed: int, shape: Any = (N,), **params: Any) -> np.ndarray:
    import ember_core as em

    gen = em.random.Generator(device, seed)
    return to_numpy(em.ops.call(op, shape, **params, dtype=dtype, device=device, generator=gen)).astype(np.float64)


def _same_seed(op: str, params: dict[str, Any]) -> Callable[[str, str], str | None]:
    def check(device: str, dtype: str) -> str | None:
        a, b = (_draw(op, device, dtype, 1234, (1000,), **params) for _ in range(2))
        c = _draw(op, device, dtype, 4321, (1000,), **params)
        if not np.array_equal(a, b, equal_nan=True):
            return "two generators seeded alike produced different streams"
        if np.array_equal(a, c):
            return "two different seeds produced the same stream"
        return None

    return check


def _moments(op: str, params: dict[str, Any]) -> Callable[[str, str], str | None]:
    def check(device: str, dtype: str) -> str | None:
        x = _draw(op, device, dtype, 99, **params)
        if op == "random_uniform":
            lo, hi = params["low"], params["high"]
            if x.min() < lo or x.max() > hi:
                return f"values outside [{lo}, {hi}]: min {x.min()}, max {x.max()}"
            mean, var = (lo + hi) / 2, (hi - lo) ** 2 / 12
        elif op == "random_normal":
            mean, var = params["mean"], params["std"] ** 2
            z = (x - mean) / params["std"]
            skew, kurt = float(np.mean(z**3)), float(np.mean(z**4))
            if abs(skew) > SIGMAS * math.sqrt(6 / N) or abs(kurt - 3) > SIGMAS * math.sqrt(24 / N):
                return f"not normal: skewness {skew:.4f} (0), kurtosis {kurt:.4f} (3)"
        else:
            lo, hi = params["low"], params["high"]
            if x.min() < lo or x.max() > hi - 1:
                return f"values outside [{lo}, {hi}): min {x.min()}, max {x.max()}"
            counts = np.bincount((x - lo).astype(np.int64), minlength=hi - lo)
            expected = N / (hi - lo)
            chi2 = float(((counts - expected) ** 2 / expected).sum())
            dof = hi - lo - 1
            if chi2 > dof + SIGMAS * math.sqrt(2 * dof):
                return f"counts per value are not uniform: chi2 {chi2:.1f} with {dof} degrees of freedom"
            mean, var = (lo + hi - 1) / 2, ((hi - lo) ** 2 - 1) / 12
        got_mean, got_var = float(x.mean()), float(x.var())
        if abs(got_mean - mean) > SIGMAS * math.sqrt(var / N) + 1e-2 * math.sqrt(var):
            return f"mean {got_mean:.5f}, expected {mean:.5f}"
        if abs(got_var - var) > SIGMAS * var * math.sqrt(2 / N) + 2e-2 * var:
            return f"variance {got_var:.5f}, expected {var:.5f}"
        return None

    return check


def _matches_cpu(op: str, params: dict[str, Any]) -> Callable[[str, str], str | None]:
    def check(device: str, dtype: str) -> str | None:
        here, host = _draw(op, device, dtype, 7, (4099,), **params), _draw(op, "cpu", dtype, 7, (4099,), **params)
        if op == "random_normal":  # log/sin/cos may differ in the last bit between platforms
            bad = ~np.isclose(here, host, rtol=1e-5, atol=1e-5)
        else:
            bad = here != host
        if bad.any():
            i = int(np.argmax(bad))
            return (f"{int(bad.sum())} of {bad.size} draws differ from the cpu stream "
                    f"(first at {i}: {here[i]} vs {host[i]})")
        return None

    return check


def _shape_only(op: str, params: dict[str, Any], shape: tuple[int, ...]) -> Callable[[str, str], str | None]:
    def check(device: str, dtype: str) -> str | None:
        import ember_core as em

        t = em.ops.call(op, shape, **params, dtype=dtype, device=device)
        if t.shape != shape or t.dtype != dtype:
            return f"got shape {t.shape} dtype {t.dtype}, expected {shape} {dtype}"
        to_numpy(t)
        return None

    return check


_PARAMS = {"random_uniform": {"low": -2.0, "high": 3.0}, "random_normal": {"mean": 1.5, "std": 2.0},
           "random_integers": {"low": -3, "high": 7}}


def _code(op: str, params: dict[str, Any], check: str) -> str:
    return (f"gen = em.random.Generator(device, 99)\n"
            f"x = em.ops.call({op!r}, ({N},), **{params!r}, dtype=dtype, device=device, generator=gen)\n"
            f"print(np.asarray(x).mean(), np.asarray(x).var())  # {check}")


def random_op(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    op = schema.name
    params = dict(_PARAMS[op])
    if op == "random_integers" and dtype == "bool":
        params = {"low": 0, "high": 2}
    elif op == "random_integers" and dtype == "uint8":
        params = {"low": 0, "high": 10}
    out = [Sample("same-seed-same-stream", custom=_same_seed(op, params), code=_code(op, params, "run twice")),
           Sample("moments", custom=_moments(op, params), code=_code(op, params, "moments")),
           Sample("0-d", custom=_shape_only(op, params, ()), code=_code(op, params, "shape ()")),
           Sample("zero-size", custom=_shape_only(op, params, (0, 3)), code=_code(op, params, "shape (0, 3)"))]
    if device != "cpu":
        out.append(Sample("matches-cpu-stream", custom=_matches_cpu(op, params), code=_code(op, params, "vs cpu")))
    if level == 1:
        bad = {"random_uniform": {"low": 2.0, "high": 1.0}, "random_normal": {"mean": 0.0, "std": -1.0},
               "random_integers": {"low": 3, "high": 3}}[op]
        out.append(Sample("error-bad-parameters", ((3,),), {**bad, "dtype": dtype, "device": device}, error=ValueError))
    return out


def bernoulli(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    def check(device: str, dtype: str) -> str | None:
        import ember_core as em

        x = to_numpy(em.bernoulli(0.3, (N,), device=device, generator=em.random.Generator(device, 5)))
        if x.dtype != np.bool_:
            return f"bernoulli gave {x.dtype}, expected bool"
        bound = SIGMAS * math.sqrt(0.3 * 0.7 / N)
        return None if abs(x.mean() - 0.3) <= bound else f"frequency {x.mean():.4f}, expected 0.3 +- {bound:.4f}"

    code = f"x = em.bernoulli(0.3, ({N},), device=device)\nprint(np.asarray(x).mean())"
    return [Sample("frequency", custom=check, code=code)]


def permutation(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    def check(device: str, dtype: str) -> str | None:
        import ember_core as em

        p = to_numpy(em.permutation(100, device=device, generator=em.random.Generator(device, 5)))
        if sorted(p.tolist()) != list(range(100)):
            return f"not a permutation of range(100): {p[:10]}..."
        rows = em.asarray(np.arange(12.0).reshape(6, 2), device=device)
        q = to_numpy(em.permutation(rows, generator=em.random.Generator(device, 6)))
        if sorted(q[:, 0].tolist()) != list(range(0, 12, 2)) or not (q[:, 1] == q[:, 0] + 1).all():
            return f"rows were not permuted whole: {q.tolist()}"
        return None

    return [Sample("is-a-permutation", custom=check, code="print(em.permutation(100, device=device))")]


def _dropout_check(p: float, seed: int, offset: int) -> Callable[[str, str], str | None]:
    """The device's dropout against its contract, computed on the host by ember-cpu's primitives:
    kept where bernoulli's float32 draw at (seed, offset) is below 1 - p, then multiply(x, 1/(1-p))."""

    def check(device: str, dtype: str) -> str | None:
        import ember_core as em

        x = em.asarray(np.linspace(-4.0, 4.0, 4099)).astype(dtype)
        got = to_numpy(em.dropout(x.to_device(device), p, seed=seed, offset=offset)).astype(np.float64)
        at = em.random.Generator("cpu", seed)
        at.set_state((seed, offset))
        keep = em.bernoulli(em.full((), 1.0 - p, dtype=em.float32), x.shape, generator=at)
        expected = to_numpy(em.where(keep, x * (1.0 / (1.0 - p)), 0.0)).astype(np.float64)
        bad = got != expected
        if bad.any():
            i = int(np.argmax(bad))
            return (f"{int(bad.sum())} of {bad.size} elements differ from the contract "
                    f"(first at {i}: {got[i]} vs {expected[i]})")
        dropped = 1.0 - float(to_numpy(keep).mean())
        bound = SIGMAS * math.sqrt(p * (1 - p) / x.size)
        return None if abs(dropped - p) <= bound else f"dropped {dropped:.4f}, expected {p} +- {bound:.4f}"

    return check


def dropout(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    out = [Sample(f"p-{p}-at-{offset}", custom=_dropout_check(p, 17, offset),
                  code=f"print(em.dropout(em.ones(4099, dtype=dtype, device=device), {p}, seed=17, offset={offset}))")
           for p, offset in ((0.5, 0), (0.1, 3), (0.9, 2**33 + 1))]
    if level == 1:
        x = Arr(np.ones(8), dtype)
        out += [Sample("error-p-1", (x, 1.0), {"seed": 0, "offset": 0}, error=ValueError),
                Sample("error-negative-seed", (x, 0.5), {"seed": -1, "offset": 0}, error=ValueError)]
    return out

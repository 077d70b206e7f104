"""Level 0, the backend contract: discovery and identity, ABI, availability, properties, allocator,
copies in every direction for every dtype (non-contiguous sources included), synchronize, RNG,
``item``/``tolist``, and the plugin's manifest.

Each check is ``check(device, dtype) -> None | failure message`` (raising SkipCase when it cannot
apply), run as a custom sample so that a crash in a hook is isolated like any kernel's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember_conformance.execute import SkipCase
from ember_conformance.layouts import place, to_numpy
from ember_conformance.samples.base import Sample, rng_for, specials, typical
from ember_conformance.tolerances import FLOATS

ALL_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64",
              "complex64", "complex128")
PLUGIN_ERRORS: list[str] = []  # registration errors of --plugin objects, filled by plugin_loader


def _device(device: str) -> Any:
    from ember_core.device import as_device

    return as_device(device)


def _backend(device: str) -> Any:
    return _device(device).backend


def _hook(device: str, name: str) -> Callable[..., Any]:
    return _backend(device).hooks[name]


def discovery(device: str, dtype: str) -> str | None:
    from ember_core.plugins import MANAGER

    if PLUGIN_ERRORS:
        return "registering the plugin failed: " + "; ".join(PLUGIN_ERRORS)
    MANAGER.ensure_discovered()
    device_type = _device(device).type
    owner = MANAGER.device_owner.get(device_type)
    if owner is None:
        broken = [f"{b.package or b.name}: {b.reason}" for b in MANAGER.broken.values()]
        return (f"no registered plugin owns device type {device_type!r} (owners: {sorted(MANAGER.device_owner)}; "
                f"broken plugins: {broken or 'none'})")
    info = owner.info
    problems = [f"{field} is {value!r}" for field, value in (("name", info.name), ("version", info.version))
                if not isinstance(value, str) or not value]
    return "; ".join(problems) or None


def abi(device: str, dtype: str) -> str | None:
    from ember_core.plugins import ABI_MAJOR, ABI_MINOR

    info = _backend(device).info
    major, minor = info.abi
    if major != ABI_MAJOR or minor > ABI_MINOR:
        return f"built for ABI {major}.{minor}, the core speaks {ABI_MAJOR}.{ABI_MINOR}"
    return None


def availability(device: str, dtype: str) -> str | None:
    d = _device(device)
    backend = _backend(device)  # raises BackendUnavailableError with the reason when unusable
    count = backend.hooks["ember_device_count"](device_type=d.type)
    if not isinstance(count, int) or count < 1:
        return f"ember_device_count returned {count!r}, expected an int >= 1"
    reason = backend.hooks["ember_device_unavailable_reason"](device_type=d.type)
    if reason is not None:
        return f"{count} device(s) but ember_device_unavailable_reason says {reason!r}; it must be None"
    return None


def properties(device: str, dtype: str) -> str | None:
    props = _hook(device, "ember_device_properties")(_device(device))
    if not hasattr(props, "keys") or "name" not in props:
        return f"ember_device_properties returned {props!r}; it must be a mapping with at least 'name'"
    return None


def allocator(device: str, dtype: str) -> str | None:
    """Sizes from 0 bytes to 64 MiB; stats stay honest: they grow by what was allocated and shrink back."""
    import ember_core as em

    d = _device(device)
    alloc, free, stats = (_hook(device, h) for h in ("ember_alloc", "ember_free", "ember_memory_stats"))
    em.empty_cache()
    for nbytes in (0, 1, 7, 4096, 1 << 20, 64 << 20):
        before = dict(stats(d))
        for key in ("allocated_bytes", "peak_bytes"):
            if not isinstance(before.get(key), int) or before[key] < 0:
                return f"ember_memory_stats lacks a non-negative int {key!r}: {before}"
        handle = alloc(d, nbytes)
        during = dict(stats(d))
        free(d, handle)
        after = dict(stats(d))
        if during["allocated_bytes"] - before["allocated_bytes"] < nbytes:
            return (f"after allocating {nbytes} bytes, allocated_bytes grew by only "
                    f"{during['allocated_bytes'] - before['allocated_bytes']}")
        if during["peak_bytes"] < during["allocated_bytes"]:
            return f"peak_bytes {during['peak_bytes']} < allocated_bytes {during['allocated_bytes']}"
        if after["allocated_bytes"] > before["allocated_bytes"]:
            return (f"after freeing {nbytes} bytes, allocated_bytes is {after['allocated_bytes']} "
                    f"(was {before['allocated_bytes']})")
    big = em.full((16 << 20,), 3.0, dtype="float32", device=device)  # 64 MiB through the core
    tail = to_numpy(big[-3:])
    if not (tail == 3.0).all():
        return f"the end of a 64 MiB tensor reads back as {tail}"
    return None


def _values(dtype: str) -> np.ndarray:
    rng = rng_for("copies", dtype)
    x = typical(rng, (6, 7), dtype, -100, 100)
    if dtype in FLOATS:
        s = specials(dtype)
        x.reshape(-1)[: len(s)] = s
    return x


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    """Bit-for-bit where it matters: values, NaN positions and the sign of zeros."""
    if got.shape != want.shape:
        return False
    if want.dtype.kind in "fc":
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        return bool(same.all() and (np.signbit(np.real(got)) == np.signbit(np.real(want))).all())
    return bool((got == want).all())


def copies(device: str, dtype: str) -> str | None:
    """host -> device -> host, device -> device (with offsets, through the hook), strided device views
    to the host and strided host views to the device, and to a second device when there is one."""
    import ember_core as em

    want = _values(dtype)
    t = place(want, dtype, "contiguous", device)
    if not _same(to_numpy(t), want):
        return "host -> device -> host changed the values"
    strided = place(want, dtype, "strided", device)
    if not _same(to_numpy(strided), want):
        return "reading a strided device view back to the host changed the values"
    host_view = place(want, dtype, "flipped", "cpu")
    if not _same(to_numpy(em.asarray(host_view, device=device)), want):
        return "copying a non-contiguous host view to the device changed the values"
    d = _device(device)
    alloc, free, on_device = (_hook(device, h) for h in ("ember_alloc", "ember_free", "ember_copy_on_device"))
    item = t.itemsize
    dst = alloc(d, t.nbytes + 2 * item)
    try:
        on_device(d, dst, item, d, t.handle, t.offset * item, t.nbytes)
        from ember_core.tensor import Storage, Tensor

        moved = Tensor._make(Storage(d, t.nbytes + 2 * item, handle=dst), t.shape, t.strides, 1, t.dtype)
        if not _same(to_numpy(moved), want):
            return "ember_copy_on_device (at a byte offset) changed the values"
        dst = None  # the Storage owns it now and frees it
    finally:
        if dst is not None:
            free(d, dst)
    count = _backend(device).hooks["ember_device_count"](device_type=d.type)
    if count >= 2:
        other = f"{d.type}:{(d.index + 1) % count}"
        if not _same(to_numpy(strided.to_device(other)), want):
            return f"copying a strided view to {other} changed the values"
    return None


def synchronize(device: str, dtype: str) -> str | None:
    import ember_core as em

    x = em.full((1024,), 1.0, dtype="float32", device=device)
    _hook(device, "ember_synchronize")(_device(device))
    return None if to_numpy(x)[-1] == 1.0 else "values are wrong after synchronize"


def rng(device: str, dtype: str) -> str | None:
    """The core's generator state drives the device: same seed, same stream; moments of uniform."""
    import ember_core as em

    def draw(seed: int) -> np.ndarray:
        return to_numpy(em.random_uniform((10000,), device=device, generator=em.random.Generator(device, seed)))

    a, b, c = draw(11), draw(11), draw(12)
    if not np.array_equal(a, b):
        return "the same seed gave different streams"
    if np.array_equal(a, c):
        return "different seeds gave the same stream"
    em.manual_seed(5)
    first = to_numpy(em.random_uniform((100,), device=device))
    em.manual_seed(5)
    if not np.array_equal(first, to_numpy(em.random_uniform((100,), device=device))):
        return "manual_seed does not make the device's default generator repeat"
    if not (0 <= a.min() and a.max() < 1 and abs(a.mean() - 0.5) < 0.02 and abs(a.var() - 1 / 12) < 0.01):
        return f"uniform draws look wrong: min {a.min()}, max {a.max()}, mean {a.mean()}, var {a.var()}"
    return None


def item_tolist(device: str, dtype: str) -> str | None:
    want = _values(dtype)[:2, :3]
    t = place(want, dtype, "contiguous", device)
    kind = {"b": bool, "i": int, "u": int, "f": float, "c": complex}[want.dtype.kind]
    if dtype in ("float16", "bfloat16", "float32", "float64"):
        kind = float
    value = t[1, 2].item()
    if type(value) is not kind:
        return f"item() returned a {type(value).__name__}, expected {kind.__name__}"
    expected = want[1, 2].item()
    if not (value == expected or (value != value and expected != expected)):
        return f"item() returned {value!r}, expected {expected!r}"
    listed = t.tolist()
    if not _same(np.array(listed, dtype=want.dtype), want):
        return f"tolist() returned {listed!r}, expected {want.tolist()!r}"
    return None


def in_place(device: str, dtype: str) -> str | None:
    """The in-place operators hand a binary kernel its own first input as ``out`` (and, for
    ``x *= x``, as both inputs): the results must equal the out-of-place ones bit for bit."""
    x, y = _values(dtype), _values(dtype)[::-1].copy()
    if dtype == "bool":
        cases = [("x ^= y", lambda a, b: a ^ b, lambda a, b: a.__ixor__(b)),
                 ("x &= x", lambda a, b: a & a, lambda a, b: a.__iand__(a))]
    else:
        cases = [("x += y", lambda a, b: a + b, lambda a, b: a.__iadd__(b)),
                 ("x *= x", lambda a, b: a * a, lambda a, b: a.__imul__(a))]
    for text, out_of_place, in_place_op in cases:
        a, b = place(x, dtype, "contiguous", device), place(y, dtype, "contiguous", device)
        want = to_numpy(out_of_place(a, b))
        if in_place_op(a, b) is not a:
            return f"{text} returned a new tensor instead of the one it updates"
        got = to_numpy(a)
        if not _same(got, want):
            return (f"{text} (the kernel's out aliasing its input) gave {got.ravel()[:8]}..., "
                    f"out of place gave {want.ravel()[:8]}...")
    return None


def manifest_kernels(device: str, dtype: str) -> str | None:
    """Every provider's kernel table for the device type matches its manifest in both directions."""
    from ember_core.plugins import MANAGER

    device_type = _device(device).type
    problems = []
    for backend in MANAGER.providers(device_type):
        try:
            table = backend.kernels(device_type)
        except Exception as exc:
            problems.append(f"{backend.package}: {exc}")
            continue
        problems += [f"{backend.package}: kernel {op!r} is not callable" for op, k in table.items() if not callable(k)]
    return "; ".join(problems) or None


def manifest_xfails(device: str, dtype: str) -> str | None:
    """Every xfail entry names a registered op and dtype, as op:dtype[:sample] or op:*, with a reason."""
    from ember_core.ops.registry import REGISTRY
    from ember_core.plugins import MANAGER

    device_type = _device(device).type
    problems = []
    backends = {b.name: b for b in (*MANAGER.providers(device_type), _backend(device))}
    for backend in backends.values():
        for key, reason in backend.manifest.xfail.get(device_type, {}).items():
            op, _, rest = key.partition(":")
            dtype_name = rest.split(":", 1)[0]
            if REGISTRY.get(op) is None or (dtype_name != "*" and dtype_name not in ALL_DTYPES):
                problems.append(f"{backend.package}: xfail {key!r} names no registered op:dtype")
            elif not isinstance(reason, str) or not reason.strip():
                problems.append(f"{backend.package}: xfail {key!r} gives no reason")
    return "; ".join(problems) or None


CHECKS: dict[str, Callable[[str, str], str | None]] = {
    "discovery": discovery, "abi": abi, "availability": availability, "properties": properties,
    "allocator": allocator, "synchronize": synchronize, "rng": rng, "manifest-kernels": manifest_kernels,
    "manifest-xfails": manifest_xfails,
}
PER_DTYPE: dict[str, Callable[[str, str], str | None]] = {"copies": copies, "item-tolist": item_tolist,
                                                          "in-place": in_place}


def contract_groups() -> list[tuple[str, str]]:
    """(op, dtype) groups of level 0: one per check, per dtype for the per-dtype checks."""
    return [(name, "-") for name in CHECKS] + [(name, d) for name in PER_DTYPE for d in ALL_DTYPES]


def contract_samples(name: str, dtype: str) -> list[Sample]:
    check = CHECKS.get(name) or PER_DTYPE[name]
    code = f"from ember_conformance.contract import {check.__name__}\nprint({check.__name__}(device, dtype))"
    return [Sample("check", custom=check, code=code)]


def claims_hold(results: list[Any]) -> Any:
    """After levels 1-2: every (op, dtype) a plugin claims natively passed (the manifest is honest)."""
    from ember_conformance import verdicts

    ran = [r for r in results if r.level in (1, 2) and r.how == "native"]
    res = verdicts.CaseResult(id="L0/manifest-claims/-/check", level=0, op="manifest-claims", dtype="-",
                              sample="check", verdict=verdicts.PASS)
    if not ran:
        res.verdict, res.message = verdicts.SKIP, "run levels 1-2 to check the manifest's claims"
        return res
    broken = sorted({f"{r.op}:{r.dtype} ({r.provider})" for r in ran if r.verdict in verdicts.BAD})
    if broken:
        res.verdict = verdicts.FAIL
        res.message = f"{len(broken)} claimed op:dtype pairs do not pass: {', '.join(broken[:40])}"
    else:
        res.message = f"{len({(r.op, r.dtype) for r in ran})} claimed op:dtype pairs all pass"
    return res


__all__ = ["CHECKS", "PER_DTYPE", "SkipCase", "claims_hold", "contract_groups", "contract_samples"]

"""ember-cuda's smoke test, the first part of ``gpu_check.sh``: can ember use this GPU at all?

Run: ``python plugins/cuda/gpu_smoke.py``.  Each check prints one line (ok, FAIL with the error, or
skip with the reason) and none stops the next, so one short run on a GPU machine says as much as it
can:

* the driver and every device with its properties;
* one generated kernel launched by hand on ember tensors and its result read back: the shipped
  images load and run, and abi.h's argument packing is right, whatever the op layer does yet;
* a few ops on cuda tensors against numpy, with which of them ran natively and which through the
  CPU fallback (``ember_core.trace_dispatch``, ``ember_core.fallback_report``);
* with PyTorch built for CUDA: a DLPack exchange both ways, checked to be zero-copy.

Exit status: 0 every check passed or was skipped, 1 some failed, 77 (automake's "skipped") no
CUDA device, with the reason printed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import resources
from typing import Any

import numpy as np

import ember_core as em

SKIPPED = 77


class Skip(Exception):
    """A check that cannot run here (the reason is its message); not a failure."""


def check_devices() -> str:
    """The driver's version and every device ember can use, with its properties."""
    from ember_cuda import plugin

    described = []
    for index in range(plugin.ember_device_count("cuda")):
        device = em.Device("cuda", index)
        props = device.backend.hooks["ember_device_properties"](device)
        described.append(f"{device} {props['name']} (compute capability {props['compute_capability']}, "
                         f"{props['memory'] / 2**30:.1f} GiB, {props['multiprocessors']} multiprocessors, "
                         f"driver {props['driver']})")
    unusable = [f"unusable: {why}" for why in plugin.PLUGIN.runtime.discover().unusable.values()]
    return "; ".join(described + unusable)


def _address(x: em.Tensor) -> int:
    return x.handle.pointer + x.offset * x.itemsize


def check_kernel() -> str:
    """eg_binary_add_float32_flat32 launched by hand over ember tensors, its output read back."""
    from ember_cuda.plugin import PLUGIN
    from ember_gpu import abi
    from ember_gpu.build import read_index
    from ember_gpu.launch import Kernel

    name, n = "eg_binary_add_float32_flat32", 1_000_003  # several blocks, and a ragged last one
    device = PLUGIN.runtime.device(0)
    image = read_index(resources.files("ember_cuda").joinpath("kernels"))[name]
    kernel = Kernel(device, image.removesuffix(device.vendor.image_suffix), name, abi.ffi, "eg_flat_args")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    x, y = em.asarray(a, device="cuda:0"), em.asarray(b, device="cuda:0")
    out = em.full(n, np.nan, dtype=em.float32, device="cuda:0")  # what the kernel misses stays NaN
    blocks = device.blocks_for(n, abi.BLOCK)
    kernel((blocks, 1, 1), (abi.BLOCK, 1, 1),
           {"out": _address(out), "in": [_address(x), _address(y), 0], "n": n, "scalar_inputs": 0})
    wrong = np.count_nonzero(np.asarray(out) != a + b)
    if wrong:
        raise AssertionError(f"{name}: {wrong} of {n} elements differ from numpy's a + b")
    return f"{name} over {n} elements in {blocks} blocks of {abi.BLOCK} equals numpy's a + b"


# (what, fn(xp, x, y)) with xp numpy or ember_core: the same expression on both
OPS: list[tuple[str, Callable[[Any, Any, Any], Any]]] = [
    ("x + y", lambda xp, x, y: x + y),
    ("x * y", lambda xp, x, y: x * y),
    ("exp(x)", lambda xp, x, y: xp.exp(x)),
    ("sum(x)", lambda xp, x, y: xp.sum(x)),
    ("x @ y", lambda xp, x, y: x @ y),
    ("where(x > 0, x, y)", lambda xp, x, y: xp.where(x > 0, x, y)),
]


def check_ops() -> str:
    """A few ops on cuda tensors against numpy, and how each ran: native, composite or fallback."""
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
    em.reset_fallback_report()
    with em.trace_dispatch() as log:
        for text, op in OPS:
            got = op(em, em.asarray(x, device="cuda:0"), em.asarray(y, device="cuda:0"))
            np.testing.assert_allclose(np.asarray(got), op(np, x, y), rtol=1e-5, atol=1e-5, err_msg=text)
    ran: dict[str, set[str]] = {}  # "native (provider)" | "composite" | "fallback" -> ops
    for op, device_type, _, provider, how in log.counts:
        if device_type == "cuda":
            ran.setdefault(f"native ({provider})" if how == "native" else how, set()).add(op)
    how_they_ran = "; ".join(f"{how}: {', '.join(sorted(ops))}" for how, ops in sorted(ran.items()))
    moved = sum(entry["bytes_moved"] for entry in em.fallback_report())
    return f"{len(OPS)} ops match numpy; {how_they_ran}; the fallback moved {moved} bytes"


def check_dlpack() -> str:
    """Zero-copy DLPack with PyTorch both ways: a write on one side is seen on the other."""
    try:
        import torch
    except ImportError:
        raise Skip("PyTorch is not installed") from None
    if not torch.cuda.is_available():
        raise Skip(f"PyTorch {torch.__version__} sees no CUDA device")
    values = np.arange(1000, dtype=np.float32)
    theirs = torch.from_numpy(values.copy()).to("cuda:0")
    ours = em.from_dlpack(theirs)
    theirs.add_(1)
    torch.cuda.synchronize()
    if ours.device != em.Device("cuda", 0) or not np.array_equal(np.asarray(ours), values + 1):
        raise AssertionError(f"torch -> ember: {ours.device}, {np.asarray(ours)[:4]} where {values[:4] + 1} "
                             f"was written")
    mine = em.asarray(values, device="cuda:0")
    shared = torch.from_dlpack(mine)
    shared.mul_(2)
    torch.cuda.synchronize()
    if shared.data_ptr() != _address(mine) or not np.array_equal(np.asarray(mine), values * 2):
        raise AssertionError(f"ember -> torch: {np.asarray(mine)[:4]} where {values[:4] * 2} was written")
    return f"torch {torch.__version__} <-> ember, zero-copy both ways"


CHECKS: list[tuple[str, Callable[[], str]]] = [
    ("devices", check_devices), ("kernel", check_kernel), ("ops", check_ops), ("dlpack", check_dlpack),
]


def main() -> int:
    try:
        from ember_cuda import plugin
    except ImportError as exc:
        print(f"gpu_smoke: skipped: ember-cuda is not installed ({exc})")
        return SKIPPED
    if plugin.ember_device_count("cuda") == 0:
        print(f"gpu_smoke: skipped: no CUDA device: {plugin.ember_device_unavailable_reason('cuda')}")
        return SKIPPED
    failed = skipped = 0
    for name, check in CHECKS:
        try:
            with em.fallback_policy("allow"):  # what fell back is reported by the ops check, not warned
                detail = check()
        except Skip as why:
            skipped += 1
            print(f"skip {name}: {why}", flush=True)
        except Exception as exc:  # every check runs, whatever the one before did
            failed += 1
            print(f"FAIL {name}: {type(exc).__name__}: {exc}", flush=True)
        else:
            print(f"ok   {name}: {detail}", flush=True)
    print(f"gpu_smoke: {len(CHECKS) - failed - skipped} ok, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

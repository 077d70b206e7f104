"""ember-cuda against PyTorch CUDA on the same GPU, in the same process: the speed targets of issues 25 and 26.

Run: ``python bench/bench_cuda.py [--rounds R] [--sizes 16M,256M] [--matmul-size 4096] [--json PATH]``
(needs ember-cuda with a CUDA device, and PyTorch built for CUDA; it prints why and exits 77, the
"skipped" status gpu_check.sh reports, where either is missing).

Every case runs in batches of calls that end with the framework's synchronize (bench_core.timeit),
so a figure counts the device's work, not only the queueing; best of 7 batches, in alternating
rounds.  Bandwidth counts the bytes read plus written, matmul 2 n^3 flops; ``a + b`` on 16
elements is the host time per op (launch-bound).  float32 matmul is compared with TF32 off on
both sides, whatever the environment says: PyTorch at ``set_float32_matmul_precision("highest")``,
ember at ``ember_gpu.blas.set_tf32(False)``.  An ember case that runs,
even partly, through the CPU fallback is timed with one call only and marked ``fallback``: its
figure is the fallback's cost, not the GPU's.  Prints a markdown table, row by row; the ratio is
ember time / PyTorch time (lower is better) against the issue's bound on it.
Issue 26's nn rows follow: softmax, LayerNorm and BatchNorm on 8x512x1024 (bandwidth-bound: compare their
TB/s with the copy row's), conv2d 8x64x56x56 -> 64 3x3 with TF32 off and on for both frameworks.
At 2048^3 float32 and float16, ember's matmul is timed on cuBLAS and on its own tiled GEMM kernel
(``EMBER_GPU_GEMM=own``, ember-rocm's GEMM without hipBLAS), each beside PyTorch: the own kernel's
speed against cuBLAS is the ratio of those two rows' ember figures.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from bench_core import timeit

import ember_core as em

SKIPPED = 77  # automake's "skipped": no CUDA device for ember or PyTorch


@dataclass(frozen=True)
class Side:
    """One framework on one device: how a host array gets there, its namespace, its synchronize."""

    name: str
    put: Callable[[np.ndarray, str], Any]  # (host float32 array, dtype name) -> tensor on the device
    xp: Any
    sync: Callable[[], object]


def ember_side(device: str) -> Side:
    where = em.as_device(device)
    sync = functools.partial(where.backend.hooks["ember_synchronize"], where)
    return Side("ember", lambda a, dtype: em.asarray(a, device=where).astype(getattr(em, dtype), copy=False), em, sync)


def torch_side(device: str) -> Side:
    import torch

    where = torch.device(device)
    sync = torch.cuda.synchronize if where.type == "cuda" else (lambda: None)
    return Side("torch", lambda a, dtype: torch.from_numpy(a).to(where, getattr(torch, dtype)), torch, sync)


@dataclass(frozen=True)
class Case:
    name: str
    unit: str
    work: float  # seconds -> unit: seconds * work when positive, -work / seconds (a rate) when negative
    bound: float | None  # the bound on ember time / PyTorch time
    shapes: tuple[tuple[int, ...], ...]  # of the random float32 inputs
    dtype: str
    op: Callable[..., Any]  # op(xp, *inputs)


@dataclass
class Row:
    case: str
    unit: str
    ember: float
    torch: float
    ratio: float  # ember time / PyTorch time
    bound: float | None
    ember_ran: str  # "native", or "composite" / "fallback" when any part of it did


def cases(sizes: list[int], matmul: int, rows: tuple[int, int, int] | None = None,
          conv: tuple[tuple[int, ...], tuple[int, ...]] | None = None) -> list[Case]:
    out = [Case("a + b, 16 float32 (host time per op)", "us", 1e6, None, ((16,), (16,)), "float32",
                lambda xp, a, b: a + b)]
    for n in sizes:
        label, nbytes = _label(n), 4 * n
        out += [
            Case(f"add, {label} float32", "TB/s", -3 * nbytes / 1e12, 1 / 0.95, ((n,), (n,)), "float32",
                 lambda xp, a, b: a + b),
            Case(f"multiply, {label} float32", "TB/s", -3 * nbytes / 1e12, 1 / 0.95, ((n,), (n,)), "float32",
                 lambda xp, a, b: a * b),
            Case(f"exp, {label} float32", "TB/s", -2 * nbytes / 1e12, 1 / 0.95, ((n,),), "float32",
                 lambda xp, a: xp.exp(a)),
            Case(f"sum, {label} float32", "TB/s", -nbytes / 1e12, 1 / 0.9, ((n,),), "float32",
                 lambda xp, a: xp.sum(a)),
        ]
    n = min(OWN_GEMM_SIZE, matmul)
    for dtype, (choice, on) in itertools.product(("float32", "float16"), GEMMS):  # ember's own GEMM beside cuBLAS
        out.append(Case(f"matmul {n}^3 {dtype}, ember on {on}", "TFLOP/s", -2 * n**3 / 1e12, None, ((n, n),) * 2,
                        dtype, functools.partial(_matmul_on, choice)))
    for dtype, note in (("float32", " (TF32 off)"), ("bfloat16", ""), ("float16", "")):
        out.append(Case(f"matmul {matmul}^3 {dtype}{note}", "TFLOP/s", -2 * matmul**3 / 1e12, 1 / 0.97,
                        ((matmul, matmul), (matmul, matmul)), dtype, lambda xp, a, b: a @ b))
    return out + nn_cases(rows or ROWS, conv or CONV)


ROWS = (8, 512, 1024)  # issue 26's normalization shape: bandwidth-bound, within 10 % of the copy's
CONV = ((8, 64, 56, 56), (64, 64, 3, 3))  # x, weight: 3x3, padding 1


def _functional(xp: Any) -> Any:
    """ember's nn.functional or PyTorch's: the same names and arguments."""
    if xp is em:
        return em.nn.functional
    import torch

    return torch.nn.functional


def _conv(tf32: bool, xp: Any, x: Any, w: Any) -> Any:
    """conv2d at one precision setting on both sides (PyTorch's cuDNN uses TF32 by default)."""
    import torch
    from ember_gpu.blas import set_tf32

    torch.backends.cudnn.allow_tf32 = tf32
    set_tf32(tf32)
    try:
        return _functional(xp).conv2d(x, w, padding=1)
    finally:
        torch.backends.cudnn.allow_tf32 = True
        set_tf32(False)


def nn_cases(rows: tuple[int, int, int], conv: tuple[tuple[int, ...], tuple[int, ...]]) -> list[Case]:
    """Issue 26's nn rows: copy (the bandwidth reference), softmax, LayerNorm and BatchNorm (training) on
    ``rows`` float32, and conv2d of ``conv`` (x, weight) with TF32 off and on (ember: im2col + cuBLAS)."""
    moved = -2 * 4 * math.prod(rows) / 1e12  # read once, written once
    x, w = conv
    flops = -2 * x[0] * w[0] * x[2] * x[3] * math.prod(w[1:]) / 1e12
    shape, conv_shape = "x".join(map(str, rows)), f"{'x'.join(map(str, x))} -> {w[0]}, {w[2]}x{w[3]}"
    return [
        Case(f"copy {shape} float32 (the bandwidth reference)", "TB/s", moved, None, (rows,), "float32",
             lambda xp, a: xp.asarray(a, copy=True)),
        Case(f"softmax {shape} float32, last dim", "TB/s", moved, 1.0, (rows,), "float32",
             lambda xp, a: _functional(xp).softmax(a, -1)),
        Case(f"LayerNorm({rows[-1]}) {shape} float32", "TB/s", moved, 1.0, (rows,), "float32",
             lambda xp, a: _functional(xp).layer_norm(a, (rows[-1],))),
        Case(f"BatchNorm (training) {shape} float32", "TB/s", moved, 1.0, (rows,), "float32",
             lambda xp, a: _functional(xp).batch_norm(a, None, None, training=True)),
        *(Case(f"conv2d {conv_shape}, TF32 {'on' if tf32 else 'off'} (ember: its own kernels)", "TFLOP/s", flops,
               2.0, conv, "float32", functools.partial(_conv, tf32)) for tf32 in (False, True)),
    ]


OWN_GEMM_SIZE = 2048  # (or --matmul-size, when smaller)
GEMMS = (("vendor", "cuBLAS"), ("own", "its own tiled GEMM"))  # ember_gpu.blas.set_gemm's choice, in words


def _matmul_on(choice: str, xp: Any, a: Any, b: Any) -> Any:
    """a @ b, ember's float matmul on the GEMM ``choice`` names (PyTorch's as it is)."""
    if xp is not em:
        return a @ b
    from ember_gpu.blas import set_gemm

    set_gemm(choice)
    try:
        return a @ b
    finally:
        set_gemm("auto")


def _label(n: int) -> str:
    return f"{n >> 20}M" if n % (1 << 20) == 0 else str(n)


@functools.lru_cache(maxsize=2)  # the cases of one size share their inputs
def _random(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


def how_ember_ran(call: Callable[[], object]) -> str:
    """"native" if every op of ``call`` ran on a GPU kernel, else the worst of composite / fallback."""
    with em.trace_dispatch() as log:
        call()
    seen = {how for _, device_type, _, _, how in log.counts if device_type != "cpu"}
    return next((how for how in ("fallback", "composite") if how in seen), "native")


def measure(case: Case, ember: Side, torch: Side, rounds: int, min_time: float = 0.3) -> Row:
    inputs = [_random(shape, seed) for seed, shape in enumerate(case.shapes)]
    calls = {}
    for side in (ember, torch):
        tensors = [side.put(a, case.dtype) for a in inputs]
        calls[side.name] = functools.partial(case.op, side.xp, *tensors)
    ran = how_ember_ran(calls["ember"])
    budget = {"ember": (min_time, 7) if ran == "native" else (0.0, 1), "torch": (min_time, 7)}
    times: dict[str, float] = {}
    for _ in range(rounds if ran == "native" else 1):  # alternate, so that a noisy moment hits both
        for side in (ember, torch):
            seconds, repeats = budget[side.name]
            best = timeit(calls[side.name], min_time=seconds, repeats=repeats, sync=side.sync)
            times[side.name] = min(times.get(side.name, float("inf")), best)
    figure = {k: t * case.work if case.work > 0 else -case.work / t for k, t in times.items()}
    return Row(case.name, case.unit, figure["ember"], figure["torch"], times["ember"] / times["torch"], case.bound,
               ran)


def markdown(row: Row) -> str:
    verdict = "-" if row.bound is None else f"<= {row.bound:.2f}" + ("" if row.ratio <= row.bound else " MISS")
    return (f"| {row.case} | {row.unit} | {row.ember:.3g} | {row.torch:.3g} | {row.ratio:.2f} | {verdict} "
            f"| {row.ember_ran} |")


def run(todo: list[Case], ember: Side, torch: Side, rounds: int, header: dict[str, Any], json_path: Path | None,
        min_time: float = 0.3) -> list[Row]:
    """Measure every case, printing the markdown table row by row (and rewriting json_path after
    each), so that what a timeout cuts short still leaves the rows measured before it; a case that
    raises is reported as failed and the next one runs."""
    print(", ".join(f"{k}={v}" for k, v in header.items()), flush=True)
    print("| case | unit | ember | PyTorch | ember/PyTorch time | bound | ember ran |", flush=True)
    print("|---|---|---|---|---|---|---|", flush=True)
    rows: list[Row] = []
    failed: dict[str, str] = {}
    for case in todo:
        try:
            rows.append(measure(case, ember, torch, rounds, min_time))
        except Exception as exc:  # a broken case must not cost the GPU run the cases after it
            failed[case.name] = f"{type(exc).__name__}: {exc}"
            print(f"| {case.name} | failed: {failed[case.name]} |", flush=True)
            continue
        print(markdown(rows[-1]), flush=True)
        if json_path is not None:
            saved = {**header, "rows": [asdict(r) for r in rows], "failed": failed}
            json_path.write_text(json.dumps(saved, indent=1) + "\n")
    native = [r for r in rows if r.ember_ran == "native"]
    met = sum(r.bound is not None and r.ratio <= r.bound for r in native)
    print(f"bench_cuda: {len(todo)} cases on {header['gpu']}: {len(native)} native ({met} within their issue's "
          f"bound), {len(rows) - len(native)} through the CPU fallback or composites, {len(failed)} failed")
    return rows


def unavailable() -> str | None:
    """Why this benchmark cannot run here, or None."""
    reasons = []
    try:
        from ember_cuda import plugin
    except ImportError as exc:
        reasons.append(f"ember-cuda is not installed ({exc})")
    else:
        if plugin.ember_device_count("cuda") == 0:
            reasons.append(f"ember has no CUDA device: {plugin.ember_device_unavailable_reason('cuda')}")
    try:
        import torch
    except ImportError:
        reasons.append("PyTorch is not installed")
    else:
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            reasons.append(f"PyTorch {torch.__version__} ({build}) sees no CUDA device")
    return "; ".join(reasons) or None


def _size(text: str) -> int:
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(text[:-1] if scale > 1 else text) * scale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="alternating measurement rounds per case (default 3)")
    parser.add_argument("--sizes", type=lambda s: [_size(x) for x in s.split(",")], default=[16 << 20, 256 << 20],
                        help="elements of the elementwise and sum cases (default 16M,256M)")
    parser.add_argument("--matmul-size", type=int, default=4096, help="n of the n^3 matmuls (default 4096)")
    parser.add_argument("--json", type=Path, help="also write the rows here, as JSON (rewritten after each row)")
    args = parser.parse_args(argv)
    why = unavailable()
    if why is not None:
        print(f"bench_cuda: skipped: {why}")
        return SKIPPED
    import torch
    from ember_gpu.blas import set_tf32

    torch.set_float32_matmul_precision("highest")  # TF32 off: the defaults, unless the environment changed them
    set_tf32(False)
    device = em.as_device("cuda:0")
    props = device.backend.hooks["ember_device_properties"](device)
    header = {"gpu": props["name"], "driver": props["driver"], "torch": torch.__version__, "ember_tf32": props["tf32"]}
    todo = cases(args.sizes, args.matmul_size)
    rows = run(todo, ember_side("cuda:0"), torch_side("cuda:0"), args.rounds, header, args.json)
    return 0 if len(rows) == len(todo) else 1


if __name__ == "__main__":
    sys.exit(main())

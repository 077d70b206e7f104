"""float32 matmul shapes, ember vs PyTorch (CPU) vs numpy, measured alternately in one process.

Run: ``python bench/bench_gemm.py [--threads 2] [--rounds 15] [--shapes 2048x2048x2048,...]``
(shapes are MxKxN; a suffix ``:aT`` or ``:bT`` makes that operand a transposed view, as in the
backward pass of a linear layer; ``--shapes mlp`` runs the products of a 784-256-256-10 MLP step
at batch 128).  Each round times one batch of calls per framework in turn, so that a noisy,
shared machine slows all of them alike; the ratio ember / PyTorch is taken per round and
reported as its median and its best (lower is better), with each framework's median GFLOP/s.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

import ember_core as em

try:
    import torch
except ImportError:  # the ember and numpy columns still run
    torch = None

DEFAULT_SHAPES = "2048x2048x2048,512x512x512,1024x1024x1024,256x4096x4096,256x2048x2048,128x128x128"
MLP_SHAPES = ("128x784x256,128x256x256,256x128x784:aT,784x128x256:aT,128x256x784:bT,128x256x256:bT,"
              "128x256x10:bT,128x10x256,10x128x256:aT")


def seconds(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def operand(rows: int, cols: int, transposed: bool, rng: np.random.Generator) -> np.ndarray:
    """A (rows, cols) float32 operand, as a transposed view of a (cols, rows) array when asked."""
    if transposed:
        return rng.standard_normal((cols, rows), np.float32).T
    return rng.standard_normal((rows, cols), np.float32)


def bench_shape(spec: str, rounds: int) -> None:
    dims, *flags = spec.split(":")
    m, k, n = (int(v) for v in dims.split("x"))
    rng = np.random.default_rng(0)
    a, b = operand(m, k, "aT" in flags, rng), operand(k, n, "bT" in flags, rng)
    ea, eb = em.asarray(a), em.asarray(b)
    fns: dict[str, Callable[[], object]] = {"ember": lambda: ea @ eb}
    if torch is not None:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        fns["torch"] = lambda: ta @ tb
    gflop = 2 * m * k * n / 1e9
    calls = max(1, int(0.02 / (gflop / 200)))   # ~20 ms per batch at 200 GFLOP/s
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(seconds(fn, calls))
    # numpy after the alternating rounds, not inside them: its OpenBLAS threads spin for a while
    # after each call and, on two cores, took a third of ember's time in the next round (ember/torch
    # 1.64 with numpy in the rounds, 1.01 without, same build and minute)
    times["numpy"] = [seconds(lambda: a @ b, calls) for _ in range(rounds)]
    rates = "  ".join(f"{name} {gflop / np.median(t):6.0f}" for name, t in times.items())
    line = f"{m}x{k} @ {k}x{n}{''.join(' ' + f for f in flags)}: GFLOP/s {rates}"
    if torch is not None:
        ratio = np.array(times["ember"]) / np.array(times["torch"])
        line += f"  | ember/torch median {np.median(ratio):.3f} best {ratio.min():.3f}"
    print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="comma-separated MxKxN[:aT][:bT], or mlp")
    args = parser.parse_args()
    em.set_num_threads(args.threads)
    if torch is not None:
        torch.set_num_threads(args.threads)
    for spec in (MLP_SHAPES if args.shapes == "mlp" else args.shapes).split(","):
        bench_shape(spec, args.rounds)


if __name__ == "__main__":
    main()

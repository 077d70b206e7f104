"""float32 matmul shapes, ember vs PyTorch (CPU) vs numpy, measured alternately in one process.

Run: ``python bench/bench_gemm.py [--threads 2] [--rounds 15] [--shapes 2048x2048x2048,...]``
(shapes are MxKxN).  Each round times one batch of calls per framework in turn, so that a noisy,
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


def seconds(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def bench_shape(m: int, k: int, n: int, rounds: int) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    ea, eb = em.asarray(a), em.asarray(b)
    fns: dict[str, Callable[[], object]] = {"ember": lambda: ea @ eb}
    if torch is not None:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        fns["torch"] = lambda: ta @ tb
    # numpy last: its OpenBLAS threads spin for a while after each call, which slows whatever runs
    # next; that is ember, in the next round, so the ratio errs against ember
    fns["numpy"] = lambda: a @ b
    gflop = 2 * m * k * n / 1e9
    calls = max(1, int(0.02 / (gflop / 200)))   # ~20 ms per batch at 200 GFLOP/s
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(seconds(fn, calls))
    rates = "  ".join(f"{name} {gflop / np.median(t):6.0f}" for name, t in times.items())
    line = f"{m}x{k} @ {k}x{n}: GFLOP/s {rates}"
    if torch is not None:
        ratio = np.array(times["ember"]) / np.array(times["torch"])
        line += f"  | ember/torch median {np.median(ratio):.3f} best {ratio.min():.3f}"
    print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="comma-separated MxKxN")
    args = parser.parse_args()
    em.set_num_threads(args.threads)
    if torch is not None:
        torch.set_num_threads(args.threads)
    for shape in args.shapes.split(","):
        m, k, n = (int(v) for v in shape.split("x"))
        bench_shape(m, k, n, args.rounds)


if __name__ == "__main__":
    main()

"""Core benchmarks, side by side with PyTorch (CPU) and numpy in the same process.

Run: ``python bench/bench_core.py`` (PyTorch rows appear when ``torch`` is importable:
``pip install torch==2.13.0``).  Prints one row per case with the best time of each
framework (of 7 batches: noise on a shared machine only ever adds time) and the ratio
ember / PyTorch (lower is better).  Absolute numbers swing on shared
machines; the ratios measured in one run are what we report.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

import ember_core as em

try:
    import torch
except ImportError:  # the ember column still runs
    torch = None


def timeit(fn: Callable[[], object], *, min_time: float = 0.3, repeats: int = 7,
           sync: Callable[[], object] = lambda: None) -> float:
    """Best seconds per call over `repeats` batches, each batch running >= min_time / repeats.

    `sync` ends every batch: a device's synchronize, so that the work a GPU still has queued counts."""
    fn()
    sync()
    n, t = 1, 0.0
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        t = time.perf_counter() - start
        if t > min_time / repeats:
            break
        n *= 2
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / n)
    return min(samples)


def cases(threads: int) -> list[tuple[str, str, dict[str, Callable[[], object]], float]]:
    """(name, unit, {framework: fn}, work) where work converts seconds into the unit."""
    rng = np.random.default_rng(0)
    out = []

    small = rng.standard_normal(16).astype(np.float32)
    a_s, b_s = em.asarray(small), em.asarray(small)
    fns = {"ember": lambda: a_s + b_s, "numpy": lambda: small + small}
    if torch is not None:
        ta = torch.from_numpy(small.copy())
        fns["torch"] = lambda: ta + ta
    out.append(("a + b, 16 float32 (per-op overhead)", "us", fns, 1e6))

    big = rng.standard_normal(16 * 2**20).astype(np.float32)
    a_b, b_b = em.asarray(big), em.asarray(big)
    fns = {"ember": lambda: a_b + b_b, "numpy": lambda: big + big}
    if torch is not None:
        tb = torch.from_numpy(big.copy())
        fns["torch"] = lambda: tb + tb
    out.append(("add, 16M float32", "GB/s", fns, -3 * big.nbytes / 1e9))

    fns = {"ember": lambda: em.sum(a_b), "numpy": lambda: big.sum()}
    if torch is not None:
        fns["torch"] = lambda: tb.sum()
    out.append(("sum, 16M float32", "GB/s", fns, -big.nbytes / 1e9))

    m = rng.standard_normal((2048, 2048)).astype(np.float32)
    a_m = em.asarray(m)
    fns = {"ember": lambda: a_m @ a_m, "numpy": lambda: m @ m}
    if torch is not None:
        tm = torch.from_numpy(m.copy())
        fns["torch"] = lambda: tm @ tm
    out.append(("matmul 2048^3 float32", "GFLOP/s", fns, -2 * 2048**3 / 1e9))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="alternating measurement rounds per case")
    args = parser.parse_args()
    em.set_num_threads(args.threads)
    if torch is not None:
        torch.set_num_threads(args.threads)
    print(f"threads={args.threads}  torch={getattr(torch, '__version__', 'not installed')}  numpy={np.__version__}")
    print(f"{'case':42} {'unit':8} {'ember':>10} {'torch':>10} {'numpy':>10} {'ember/torch time':>17}")
    for name, unit, fns, work in cases(args.threads):
        times: dict[str, float] = {}
        for _ in range(args.rounds):  # alternate frameworks so that a noisy moment hits both
            for k, f in fns.items():
                times[k] = min(times.get(k, float("inf")), timeit(f))
        shown = {k: f"{t * work if work > 0 else -work / t:10.2f}" for k, t in times.items()}
        ratio = f"{times['ember'] / times['torch']:17.2f}" if "torch" in times else "-"
        columns = " ".join(f"{shown.get(k, '-'):>10}" for k in ("ember", "torch", "numpy"))
        print(f"{name:42} {unit:8} {columns} {ratio:>17}")

if __name__ == "__main__":
    main()

"""Saving and loading a float32 state dict: em.save / em.load beside safetensors + PyTorch on the same machine.

Run: ``python bench/bench_serialization.py [--size MIB] [--dir DIR]`` (issue 30 sizes it at 1024 MiB).
Each case is timed best of ``--rounds``, ember and the other in turn, files in ``--dir``.  The file
system matters: em.save fsyncs before its rename, safetensors' save_file does not ("save, no fsync" is
em.save with the fsync skipped: the write path alone).  Ratio = ember time / the other's time (below
1: ember is faster).  Loads read from the page cache (the file was just written).  em.load maps files
of 1 MiB or more by default, as load_file does, so "load" measures mapping and building the tensors;
"load, copy" (``mmap=False``) reads every byte into fresh memory.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import ember_core as em

LAYER = 4 * 1024 * 1024  # bytes per tensor: 1 MiB-float32 matrices, a plausible layer size


def state_dicts(mib: int) -> tuple[dict[str, em.Tensor], dict[str, torch.Tensor]]:
    count = max(1, mib * 1024 * 1024 // LAYER)
    rng = np.random.default_rng(0)
    arrays = {f"layer{i}.weight": rng.standard_normal((1024, LAYER // 4096), dtype=np.float32) for i in range(count)}
    return ({k: em.asarray(v) for k, v in arrays.items()}, {k: torch.from_numpy(v) for k, v in arrays.items()})


def best_alternating(first: Callable[[], object], second: Callable[[], object], rounds: int) -> tuple[float, float]:
    """Best seconds of each, the two run in turn so that a noisy neighbour hits both alike."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for fn, out in ((first, times[0]), (second, times[1])):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return min(times[0]), min(times[1])


def without_fsync(fn: Callable[[], object]) -> None:
    fsync = os.fsync
    os.fsync = lambda fd: None
    try:
        fn()
    finally:
        os.fsync = fsync


def safetensors_mmap_load(path: Path) -> dict[str, torch.Tensor]:
    with safe_open(path, framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="MiB of float32 tensors (default 1024)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where the files go (default: a temporary dir)")
    args = parser.parse_args(argv)
    ours, theirs = state_dicts(args.size)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        mine, other = Path(tmp) / "ember.safetensors", Path(tmp) / "torch.safetensors"
        rows = [
            ("save", lambda: em.save(ours, mine), lambda: save_file(theirs, other), "save_file"),
            ("save, no fsync", lambda: without_fsync(lambda: em.save(ours, mine)), lambda: save_file(theirs, other),
             "save_file"),
            ("load", lambda: em.load(mine), lambda: load_file(other), "load_file"),
            ("load, mmap", lambda: em.load(mine, mmap=True), lambda: safetensors_mmap_load(other), "safe_open"),
            ("load, copy", lambda: em.load(mine, mmap=False), lambda: load_file(other), "load_file"),
        ]
        em.save(ours, mine)
        save_file(theirs, other)
        nbytes = os.path.getsize(mine)
        print(f"{len(ours)} float32 tensors, {nbytes / 2**20:.0f} MiB, files in {tmp}, best of {args.rounds}")
        print(f"{'case':<15} {'ember':>10} {'safetensors+torch':>20} {'ember / other time':>20}")
        for name, ember_fn, other_fn, other_name in rows:
            t_ember, t_other = best_alternating(ember_fn, other_fn, args.rounds)
            print(f"{name:<15} {nbytes / t_ember / 1e9:>7.2f} GB/s {nbytes / t_other / 1e9:>11.2f} GB/s "
                  f"({other_name}) {t_ember / t_other:>7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

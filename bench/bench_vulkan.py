"""ember-vulkan against ember-cpu, the same ops in the same process: the rows of bench_core.py.

Run: ``python bench/bench_vulkan.py`` (needs ember-vulkan and a Vulkan device; CI uses Mesa's
lavapipe, a CPU rasterizer, where the ratios say what the Vulkan path costs, not GPU speed).
Every vulkan call ends with ``synchronize``, so a row times the submission and the wait as well
as the kernel: the ``a + b`` row is the cost of one recorded, submitted and awaited op.
Prints the best time of each (alternating rounds) and the ratio vulkan / cpu (lower is better).

``--sweep-tiles`` times the shared-memory GEMM (the shader GPUs run) at each tile size (its
specialization constants) in one run; ``--torch`` compares with PyTorch CUDA on the same machine
(issue 29's cases, each op followed by a synchronize) when torch.cuda is available.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from functools import partial

import numpy as np
from bench_core import timeit

import ember_core as em


def cases(n_add: int, n_mm: int) -> list[tuple[str, str, dict[str, Callable[[], object]], float]]:
    """(name, unit, {device: fn}, work) where work converts seconds into the unit (negative: a rate)."""
    vulkan = em.as_device("vulkan:0")
    sync = vulkan.backend.hooks["ember_synchronize"]
    rng = np.random.default_rng(0)

    def pair(arr: np.ndarray) -> dict[str, em.Tensor]:
        return {"cpu": em.asarray(arr, device="cpu"), "vulkan": em.asarray(arr, device=vulkan)}

    def on_both(op: Callable[[em.Tensor], object], data: dict[str, em.Tensor]) -> dict[str, Callable[[], object]]:
        def run_vulkan() -> None:
            op(data["vulkan"])
            sync(vulkan)

        return {"cpu": lambda: op(data["cpu"]), "vulkan": run_vulkan}

    small = pair(rng.standard_normal(16).astype(np.float32))
    big_np = rng.standard_normal(n_add).astype(np.float32)
    big = pair(big_np)
    mat = pair(rng.standard_normal((n_mm, n_mm)).astype(np.float32))
    steps = {device: _demo_step(em.as_device(device), rng) for device in ("cpu", "vulkan:0")}
    return [
        ("a + b, 16 float32 (per-op submit)", "us", on_both(lambda x: x + x, small), 1e6),
        (f"add, {n_add >> 20}M float32", "GB/s", on_both(lambda x: x + x, big), -3 * big_np.nbytes / 1e9),
        (f"sum, {n_add >> 20}M float32", "GB/s", on_both(em.sum, big), -big_np.nbytes / 1e9),
        (f"matmul {n_mm}^3 float32", "GFLOP/s", on_both(lambda x: x @ x, mat), -2 * n_mm**3 / 1e9),
        ("demo CNN training step, batch 32", "ms", {"cpu": steps["cpu"], "vulkan": lambda: (steps["vulkan:0"](),
                                                                                        sync(vulkan))}, 1e3),
    ]


def _demo_step(device: em.Device, rng: np.random.Generator) -> Callable[[], object]:
    """One forward, backward and Adam step of ``ember demo``'s CNN on a fixed batch of digits-sized images."""
    from ember_core import demo, nn, optim

    em.manual_seed(0)
    model = demo.make_model(device)
    optimizer = optim.Adam(model.parameters(), lr=3e-3)
    images = em.asarray(rng.random((32, 1, 8, 8)).astype(np.float32), device=device)
    labels = em.asarray(rng.integers(0, 10, 32), device=device)

    def step() -> None:
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


TILE_SWEEP = [(2, 2, 16), (4, 4, 8), (4, 4, 16), (4, 4, 32), (8, 4, 16), (4, 8, 16), (8, 8, 8), (8, 8, 16)]


def sweep_tiles(n: int, rounds: int) -> None:
    """GFLOP/s of matmul.comp at n^3 float32 for each (rows, cols, step) of TILE_SWEEP."""
    from ember_vulkan import kernels, runtime

    vulkan = em.as_device("vulkan:0")
    sync = vulkan.backend.hooks["ember_synchronize"]
    dev = runtime.device(0)
    saved = dev.is_cpu, dev.matmul_tiles
    dev.is_cpu = False  # CPU devices otherwise take the barrier-free direct kernel
    a = em.asarray(np.random.default_rng(0).standard_normal((n, n)).astype(np.float32), device=vulkan)
    try:
        for tiles in TILE_SWEEP:
            try:
                kernels.set_matmul_tiles(0, *tiles)
            except ValueError as exc:
                print(f"tiles {tiles}: skipped ({exc})")
                continue
            best = min(timeit(lambda: a @ a, sync=lambda: sync(vulkan)) for _ in range(rounds))
            print(f"matmul {n}^3 float32, tiles rows x cols x step = {tiles}: {2 * n**3 / best / 1e9:10.1f} GFLOP/s")
    finally:
        dev.is_cpu, dev.matmul_tiles = saved


def torch_cases(rounds: int) -> None:
    """ember-vulkan / PyTorch CUDA time for issue 29's cases, each op followed by a synchronize."""
    try:
        import torch
    except ImportError:
        print("--torch: PyTorch is not installed")
        return
    if not torch.cuda.is_available():
        print("--torch: torch.cuda is not available")
        return
    vulkan = em.as_device("vulkan:0")
    sync = vulkan.backend.hooks["ember_synchronize"]
    rng = np.random.default_rng(0)
    cases = [("add16", (16,), lambda x: x + x, lambda x: x + x),
             ("add16M", (16 << 20,), lambda x: x + x, lambda x: x + x),
             ("sum16M", (16 << 20,), em.sum, torch.sum),
             ("exp16M", (16 << 20,), em.exp, torch.exp),
             ("matmul2048", (2048, 2048), lambda x: x @ x, lambda x: x @ x)]
    print(f"{'case':12} {'ember-vulkan us':>16} {'torch-cuda us':>14} {'ratio':>7}")
    for name, shape, ours, theirs in cases:
        data = rng.standard_normal(shape).astype(np.float32)
        x, y = em.asarray(data, device=vulkan), torch.from_numpy(data).cuda()
        t_ours = min(timeit(partial(ours, x), sync=lambda: sync(vulkan)) for _ in range(rounds))
        t_torch = min(timeit(partial(theirs, y), sync=torch.cuda.synchronize) for _ in range(rounds))
        print(f"{name:12} {t_ours * 1e6:16.1f} {t_torch * 1e6:14.1f} {t_ours / t_torch:7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2, help="alternating measurement rounds per case")
    parser.add_argument("--add-elements", type=int, default=16 << 20)
    parser.add_argument("--matmul-size", type=int, default=1024)
    parser.add_argument("--sweep-tiles", action="store_true", help="time the tiled GEMM at each tile size")
    parser.add_argument("--torch", action="store_true", help="compare with PyTorch CUDA (issue 29's cases)")
    args = parser.parse_args()
    if args.sweep_tiles or args.torch:
        if args.sweep_tiles:
            sweep_tiles(args.matmul_size, args.rounds)
        if args.torch:
            torch_cases(args.rounds)
        return
    props = em.as_device("vulkan:0").backend.hooks["ember_device_properties"](em.as_device("vulkan:0"))
    print(f"vulkan:0 = {props['name']} ({props['type']}), VK_DRIVER_FILES={os.environ.get('VK_DRIVER_FILES', '-')}")
    print(f"{'case':36} {'unit':8} {'cpu':>10} {'vulkan':>10} {'vulkan/cpu time':>16}")
    for name, unit, fns, work in cases(args.add_elements, args.matmul_size):
        times: dict[str, float] = {}
        for _ in range(args.rounds):  # alternate devices so that a noisy moment hits both
            for device, fn in fns.items():
                times[device] = min(times.get(device, float("inf")), timeit(fn))
        shown = {k: f"{t * work if work > 0 else -work / t:10.2f}" for k, t in times.items()}
        print(f"{name:36} {unit:8} {shown['cpu']} {shown['vulkan']} {times['vulkan'] / times['cpu']:16.1f}")


if __name__ == "__main__":
    main()

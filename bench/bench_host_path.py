"""The host time of ember's own per-op path, on any machine: ember-cpu, and ember-cuda on ember-gpu's
fake driver with the driver's launch call made a no-op (so no GPU and no kernel work: what is left
is the core's dispatch, the op layer's argument packing and the launch call's own cost).

Run: ``python bench/bench_host_path.py`` after building the host kernels into plugins/gpu/build/host-kernels
(``ember_gpu.build.build_host_libraries``; the test run and .ci/run build them); ``EMBER_HOTPATH=0`` measures
the pure-Python path beside the compiled one (ember_core/hotpath.py).
On a real GPU a launch adds the driver's own time (about 1.4 µs per libcuda call through cffi on the
H200 machine, ../shared/notes/gpu.md), and PyTorch's figure there is the one to compare with
(bench/bench_cuda.py measures both); this bench tracks what ember controls, from one session to the
next.  PyTorch CPU runs beside the cpu rows for scale.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import torch
from bench_core import timeit
from bench_train import _ten_ops

HOST_KERNELS = Path(__file__).resolve().parents[1] / "plugins" / "gpu" / "build" / "host-kernels"


def cases(em: object, device: str, small: np.ndarray) -> dict[str, object]:
    a = em.asarray(small, device=device)
    g = em.asarray(small, device=device).requires_grad_()
    return {"a + b, 16 float32": lambda: a + a,
            "10 chained ops, requires_grad, + backward": lambda: _ten_ops(g, em).sum().backward()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host-kernels", type=Path, default=HOST_KERNELS)
    args = parser.parse_args(argv)
    if not args.host_kernels.is_dir():
        print(f"no host kernels at {args.host_kernels}; build them first (see the docstring)", file=sys.stderr)
        return 2
    os.environ["EMBER_GPU_FAKE_DRIVER"] = str(args.host_kernels)
    from ember_gpu.fake import FakeGpu

    import ember_core as em
    from ember_core import hotpath

    FakeGpu._launch_kernel = lambda self, *launch: 0  # the launch queues nothing: the op path alone
    small = np.random.default_rng(0).standard_normal(16).astype(np.float32)
    theirs = cases(torch, "cpu", small)
    print(f"compiled hot path (ember_core.hotpath): {'on' if hotpath._configured else 'off'}")
    print("| case | device | ember µs | PyTorch CPU µs |\n|---|---|---|---|")
    for device, label in (("cpu", "cpu"), ("cuda", "cuda (fake driver, no-op launch)")):
        for name, ours in cases(em, device, small).items():
            print(f"| {name} | {label} | {timeit(ours) * 1e6:.2f} | {timeit(theirs[name]) * 1e6:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

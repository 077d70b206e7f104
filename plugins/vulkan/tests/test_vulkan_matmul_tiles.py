"""The shared-memory GEMM (matmul.comp, what GPUs run) at several tile sizes: the sizes are
specialization constants, so each choice is a separately specialized pipeline that must be exact
at ragged edges, batched and transposed."""

from __future__ import annotations

import numpy as np
import pytest
from ember_vulkan import kernels, runtime
from tolerances import assert_close, eps

import ember_core as em

TILES = [(1, 1, 1), (2, 4, 8), (4, 4, 16), (8, 2, 4), (3, 5, 7), (8, 8, 16)]


@pytest.fixture
def gpu_shaders(vk):
    """vulkan:0 running the GPU GEMM whatever the device type; restores its tiles afterwards."""
    dev = runtime.device(0)
    saved = dev.is_cpu, dev.matmul_tiles
    dev.is_cpu = False
    yield dev
    dev.is_cpu, dev.matmul_tiles = saved


@pytest.mark.parametrize("tiles", TILES, ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_tiled_gemm_matches_numpy_at_every_tile_size(gpu_shaders, tiles, dtype) -> None:
    kernels.set_matmul_tiles(0, *tiles)
    rng = np.random.default_rng(sum(tiles))
    if dtype == "int32":
        x, y = rng.integers(-50, 50, (2, 37, 29)), rng.integers(-50, 50, (2, 53, 29))
    else:
        x, y = rng.standard_normal((2, 37, 29)), rng.standard_normal((2, 53, 29))
    a = em.asarray(x.astype(dtype), device="vulkan")
    b = em.asarray(y.astype(dtype), device="vulkan").mT  # transposed operand: unit stride along K
    expected = np.matmul(x.astype(dtype).astype(np.float64), np.swapaxes(y.astype(dtype), -1, -2).astype(np.float64))
    atol = 2 * 29 * eps(dtype) * 4 if dtype == "float32" else None  # 29 float32 products of |values| <~ 2 summed
    assert_close(a @ b, expected, dtype, atol=atol)


@pytest.mark.parametrize("tiles", [(0, 4, 16), (4, 9, 16), (4, 4, 0), (4.0, 4, 16), (8, 8, 64)])
def test_bad_tiles_are_refused(vk, tiles) -> None:
    with pytest.raises(ValueError, match="matmul tile"):
        kernels.set_matmul_tiles(0, *tiles)

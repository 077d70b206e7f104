"""sum through subgroup operations (reduce.comp's reduce_subgroup variants) where the device has
them: the same answers as the shared-memory tree, for one-pass and two-pass rows."""

from __future__ import annotations

import numpy as np
import pytest
from ember_vulkan import kernels, runtime
from tolerances import assert_close, eps

import ember_core as em


@pytest.fixture
def gpu_reduce(vk):
    """vulkan:0 running reduce.comp (what GPUs run) with subgroup sums on or off; restores it."""
    dev = runtime.device(0)
    if not dev.info.subgroup_arithmetic:
        pytest.skip(f"{dev.name} has no subgroup arithmetic in compute shaders")
    saved = dev.is_cpu, dev.subgroup_sum
    dev.is_cpu = False

    def choose(subgroups: bool):
        dev.subgroup_sum = subgroups
        return dev

    yield choose
    dev.is_cpu, dev.subgroup_sum = saved


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape", [(3, kernels.SERIAL_CHUNK * 3 + 7), (2, kernels.REDUCE_CHUNK * 2 + 5)],
                         ids=["one-pass", "two-pass"])
def test_subgroup_sum_matches_the_tree_and_numpy(gpu_reduce, dtype, shape) -> None:
    rng = np.random.default_rng(7)
    data = rng.uniform(-1, 1, shape)
    x = em.asarray(data.astype(dtype), device="vulkan")
    expected = data.astype(dtype).astype(np.float64).sum(axis=1)
    results = {}
    for subgroups in (True, False):
        dev = gpu_reduce(subgroups)
        results[subgroups] = em.sum(x, axis=1)
        template = "reduce_subgroup" if subgroups else "reduce"
        assert any(key[0].startswith(f"{template}.A{dtype}.") for key in dev._pipelines), f"{template} unused"
    atol = 4 * eps("float32") * np.sqrt(shape[1]) + (4 * eps(dtype) if dtype == "float16" else 0)
    for result in results.values():
        assert_close(result, expected, dtype, atol=atol)

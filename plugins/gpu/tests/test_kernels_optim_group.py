"""ember-gpu's group optimizer kernels (csrc/eg_optim.h, eg_updates_<sgd|adam>_<dtype>) on the host:
one launch over a parameter group of several sizes (one element, a vector's tail, several times the
grid) gives, for every parameter, the bits of the composites on ember-cpu, as the per-parameter
kernel does (test_kernels_nn)."""

from __future__ import annotations

import numpy as np
import pytest
from test_kernels_host import HOST_DIR, HostKernels, from_ember, to_ember
from test_kernels_nn import ADAM_CASES, DTYPES, SGD_CASES, stored

import ember_core as em
from ember_core.ops.optim_composites import adam_coefficients

SIZES = (1, 7, 1001, 64)


@pytest.fixture(scope="module")
def host() -> HostKernels:
    return HostKernels(HOST_DIR)


def group_update(host: HostKernels, kernel: str, groups: list[list[np.ndarray]], coefficients: list[float],
                 flags: int) -> None:
    items = host.ffi.new("eg_update_item[]", len(groups))
    for item, tensors in zip(items, groups):
        item.param, item.grad, item.buf0 = (host.pointer(t) for t in tensors[:3])
        item.buf1 = host.pointer(tensors[3]) if len(tensors) > 3 else host.ffi.NULL
        item.n = tensors[0].size
    args = host.ffi.new("eg_updates_args *")
    args.items, args.count, args.flags = items, len(groups), flags
    for j, c in enumerate(coefficients):
        args.c[j] = c
    host.launch(kernel, args, 3, 64)


@pytest.mark.parametrize("dtype", DTYPES)
def test_group_steps_give_the_composites_bits(host: HostKernels, dtype: str) -> None:
    rng = np.random.default_rng(71)
    for kw in SGD_CASES:
        groups = [[stored(rng.normal(0, 1, n), dtype) for _ in range(3)] for n in SIZES]
        refs = [[to_ember(a, dtype) for a in tensors] for tensors in groups]
        em.sgd_step(*[list(column) for column in zip(*refs)], **kw)
        flags = 1 * kw["maximize"] | 2 * kw["nesterov"] | 4 * kw["first_step"] | 8 * bool(kw["weight_decay"])
        group_update(host, f"eg_updates_sgd_{dtype}", groups,
                     [kw["lr"], kw["momentum"], 1.0 - kw["dampening"], kw["weight_decay"]], flags)
        for k, (tensors, want) in enumerate(zip(groups, refs)):
            for name, j in (("param", 0), ("momentum_buffer", 2)):
                assert tensors[j].tobytes() == from_ember(want[j]).tobytes(), f"sgd {dtype} {kw} item {k} {name}"
    for kw in ADAM_CASES:
        groups = [[stored(rng.normal(0, 1, n), dtype), stored(rng.normal(0, 1, n), dtype),
                   stored(rng.normal(0, 0.1, n), dtype), stored(rng.uniform(0, 0.1, n), dtype)] for n in SIZES]
        refs = [[to_ember(a, dtype) for a in tensors] for tensors in groups]
        em.adam_step(*[list(column) for column in zip(*refs)], **kw)
        coefficients = adam_coefficients(**{k: kw[k] for k in kw if k != "maximize"})
        flags = 1 * kw["maximize"] | 8 * bool(kw["weight_decay"]) | 16 * kw["decoupled"]
        group_update(host, f"eg_updates_adam_{dtype}", groups, list(coefficients), flags)
        for k, (tensors, want) in enumerate(zip(groups, refs)):
            for name, j in (("param", 0), ("exp_avg", 2), ("exp_avg_sq", 3)):
                assert tensors[j].tobytes() == from_ember(want[j]).tobytes(), f"adam {dtype} {kw} item {k} {name}"

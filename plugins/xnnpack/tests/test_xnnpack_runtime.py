"""Threads, provider choice by the user, `ember backends`, and the build's missing-package message."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ember_xnnpack import runtime
from xnnpack_helpers import served_by, traced

import ember_core as em

PLUGIN_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture
def restore_threads():
    n = runtime.num_threads()
    yield
    em.set_num_threads(n)


def test_thread_count_follows_set_num_threads(rng, restore_threads):
    x = em.asarray(rng.standard_normal((4, 16, 20, 20)).astype(np.float32))
    w = em.asarray(rng.standard_normal((24, 16, 3, 3)).astype(np.float32))
    results = []
    for n in (1, 3, 2):
        em.set_num_threads(n)
        assert runtime.num_threads() == n
        results.append(em.conv2d(x, w, padding=1).numpy().copy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(results[0], results[2], rtol=1e-5, atol=1e-5)


def test_providers_context_excludes_it(rng):
    x = em.asarray(rng.standard_normal((1, 2, 6, 6)).astype(np.float32))
    with em.providers(exclude=["xnnpack"]):
        excluded, providers = traced(em.max_pool2d, x, 3)
    assert providers.get("max_pool2d") and "xnnpack" not in served_by(providers, "max_pool2d")
    served, providers = traced(em.max_pool2d, x, 3)
    assert served_by(providers, "max_pool2d") == {"xnnpack"}
    np.testing.assert_array_equal(served.numpy(), excluded.numpy())


@pytest.mark.parametrize(("setting", "uses_xnnpack"), [("-xnnpack", False), ("xnnpack,cpu", True), ("", True)])
def test_ember_providers_environment(setting, uses_xnnpack):
    code = ("import ember_core as em\n"
            "with em.trace_dispatch() as log: em.max_pool2d(em.ones((1, 1, 6, 6)), 3)\n"
            "print(','.join(log.providers()['max_pool2d']))")
    env = {**os.environ, "EMBER_PROVIDERS": setting}
    served = subprocess.check_output([sys.executable, "-c", code], env=env, text=True).strip().split(",")
    assert ("xnnpack" in served) == uses_xnnpack and len(served) == 1


def test_ember_backends_lists_xnnpack_for_cpu():
    listing = subprocess.check_output([sys.executable, "-m", "ember_core.cli", "backends"], text=True)
    line = next(line for line in listing.splitlines() if "xnnpack" in line)
    assert "ember-xnnpack" in line and "BROKEN" not in line


def test_build_without_the_debian_packages_names_them(tmp_path):
    """CC=false stands in for a machine whose compiler finds neither header nor libraries."""
    env = {**os.environ, "CC": "false"}
    result = subprocess.run([sys.executable, str(PLUGIN_DIR / "build_ffi.py")], env=env, capture_output=True,
                            text=True, cwd=tmp_path)
    assert result.returncode != 0
    assert "apt-get install -y libxnnpack-dev libpthreadpool-dev" in result.stderr


def test_concurrent_calls_from_python_threads_are_serialised_correctly(rng):
    """Operators and the layout workspace are shared: every native call runs under one lock."""
    from concurrent.futures import ThreadPoolExecutor

    inputs = [rng.standard_normal((2, 8, 12, 12)).astype(np.float32) for _ in range(4)]
    w = em.asarray(rng.standard_normal((16, 8, 3, 3)).astype(np.float32))
    expected = [em.conv2d(em.asarray(x), w, padding=1).numpy().copy() for x in inputs]

    def work(i):
        return all(np.array_equal(em.conv2d(em.asarray(inputs[i]), w, padding=1).numpy(), expected[i])
                   for _ in range(20))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, range(4)))

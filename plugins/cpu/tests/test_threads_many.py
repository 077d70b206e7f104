"""Results independent of the thread count, up to the 16 threads of a workstation, and of the
parallel knobs (EMBER_CPU_THREAD_WORK, EMBER_CPU_GEMM_*): bit for bit, not only within a
tolerance.  16 threads run oversubscribed on a 2-core machine, slowly but correctly."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from native_util import lib

import ember_core as em
from ember_core import dispatch

THREAD_COUNTS = (1, 2, 3, 16)
rng = np.random.default_rng(32)


def floats(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


# Sizes from just above the parallel grain (where the minimum work per thread caps the team) to
# products large enough for a 2-D grid of GEMM slices at 16 threads (4 x 4 for square c).
X_FLAT = floats(1_000_003)
X_ROWS = floats(4096, 70)
SQUARE_A, SQUARE_B = floats(700, 600), floats(600, 650)
WIDE_A, WIDE_B = floats(90, 500), floats(500, 1900)
THIN_W = floats(10, 256)
IMAGES = floats(4, 16, 24, 24)
FILTERS = floats(16, 16, 3, 3)
BIG_IMAGES, BIG_GRADS = floats(16, 32, 16, 16), floats(16, 64, 8, 8)   # 3x3 stride 2: im2col chunks

CASES: dict[str, Callable[[], object]] = {
    "add, just above the grain": lambda: em.asarray(X_FLAT[:40_000]) + em.asarray(X_FLAT[1:40_001]),
    "exp, 1M": lambda: em.exp(em.asarray(X_FLAT)),
    "sum of everything": lambda: em.sum(em.asarray(X_FLAT)),
    "sum of columns": lambda: em.sum(em.asarray(X_ROWS), axis=0),
    "sum of rows": lambda: em.sum(em.asarray(X_ROWS), axis=1),
    "argmax": lambda: em.argmax(em.asarray(X_FLAT)),
    "cumulative sum": lambda: em.cumulative_sum(em.asarray(X_ROWS), axis=1),
    "softmax": lambda: em.softmax(em.asarray(X_ROWS)),
    "layer norm": lambda: em.layer_norm(em.asarray(X_ROWS), (70,)),
    "group norm": lambda: em.group_norm(em.asarray(IMAGES), 4),
    "matmul square": lambda: em.asarray(SQUARE_A) @ em.asarray(SQUARE_B),
    "matmul wide": lambda: em.asarray(WIDE_A) @ em.asarray(WIDE_B),
    "matmul transposed": lambda: em.asarray(SQUARE_B.T) @ em.asarray(SQUARE_A.T),
    "linear, thin": lambda: em.linear(em.asarray(X_ROWS[:, :64].copy()), em.asarray(THIN_W[:, :64].copy())),
    "conv2d": lambda: em.conv2d(em.asarray(IMAGES), em.asarray(FILTERS), padding=1),
    "conv2d weight gradient": lambda: em.conv2d_weight_grad(
        em.asarray(BIG_IMAGES), em.asarray(BIG_GRADS), weight_shape=(64, 32, 3, 3), stride=2, padding=1),
    "max pool": lambda: em.max_pool2d(em.asarray(IMAGES), 2),
    "sort": lambda: em.sort(em.asarray(X_ROWS), axis=0),
}


def run_all(threads: int) -> dict[str, np.ndarray]:
    """Every case on `threads` threads, each run by ember-cpu (asserted: no other plugin took one)."""
    em.set_num_threads(threads)
    with dispatch.providers(prefer="cpu", exclude="xnnpack"), dispatch.trace() as log:
        results = {name: np.asarray(case()) for name, case in CASES.items()}
    assert {provider for (_op, _, _, provider, _), _n in log.counts.items()} == {"cpu"}, log.counts
    return results


@pytest.fixture(scope="module")
def by_threads() -> dict[int, dict[str, np.ndarray]]:
    previous = lib.ember_cpu_get_num_threads()
    try:
        return {n: run_all(n) for n in THREAD_COUNTS}
    finally:
        em.set_num_threads(previous)


@pytest.mark.parametrize("threads", THREAD_COUNTS[1:])
@pytest.mark.parametrize("case", list(CASES))
def test_same_bits_on_any_thread_count(by_threads, case, threads):
    np.testing.assert_array_equal(by_threads[threads][case], by_threads[1][case])


def test_cases_are_correct(by_threads):
    """The bits every thread count shares are right (so the comparison above is not of garbage)."""
    got = by_threads[16]
    np.testing.assert_allclose(got["sum of columns"], X_ROWS.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)
    reference = SQUARE_A.astype(np.float64) @ SQUARE_B
    np.testing.assert_allclose(got["matmul square"], reference, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(got["matmul wide"], WIDE_A.astype(np.float64) @ WIDE_B, rtol=1e-4, atol=1e-3)
    assert got["argmax"] == np.argmax(X_FLAT)


KNOB_SCRIPT = """
import sys, numpy as np
sys.path.insert(0, {tests!r})
import test_threads_many as t
np.savez(sys.argv[1], **{{name.replace(' ', '_').replace(',', ''): value
                          for name, value in t.run_all(16).items()}})
"""


def results_with(env: dict[str, str], path: Path) -> dict[str, np.ndarray]:
    script = KNOB_SCRIPT.format(tests=str(Path(__file__).parent))
    full_env = {**os.environ, **env}
    subprocess.run([sys.executable, "-c", script, str(path)], env=full_env, check=True, timeout=600)
    with np.load(path) as data:
        return dict(data)


@pytest.fixture(scope="module")
def knob_default(tmp_path_factory) -> dict[str, np.ndarray]:
    return results_with({}, tmp_path_factory.mktemp("knobs") / "default.npz")


@pytest.mark.parametrize("env", [
    {"EMBER_CPU_THREAD_WORK": "1"},             # every region as wide as its tasks allow
    {"EMBER_CPU_THREAD_WORK": "1000000000"},    # everything on one thread
    {"EMBER_CPU_GEMM_ROW_SLICES": "16"},        # GEMM: one slice of rows per thread
    {"EMBER_CPU_GEMM_ROW_SLICES": "1"},         # ... of columns
    {"EMBER_CPU_GEMM_ROW_SLICES": "2"},         # a 2 x 8 grid
    {"EMBER_CPU_GEMM_NC": "64", "EMBER_CPU_GEMM_MC": "100"},   # MC rounded up to 14 x 8 rows
    {"EMBER_CPU_THREAD_WORK": "garbage", "EMBER_CPU_GEMM_MC": "-3"},   # unparsable: the defaults
], ids=lambda env: " ".join(f"{k}={v}" for k, v in env.items()))
def test_knobs_do_not_change_results(knob_default, env, tmp_path):
    changed = results_with(env, tmp_path / "changed.npz")
    assert changed.keys() == knob_default.keys()
    for name, value in knob_default.items():
        np.testing.assert_array_equal(changed[name], value, err_msg=name)


def test_gemm_kc_changes_only_rounding(knob_default, tmp_path):
    """KC splits each element's sum over K (the first slice stored, the next ones added): another
    KC may round products differently, within float32's bound; nothing else changes."""
    changed = results_with({"EMBER_CPU_GEMM_KC": "128"}, tmp_path / "kc.npz")
    reference = SQUARE_A.astype(np.float64) @ SQUARE_B
    np.testing.assert_allclose(changed["matmul_square"], reference, rtol=1e-4, atol=1e-3)
    for name, value in knob_default.items():
        if not name.startswith(("matmul", "linear", "conv2d")):   # products
            np.testing.assert_array_equal(changed[name], value, err_msg=name)

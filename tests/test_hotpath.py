"""The compiled per-op hot path (ember_core.hotpath): it gives exactly the Python path's results,
runs no Python code when it applies, and hands every other call to the Python path."""

from __future__ import annotations

import gc
import operator
import os
import subprocess
import sys
import threading
import weakref

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember_core as em
from ember_core import hotpath

compiled = pytest.mark.skipif(not hotpath._configured, reason="the compiled hot path is not built here")

BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
          "maximum": em.maximum, "less": em.less}
UNARY = {"neg": operator.neg, "sin": em.sin, "exp": em.exp, "abs": em.abs}


def python_path(fn, *args):
    """The same call on the pure-Python path: a preference block pauses the compiled one."""
    with em.providers():
        return fn(*args)


def same(fast, slow) -> None:
    assert (fast.dtype, fast.shape, fast.strides, fast.device) == (slow.dtype, slow.shape, slow.strides, slow.device)
    assert fast.grad_fn is None and not fast.requires_grad and fast.is_contiguous
    np.testing.assert_array_equal(fast.numpy(), slow.numpy())


def python_calls(fn) -> list[str]:
    """The Python functions a call runs (the compiled path runs none)."""
    seen: list[str] = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is not fn.__code__:
            seen.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


@compiled
def test_a_plus_b_runs_no_python_code_and_returns_its_block_to_the_pool():
    a, b = em.asarray(np.arange(16, dtype=np.float32)), em.ones(16)
    a + b, em.sin(a)
    blocks = a._device._pool[64]
    before = len(blocks)
    assert python_calls(lambda: a + b) == []
    assert python_calls(lambda: em.sin(a)) == []
    c = a * b
    assert len(blocks) == before - 1
    del c
    assert len(blocks) == before


@compiled
@settings(max_examples=60, deadline=None)
@given(op=st.sampled_from(sorted(BINARY)), dtype=st.sampled_from(["float32", "float64", "int32", "int64"]),
       n=st.integers(0, 40), layout=st.sampled_from(["contiguous", "offset", "scalar-left", "scalar-right",
                                                     "broadcast-element", "zero-d-left", "zero-d-right",
                                                     "strided"]))
def test_binary_results_equal_the_python_paths(op, dtype, n, layout):
    rng = np.random.default_rng(n)
    data = rng.integers(1, 9, size=2 * n + 2).astype(dtype)
    x = em.asarray(data[:n])
    y = em.asarray(data[n:2 * n])
    if layout == "offset":
        x = em.asarray(data)[1:n + 1]  # contiguous, storage offset 1
    elif layout == "broadcast-element":
        y = em.asarray(data[:1]).reshape(()).expand(n)  # one element repeated (stride 0)
    elif layout == "zero-d-left":
        x = em.asarray(data[n])
    elif layout == "zero-d-right":
        y = em.asarray(data[n])
    elif layout == "strided":
        x = em.asarray(data)[: 2 * n : 2]
    args = {"scalar-left": (2.5 if dtype.startswith("float") else 3, y),
            "scalar-right": (x, 2.5 if dtype.startswith("float") else 3)}.get(layout, (x, y))
    fn = BINARY[op]
    same(fn(*args), python_path(fn, *args))


@compiled
@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_unary_results_equal_the_python_paths(name, dtype):
    x = em.asarray(np.linspace(-3, 3, 37).astype(dtype))
    same(UNARY[name](x), python_path(UNARY[name], x))


@compiled
def test_calls_outside_the_fast_case_take_the_python_path_with_its_results_and_errors():
    x = em.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    row = em.asarray(np.arange(3, dtype=np.float64))
    same(x + row, python_path(operator.add, x, row))  # broadcast and promotion
    assert "op" in python_calls(lambda: x + row)
    same(x.T * x.T, python_path(operator.mul, x.T, x.T))  # a transposed view
    assert (x + True).dtype == em.float32
    with pytest.raises(TypeError, match="Python scalar"):
        x + "2"
    with pytest.raises(TypeError):
        [1, 2] * em.ones(2)
    with em.providers():
        assert "op" in python_calls(lambda: x + x)


@compiled
def test_an_operand_that_requires_grad_is_recorded_and_its_gradient_is_right():
    x = em.asarray(np.array([1.0, 2.0, 3.0], dtype=np.float32)).requires_grad_()
    y = (x * x + 1.0) / x - x
    assert y.grad_fn is not None and y.requires_grad
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), -1 / np.array([1.0, 4.0, 9.0]), rtol=1e-6)  # y = 1/x
    with em.no_grad():
        assert (x * x).grad_fn is None
    calls = python_calls(lambda: x * x)  # the result computed in C, only the node made in Python
    assert calls[0] == "attach" and "recorded" not in calls and "op" not in calls


@compiled
def test_threads_share_plans_and_pool_while_another_opens_preference_blocks():
    """Two threads run fast calls while a third keeps pausing the compiled path: every result is right."""
    x = em.asarray(np.arange(64, dtype=np.float32))
    expected = (x.numpy() * 2 + 1).tolist()
    failures: list[object] = []

    def work() -> None:
        for _ in range(2000):
            got = (x + x + 1.0).tolist()
            if got != expected:
                failures.append(got)

    def toggle() -> None:
        for _ in range(300):
            with em.providers():
                (x - x).tolist()

    threads = [threading.Thread(target=f) for f in (work, work, toggle)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert python_calls(lambda: x + x) == []  # every block closed: the compiled path is back


@compiled
def test_compiled_ops_say_what_they_are():
    assert repr(em.less) == "<ember op less (compiled hot path)>"
    assert repr(em.add) == "<ember op add (compiled hot path)>"


@compiled
def test_tensors_in_a_reference_cycle_are_collected():
    t = em.ones(4) + em.ones(4)
    t.grad = t  # a cycle through TensorBase's own fields
    alive = weakref.ref(t)
    storage = weakref.ref(t._storage)
    del t
    gc.collect()
    assert alive() is None and storage() is None


def test_tensors_keep_the_constructors_the_core_uses():
    assert type(object.__new__(em.Tensor)) is em.Tensor
    with pytest.raises(TypeError, match="asarray"):
        em.Tensor()


def test_ember_hotpath_0_gives_the_pure_python_path():
    code = ("import ember_core as em; from ember_core import hotpath; a = em.ones(3); "
            "assert hotpath.native is None and em.Tensor.__bases__ == (object,); print((a + a * 2.0).tolist())")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "EMBER_HOTPATH": "0"}, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "[3.0, 3.0, 3.0]"

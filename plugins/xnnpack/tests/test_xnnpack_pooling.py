"""max_pool2d and avg_pool2d against float64 references with PyTorch's rules; the parameters
XNNPACK cannot express are declined and answered by the next provider, identically."""

from __future__ import annotations

import numpy as np
import pytest
import references as ref
from xnnpack_helpers import served_by, traced

import ember_core as em

MAX_CASES = [  # shape, kernel, stride, padding, dilation, ceil_mode
    ((2, 3, 9, 8), (2, 2), (2, 2), (0, 0), (1, 1), False),  # the last row dropped: not tiling
    ((1, 4, 9, 7), (3, 3), (2, 2), (1, 1), (1, 1), False),
    ((2, 5, 9, 7), (3, 3), (2, 2), (1, 1), (1, 1), True),  # ceil mode: extra bottom/right padding
    ((1, 2, 10, 11), (3, 2), (1, 3), (1, 0), (1, 1), True),
    ((3, 6, 11, 12), (3, 3), (1, 1), (0, 0), (2, 2), False),  # dilation
    ((2, 3, 10, 10), (3, 3), (2, 2), (1, 1), (2, 2), False),  # dilated windows reaching into top/left padding
    ((1, 1, 13, 13), (2, 4), (3, 1), (1, 2), (1, 1), False),
    ((2, 64, 28, 28), (3, 3), (2, 2), (1, 1), (1, 1), False),
]
AVG_CASES = [  # shape, kernel, stride, padding, count_include_pad
    ((2, 3, 9, 8), (2, 2), (2, 2), (0, 0), True),  # the last row dropped: not tiling
    ((1, 4, 9, 7), (3, 3), (2, 2), (0, 0), False),
    ((2, 5, 9, 7), (3, 3), (2, 2), (1, 1), False),  # padding, divisor counts only the input
    ((1, 2, 10, 11), (3, 2), (1, 3), (1, 0), False),
    ((2, 64, 28, 28), (3, 3), (1, 1), (1, 1), False),
]


def _check(out, expected):
    ref.assert_close(out.numpy(), expected.astype(np.float32), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", MAX_CASES)
def test_max_pool2d_matches_reference(rng, case):
    shape, kernel, stride, padding, dilation, ceil_mode = case
    x = rng.standard_normal(shape).astype(np.float32)
    out, providers = traced(em.max_pool2d, em.asarray(x), kernel, stride, padding, dilation, ceil_mode)
    _check(out, ref.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode))
    assert served_by(providers, "max_pool2d") == {"xnnpack"}


@pytest.mark.parametrize("case", AVG_CASES)
def test_avg_pool2d_matches_reference(rng, case):
    shape, kernel, stride, padding, count_include_pad = case
    x = rng.standard_normal(shape).astype(np.float32)
    out, providers = traced(em.avg_pool2d, em.asarray(x), kernel, stride, padding, False, count_include_pad)
    _check(out, ref.avg_pool2d(x, kernel, stride, padding, False, count_include_pad))
    assert served_by(providers, "avg_pool2d") == {"xnnpack"}


@pytest.mark.parametrize(("op", "args"), [
    ("avg_pool2d", ((3, 3), (2, 2), (1, 1), True, False)),  # ceil mode
    ("avg_pool2d", ((3, 3), (2, 2), (1, 1), False, True)),  # count_include_pad with padding
    ("max_pool2d", ((1, 1), (1, 1), (0, 0), (1, 1), False)),  # a 1x1 window (XNNPACK refuses it)
])
def test_declined_parameters_are_answered_by_the_next_provider(rng, op, args):
    x = rng.standard_normal((2, 3, 9, 10)).astype(np.float32)
    out, providers = traced(getattr(em, op), em.asarray(x), *args)
    assert providers.get(op) and "xnnpack" not in served_by(providers, op)
    if op == "max_pool2d":
        expected = ref.max_pool2d(x, *args)
    else:
        kernel, stride, padding, ceil_mode, count_include_pad = args
        expected = ref.avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad)
    _check(out, expected)
    with em.providers(exclude=["xnnpack"]):
        np.testing.assert_array_equal(getattr(em, op)(em.asarray(x), *args).numpy(), out.numpy())


DILATED_PAST_THE_EDGE = [  # shape, kernel, stride, padding, dilation, ceil_mode (issue 24)
    ((1, 1, 3, 4), (1, 2), (1, 1), (0, 1), (2, 1), False),  # XNNPACK read the next row's first pixel
    ((1, 2, 3, 6), (3, 3), (3, 3), (1, 1), (1, 2), True),  # and past the input: heap garbage
    # XNNPACK's substitute taps landed inside these windows, but the rule declines every dilated
    # window past the edge rather than model XNNPACK's indexing
    ((2, 3, 9, 10), (2, 2), (2, 2), (1, 1), (2, 2), True),
    ((2, 3, 9, 10), (3, 3), (2, 2), (1, 1), (2, 2), False),
]


@pytest.mark.parametrize("case", DILATED_PAST_THE_EDGE)
def test_dilated_max_pools_past_the_edge_are_ember_cpus_bits(case):
    """With dilation XNNPACK replaces a tap outside the input by one it assumes is inside, which is
    wrong past the bottom/right edge: those pools are declined.  Values 1, 2, ... so that a pixel
    read from the wrong row shows."""
    shape, *args = case
    x = em.asarray(np.arange(1, np.prod(shape) + 1, dtype=np.float32).reshape(shape))
    out, providers = traced(em.max_pool2d, x, *args)
    with em.providers(exclude=["xnnpack"]):
        np.testing.assert_array_equal(out.numpy(), em.max_pool2d(x, *args).numpy())
    np.testing.assert_array_equal(out.numpy(), ref.max_pool2d(x.numpy(), *args).astype(np.float32))
    assert "xnnpack" not in served_by(providers, "max_pool2d")


def test_issue_24_example_gives_pytorchs_values():
    x = em.asarray(np.arange(1, 13, dtype=np.float32).reshape(1, 1, 3, 4))
    out = em.max_pool2d(x, (1, 2), (1, 1), (0, 1), (2, 1))
    np.testing.assert_array_equal(out.numpy()[0, 0], [[1, 2, 3, 4, 4], [5, 6, 7, 8, 8], [9, 10, 11, 12, 12]])


@pytest.mark.parametrize("op", ["max_pool2d", "avg_pool2d"])
@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf, -1e-42])
def test_special_inputs_are_declined_and_kept(op, special):
    """XNNPACK's output clamps turn NaN into +-inf and it flushes subnormals: such inputs go to the
    next provider."""
    x = np.arange(40, dtype=np.float32).reshape(1, 2, 5, 4)   # 5 rows: max_pool2d's 2x2 windows do not tile it
    _, providers = traced(getattr(em, op), em.asarray(x), 2, 2)
    assert served_by(providers, op) == {"xnnpack"}
    x[0, 1, 2, 3] = special
    out, providers = traced(getattr(em, op), em.asarray(x), 2, 2)
    assert "xnnpack" not in served_by(providers, op)
    expected = getattr(ref, op)(x, (2, 2), (2, 2))
    np.testing.assert_array_equal(out.numpy(), expected.astype(np.float32))


@pytest.mark.parametrize("op", ["max_pool2d", "avg_pool2d"])
def test_tiling_2x2_pools_go_to_ember_cpu(rng, op):
    """ember-cpu runs 2x2 windows that tile the input faster than XNNPACK; 3x3 windows stay."""
    x = em.asarray(rng.standard_normal((2, 3, 8, 10)).astype(np.float32))
    _, providers = traced(getattr(em, op), x, 2)
    assert served_by(providers, op) == {"cpu"}
    _, providers = traced(getattr(em, op), x, 3, 2, 0)
    assert served_by(providers, op) == {"xnnpack"}

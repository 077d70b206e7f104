"""conv2d against a float64 numpy reference (and PyTorch when installed), every parameter kind."""

from __future__ import annotations

import numpy as np
import pytest
import references as ref
from conftest import served_by, traced

import ember_core as em

CASES = [  # n, c, h, w, o, (kh, kw), stride, padding, dilation, groups
    (1, 3, 8, 8, 4, (3, 3), (1, 1), (0, 0), (1, 1), 1),
    (2, 6, 9, 11, 4, (3, 3), (2, 1), (1, 2), (1, 2), 2),
    (3, 5, 7, 6, 7, (1, 1), (1, 1), (0, 0), (1, 1), 1),  # 1x1
    (2, 8, 10, 9, 8, (3, 3), (1, 1), (1, 1), (1, 1), 8),  # depthwise
    (2, 4, 12, 13, 8, (5, 3), (2, 3), (2, 1), (1, 1), 4),  # depthwise, channel multiplier 2
    (1, 16, 5, 5, 32, (3, 3), (1, 1), (1, 1), (2, 2), 1),
    (2, 1, 9, 9, 3, (4, 2), (3, 2), (0, 1), (1, 1), 1),  # one input channel (no input transpose)
    (2, 3, 7, 7, 1, (3, 3), (1, 1), (1, 1), (1, 1), 1),  # one output channel (no output transpose)
    (2, 12, 6, 6, 6, (6, 6), (1, 1), (0, 0), (1, 1), 3),  # one output pixel
    (4, 64, 14, 14, 32, (3, 3), (1, 1), (1, 1), (1, 1), 1),
]


def _run(rng, case, bias, activation):
    n, c, h, w, o, (kh, kw), stride, padding, dilation, groups = case
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c // groups, kh, kw)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32) if bias else None
    params = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    out, providers = traced(em.conv2d, em.asarray(x), em.asarray(wt), None if b is None else em.asarray(b),
                            activation=activation, **params)
    expected = ref.conv2d(x, wt, b, activation=activation, **params)
    ref.assert_close_dot(out.numpy(), expected, ref.magnitude_conv2d(x, wt, b, **params))
    return out, providers, (x, wt, b, params)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:5])) + f"-g{c[-1]}")
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("activation", [None, "relu"])
def test_conv2d_matches_reference(rng, case, bias, activation):
    out, providers, _ = _run(rng, case, bias, activation)
    assert served_by(providers, "conv2d") == {"xnnpack"}
    if activation == "relu":
        assert out.numpy().min() >= 0


def test_conv2d_matches_pytorch(rng):
    torch = pytest.importorskip("torch")
    out, _, (x, wt, b, params) = _run(rng, CASES[1], True, None)
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(wt), torch.from_numpy(b), **params)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)


def test_non_contiguous_input_is_made_contiguous_by_the_core(rng):
    x = rng.standard_normal((2, 9, 3, 8)).astype(np.float32)
    wt = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    view = em.permute_dims(em.asarray(x), (0, 2, 1, 3))  # (2, 3, 9, 8), strided
    out, providers = traced(em.conv2d, view, em.asarray(wt), padding=1)
    xt = x.transpose(0, 2, 1, 3)
    expected = ref.conv2d(xt, wt, None, padding=(1, 1))
    ref.assert_close_dot(out.numpy(), expected, ref.magnitude_conv2d(xt, wt, None, padding=(1, 1)))
    assert served_by(providers, "conv2d") == {"xnnpack"}


def test_float64_goes_to_the_next_provider(rng):
    x = rng.standard_normal((1, 2, 5, 5))
    wt = rng.standard_normal((3, 2, 3, 3))
    out, providers = traced(em.conv2d, em.asarray(x), em.asarray(wt))
    assert "xnnpack" not in served_by(providers, "conv2d") and providers.get("conv2d")
    np.testing.assert_allclose(out.numpy(), ref.conv2d(x, wt, None), rtol=1e-12, atol=1e-12)


def test_empty_batch_gives_an_empty_result(rng):
    wt = em.asarray(rng.standard_normal((3, 2, 3, 3)).astype(np.float32))
    assert em.conv2d(em.zeros((0, 2, 5, 5)), wt).shape == (0, 3, 3, 3)


def test_no_input_channels_is_declined_and_answered_with_the_bias(rng):
    b = rng.standard_normal(3).astype(np.float32)
    out, providers = traced(em.conv2d, em.zeros((2, 0, 5, 5)), em.zeros((3, 0, 3, 3)), em.asarray(b))
    assert "xnnpack" not in served_by(providers, "conv2d")
    np.testing.assert_array_equal(out.numpy(), np.broadcast_to(b.reshape(1, 3, 1, 1), (2, 3, 3, 3)))


def test_non_finite_input_is_declined_and_keeps_nan(rng):
    """XNNPACK's output clamps turn NaN into -inf: such calls go to the next provider."""
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    x[0, 1, 2, 2] = np.nan
    wt = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    out, providers = traced(em.conv2d, em.asarray(x), em.asarray(wt), padding=1)
    assert "xnnpack" not in served_by(providers, "conv2d")
    np.testing.assert_array_equal(np.isnan(out.numpy()), np.isnan(ref.conv2d(x, wt, None, padding=(1, 1))))
    wt[0, 0, 0, 0] = np.inf
    x[0, 1, 2, 2] = 0
    out, providers = traced(em.conv2d, em.asarray(x), em.asarray(wt))
    assert "xnnpack" not in served_by(providers, "conv2d") and np.isinf(out.numpy()[0, 0]).any()

"""linear (fully connected) against a float64 numpy reference, with and without bias and relu."""

from __future__ import annotations

import numpy as np
import pytest
import references as ref
from ember_xnnpack.kernels import _LINEAR_MAX_ROWS
from xnnpack_helpers import served_by, traced

import ember_core as em


@pytest.mark.parametrize(("batch", "features", "out_features"), [((1,), 7, 5), ((33,), 64, 48), ((2, 3, 5), 17, 9),
                                                                  ((256,), 300, 129)])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("activation", [None, "relu"])
def test_linear_matches_reference(rng, batch, features, out_features, bias, activation):
    x = rng.standard_normal((*batch, features)).astype(np.float32)
    w = rng.standard_normal((out_features, features)).astype(np.float32)
    b = rng.standard_normal(out_features).astype(np.float32) if bias else None
    out, providers = traced(em.linear, em.asarray(x), em.asarray(w), None if b is None else em.asarray(b),
                            activation=activation)
    magnitude = ref.linear(np.abs(x), np.abs(w), None if b is None else np.abs(b))
    ref.assert_close_dot(out.numpy(), ref.linear(x, w, b, activation), magnitude)
    rows = int(np.prod(batch))  # from 32 rows on ember-cpu's GEMM is faster: XNNPACK declines them
    assert served_by(providers, "linear") == ({"xnnpack"} if rows < _LINEAR_MAX_ROWS else {"cpu"})


def test_linear_matches_pytorch(rng):
    torch = pytest.importorskip("torch")
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((16, 40), (24, 40), (24,)))
    out = em.linear(em.asarray(x), em.asarray(w), em.asarray(b), activation="relu")
    expected = torch.relu(torch.nn.functional.linear(*map(torch.from_numpy, (x, w, b))))
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_input_ending_at_a_page_boundary_is_read_safely(rng):
    """XNNPACK may read 16 bytes past an input; 1024 rows x 1024 floats end exactly on a page."""
    x = rng.standard_normal((1024, 1024)).astype(np.float32)
    w = rng.standard_normal((8, 1024)).astype(np.float32)
    out = em.linear(em.asarray(x), em.asarray(w))
    ref.assert_close_dot(out.numpy(), ref.linear(x, w, None), ref.linear(np.abs(x), np.abs(w), None))


@pytest.mark.parametrize("special", [np.nan, -np.inf, 1e-41])
def test_special_values_are_declined(rng, special):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    x[2, 3] = special
    w = rng.standard_normal((3, 6)).astype(np.float32)
    out, providers = traced(em.linear, em.asarray(x), em.asarray(w))
    assert "xnnpack" not in served_by(providers, "linear")
    expected = np.einsum("mk,nk->mn", x.astype(np.float64), w.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(out.numpy()), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(out.numpy()), np.isinf(expected))


def test_float64_goes_to_the_next_provider(rng):
    x, w = rng.standard_normal((4, 6)), rng.standard_normal((3, 6))
    out, providers = traced(em.linear, em.asarray(x), em.asarray(w))
    assert "xnnpack" not in served_by(providers, "linear")
    np.testing.assert_allclose(out.numpy(), x @ w.T, rtol=1e-12)

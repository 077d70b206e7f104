"""The operator cache: reuse while weights are unchanged, rebuild after any in-place write,
bounded size, nothing kept for collected weights."""

from __future__ import annotations

import gc

import ember_xnnpack
import numpy as np
import pytest
import references as ref
from ember_xnnpack.cache import DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES

import ember_core as em


@pytest.fixture(autouse=True)
def fresh_cache():
    ember_xnnpack.clear_cache()
    yield
    ember_xnnpack.set_cache_limits(DEFAULT_MAX_ENTRIES, DEFAULT_MAX_BYTES)
    ember_xnnpack.clear_cache()


def _delta(before, after):
    return {k: after[k] - before[k] for k in ("hits", "misses", "evictions")}


def test_repeated_calls_reuse_the_operator(rng):
    x = em.asarray(rng.standard_normal((2, 3, 6, 6)).astype(np.float32))
    w = em.asarray(rng.standard_normal((4, 3, 3, 2)).astype(np.float32))
    before = ember_xnnpack.cache_info()
    first = em.conv2d(x, w).numpy().copy()
    second = em.conv2d(x, w).numpy()
    assert _delta(before, ember_xnnpack.cache_info()) == {"hits": 1, "misses": 1, "evictions": 0}
    np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize("write", ["row", "whole"])
def test_in_place_weight_update_gives_new_results(rng, write):
    """An in-place write between calls (what an optimizer step does) replaces the operator."""
    x = rng.standard_normal((5, 8)).astype(np.float32)
    w0 = rng.standard_normal((3, 8)).astype(np.float32)
    b = em.asarray(rng.standard_normal(3).astype(np.float32))
    w = em.asarray(w0)
    ex = em.asarray(x)
    em.linear(ex, w, b)
    if write == "row":
        w[0] = em.asarray(np.ones(8, np.float32))
        w0[0] = 1.0
    else:
        w[...] = w - w * 0.5
        w0 = w0 - w0 * np.float32(0.5)
    before = ember_xnnpack.cache_info()
    out = em.linear(ex, w, b)
    magnitude = ref.linear(np.abs(x), np.abs(w0), np.abs(b.numpy()))
    ref.assert_close_dot(out.numpy(), ref.linear(x, w0, b.numpy()), magnitude)
    info = ember_xnnpack.cache_info()
    assert _delta(before, info) == {"hits": 0, "misses": 1, "evictions": 0} and info["entries"] == 1


def _linear_providers(x, w):
    with em.trace_dispatch() as log:
        y = em.linear(x, w)
    return y, set(log.providers()["linear"])


def test_weights_being_trained_are_left_to_the_next_provider(rng):
    """A recorded call whose weights require grad is declined, whatever ran before it; inference
    (no_grad) and frozen weights are served: the provider is a function of the call alone."""
    x = em.asarray(rng.standard_normal((4, 6)).astype(np.float32))
    w = em.asarray(rng.standard_normal((3, 6)).astype(np.float32)).requires_grad_()
    for _ in range(3):
        y, providers = _linear_providers(x, w)
        assert providers == {"cpu"} and y.grad_fn is not None
        with em.no_grad():
            _, providers = _linear_providers(x, w)
        assert providers == {"xnnpack"}
        with em.no_grad():
            w -= w * 0.1  # an optimizer step
    frozen = w.detach()
    y, providers = _linear_providers(x.requires_grad_(), frozen)
    assert providers == {"xnnpack"} and y.grad_fn is not None


def test_training_results_do_not_depend_on_call_history(rng):
    """Two identical calls after an optimizer step give the same bits (the defect this replaced:
    the first call after a weight change went to ember-cpu, the next ones to XNNPACK, whose sums
    round differently at this width)."""
    x = em.asarray(rng.standard_normal((4, 256)).astype(np.float32))
    w = em.asarray(rng.standard_normal((16, 256)).astype(np.float32)).requires_grad_()
    em.linear(x, w)
    with em.no_grad():
        w -= w * 0.1
    first, second = (em.linear(x, w).detach().numpy().copy() for _ in range(2))
    np.testing.assert_array_equal(first, second)


def test_a_changed_conv_weight_replaces_its_operator(rng):
    x = em.asarray(rng.standard_normal((1, 2, 5, 5)).astype(np.float32))
    w = em.asarray(rng.standard_normal((3, 2, 3, 2)).astype(np.float32))
    em.conv2d(x, w)
    w *= 2.0
    want = ref.conv2d(x.numpy(), w.numpy(), None)
    np.testing.assert_allclose(em.conv2d(x, w).numpy(), want, rtol=1e-4, atol=1e-4)
    assert ember_xnnpack.cache_info()["entries"] == 1  # the stale operator was replaced, not kept


def test_bias_update_is_seen_too(rng):
    x = em.asarray(rng.standard_normal((2, 3, 5, 5)).astype(np.float32))
    w = em.asarray(rng.standard_normal((2, 3, 3, 2)).astype(np.float32))
    b = em.zeros(2)
    before = em.conv2d(x, w, b).numpy().copy()
    b[...] = 1.0
    np.testing.assert_allclose(em.conv2d(x, w, b).numpy(), before + 1, rtol=1e-6, atol=1e-6)


def test_views_of_one_storage_are_different_weights(rng):
    both = em.asarray(rng.standard_normal((2, 4, 6)).astype(np.float32))
    x = em.asarray(rng.standard_normal((3, 6)).astype(np.float32))
    first, second = em.linear(x, both[0]), em.linear(x, both[1])
    np.testing.assert_allclose(first.numpy(), x.numpy() @ both.numpy()[0].T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(second.numpy(), x.numpy() @ both.numpy()[1].T, rtol=1e-5, atol=1e-5)


def test_size_is_bounded_least_recently_used_first(rng):
    ember_xnnpack.set_cache_limits(max_entries=3)
    x = em.asarray(rng.standard_normal((2, 5)).astype(np.float32))
    weights = [em.asarray(rng.standard_normal((4, 5)).astype(np.float32)) for _ in range(5)]
    for w in weights:
        em.linear(x, w)
    info = ember_xnnpack.cache_info()
    assert info["entries"] == 3 and info["evictions"] == 2
    before = ember_xnnpack.cache_info()
    em.linear(x, weights[-1])  # most recent: still cached
    em.linear(x, weights[0])  # evicted: rebuilt
    assert _delta(before, ember_xnnpack.cache_info()) == {"hits": 1, "misses": 1, "evictions": 1}


def test_byte_bound_keeps_the_operator_in_use(rng):
    ember_xnnpack.set_cache_limits(max_bytes=16)
    x = em.asarray(rng.standard_normal((2, 64)).astype(np.float32))
    w = rng.standard_normal((32, 64)).astype(np.float32)
    out = em.linear(x, em.asarray(w))
    np.testing.assert_allclose(out.numpy(), x.numpy() @ w.T, rtol=1e-5, atol=1e-4)
    assert ember_xnnpack.cache_info()["entries"] == 1


def test_collected_weights_release_their_operator(rng):
    x = em.asarray(rng.standard_normal((2, 5)).astype(np.float32))
    w = em.asarray(rng.standard_normal((4, 5)).astype(np.float32))
    em.linear(x, w)
    del w
    gc.collect()
    em.linear(x, em.asarray(rng.standard_normal((4, 5)).astype(np.float32)))
    assert ember_xnnpack.cache_info()["entries"] == 1


def test_limits_are_validated():
    with pytest.raises(ValueError, match="max_entries"):
        ember_xnnpack.set_cache_limits(max_entries=-1)

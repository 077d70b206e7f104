"""conv2d (composite: im2col + GEMM) against a direct numpy float64 reference."""

from __future__ import annotations

import numpy as np
import pytest

import ember_core as em


def reference(x, w, b, stride, padding, dilation, groups):
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    n, _c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (wd - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for f in range(o):
        g = f // og
        for i in range(kh):
            for j in range(kw):
                rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
                cols = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
                patch = x[:, g * cg:(g + 1) * cg, rows, cols]
                out[:, f] += np.einsum("nchw,c->nhw", patch, w[f, :, i, j])
    return out if b is None else out + b[None, :, None, None]


@pytest.mark.parametrize(
    ("n", "c", "h", "w", "o", "k", "stride", "padding", "dilation", "groups", "bias"),
    [
        (2, 3, 8, 8, 4, 3, (1, 1), (1, 1), (1, 1), 1, True),
        (1, 4, 9, 7, 6, 3, (2, 1), (0, 2), (1, 1), 2, False),
        (2, 4, 10, 10, 4, 3, (1, 1), (2, 2), (2, 2), 4, True),  # depthwise, dilated
        (1, 2, 5, 5, 3, 1, (1, 1), (0, 0), (1, 1), 1, True),
    ],
)
def test_conv2d_matches_reference(n, c, h, w, o, k, stride, padding, dilation, groups, bias):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w))
    wt = rng.standard_normal((o, c // groups, k, k))
    b = rng.standard_normal(o) if bias else None
    got = em.conv2d(em.asarray(x, dtype=em.float64), em.asarray(wt, dtype=em.float64),
                    None if b is None else em.asarray(b, dtype=em.float64),
                    stride=stride, padding=padding, dilation=dilation, groups=groups)
    expected = reference(x, wt, b, stride, padding, dilation, groups)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10, atol=1e-10)
    got32 = em.conv2d(em.asarray(x, dtype=em.float32), em.asarray(wt, dtype=em.float32), stride=stride,
                      padding=padding, dilation=dilation, groups=groups)
    np.testing.assert_allclose(got32.numpy(), reference(x, wt, None, stride, padding, dilation, groups),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("x", "w", "kwargs", "error"),
    [
        ((1, 3, 8, 8), (4, 2, 3, 3), {}, em.ShapeError),
        ((1, 4, 8, 8), (4, 2, 3, 3), {"groups": 3}, em.ShapeError),
        ((1, 3, 2, 2), (4, 3, 3, 3), {}, em.ShapeError),
        ((3, 8, 8), (4, 3, 3, 3), {}, em.ShapeError),
        ((1, 3, 8, 8), (4, 3, 3, 3), {"stride": 0}, ValueError),
    ],
)
def test_conv2d_rejects_bad_input(x, w, kwargs, error):
    with pytest.raises(error):
        em.conv2d(em.zeros(x), em.zeros(w), **kwargs)

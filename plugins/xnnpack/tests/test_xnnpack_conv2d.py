"""conv2d against a float64 numpy reference (and PyTorch when installed), every parameter kind."""

from __future__ import annotations

import numpy as np
import pytest
import references as ref
from ember_conformance.references import conv2d_weight_grad_reference
from ember_xnnpack import kernels
from xnnpack_helpers import served_by, traced

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
    (2, 6, 5, 16, 6, (3, 3), (1, 1), (1, 1), (1, 1), 6),  # depthwise, rows of 16: ember-cpu's
    (2, 6, 5, 20, 6, (3, 3), (2, 2), (1, 1), (1, 1), 6),  # depthwise, stride 2, rows of 10: ember-cpu's
]


def _left_to_ember_cpu(case) -> bool:
    """xnnpack declines dense 3x3 stride-1 convolutions (ember-cpu's Winograd kernel is faster
    there), depthwise ones with output rows of 10 or more, and at stride 1 those of 8 channels or
    fewer or with rows of 8 or more over fewer than 32 channels (its depthwise kernel), 1x1
    ones at stride 1 without padding, and, onto 64 output positions or more, grouped ones, kernels
    of up to 9 taps and strided ones (ember-cpu's GEMM per image)."""
    _, c, h, w, o, kernel, stride, padding, dilation, groups = case
    depthwise = groups == c > 1 and o % c == 0
    row = (w + 2 * padding[1] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    depthwise_rows = depthwise and (row >= 10 or (stride == (1, 1) and (c <= 8 or (row >= 8 and c < 32))))
    pointwise = (kernel, stride, padding) == ((1, 1), (1, 1), (0, 0))
    plane = 1
    for n, k, s, p, d in zip((h, w), kernel, stride, padding, dilation):
        plane *= (n + 2 * p - d * (k - 1) - 1) // s + 1
    gemm = not depthwise and plane >= 64 and (groups > 1 or kernel[0] * kernel[1] <= 9 or stride != (1, 1))
    return (kernel, stride, dilation, groups) == ((3, 3), (1, 1), (1, 1), 1) or depthwise_rows or pointwise or gemm


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
    assert served_by(providers, "conv2d") == {"cpu" if _left_to_ember_cpu(case) else "xnnpack"}
    if activation == "relu":
        assert out.numpy().min() >= 0


def test_conv2d_matches_pytorch(rng):
    torch = pytest.importorskip("torch")
    out, _, (x, wt, b, params) = _run(rng, CASES[1], True, None)
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(wt), torch.from_numpy(b), **params)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)


def test_non_contiguous_input_is_made_contiguous_by_the_core(rng):
    x = rng.standard_normal((2, 7, 3, 8)).astype(np.float32)
    wt = rng.standard_normal((5, 3, 3, 2)).astype(np.float32)
    view = em.permute_dims(em.asarray(x), (0, 2, 1, 3))  # (2, 3, 7, 8), strided; 7 x 9 outputs: XNNPACK's
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


@pytest.mark.parametrize(("shape", "where"), [((1, 2, 5, 5), (0, 1, 2, 2)),  # scalar transpose edges
                                               ((2, 16, 9, 9), (1, 3, 2, 5)),  # inside an 8x8 register block
                                               ((2, 16, 9, 9), (0, 15, 8, 8))])  # the last element
@pytest.mark.parametrize("special", [np.nan, np.inf, 1e-39])
def test_special_input_values_are_declined_and_kept(rng, shape, where, special):
    """XNNPACK's output clamps turn NaN into -inf and it flushes subnormals to zero: calls with
    such inputs go to the next provider."""
    x = rng.standard_normal(shape).astype(np.float32)
    x[where] = special
    wt = rng.standard_normal((3, shape[1], 3, 3)).astype(np.float32)
    out, providers = traced(em.conv2d, em.asarray(x), em.asarray(wt), padding=1)
    assert "xnnpack" not in served_by(providers, "conv2d")
    with np.errstate(invalid="ignore"):
        expected = ref.conv2d(x, wt, None, padding=(1, 1))
    np.testing.assert_array_equal(np.isnan(out.numpy()), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(out.numpy()), np.isinf(expected))
    ordinary = np.isfinite(expected)
    ref.assert_close_dot(out.numpy()[ordinary], expected[ordinary],
                         ref.magnitude_conv2d(np.nan_to_num(x, posinf=0), wt, None, padding=(1, 1))[ordinary])


def test_subnormal_weights_are_declined(rng):
    x = np.ones((1, 1, 3, 3), np.float32)
    tiny = np.float32(1e-40)
    out, providers = traced(em.conv2d, em.asarray(x), em.asarray(np.full((1, 1, 2, 2), tiny, np.float32)))
    assert "xnnpack" not in served_by(providers, "conv2d")
    np.testing.assert_array_equal(out.numpy(), np.full((1, 1, 2, 2), tiny * 4, np.float32))


def test_non_finite_weights_are_declined(rng):
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    wt = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    wt[0, 0, 0, 0] = np.inf
    out, providers = traced(em.conv2d, em.asarray(x), em.asarray(wt))
    assert "xnnpack" not in served_by(providers, "conv2d") and np.isinf(out.numpy()[0, 0]).all()

GRAD_CASES = [  # input shape, o, (kh, kw), stride, padding, dilation, groups
    ((2, 6, 9, 11), 4, (3, 3), (2, 1), (1, 2), (1, 2), 2),
    ((2, 4, 10, 9), 8, (3, 3), (2, 2), (1, 1), (1, 1), 1),  # stride 2 on even/odd sizes: adjustments
    ((1, 8, 7, 7), 8, (3, 3), (1, 1), (1, 1), (1, 1), 8),  # depthwise
    ((3, 5, 6, 8), 7, (1, 1), (1, 1), (0, 0), (1, 1), 1),
    ((2, 16, 12, 12), 32, (5, 5), (3, 3), (2, 2), (1, 1), 1),
    ((2, 3, 8, 8), 1, (3, 3), (1, 1), (0, 0), (1, 1), 1),  # one output channel
    ((2, 5, 9, 7), 6, (3, 3), (1, 1), (1, 1), (1, 1), 1),  # left to ember-cpu's Winograd kernel
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: "x".join(map(str, c[0])) + f"-s{c[3][0]}-g{c[-1]}")
def test_conv2d_input_grad_matches_reference(rng, case):
    shape, o, (kh, kw), stride, padding, dilation, groups = case
    params = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    wt = rng.standard_normal((o, shape[1] // groups, kh, kw)).astype(np.float32)
    oh, ow = ref.conv2d(np.zeros(shape, np.float32), wt, None, **params).shape[2:]
    dy = rng.standard_normal((shape[0], o, oh, ow)).astype(np.float32)
    out, providers = traced(em.conv2d_input_grad, em.asarray(dy), em.asarray(wt), input_shape=shape, **params)
    magnitude = ref.conv2d_input_grad(np.abs(dy), np.abs(wt), shape, **params)
    ref.assert_close_dot(out.numpy(), ref.conv2d_input_grad(dy, wt, shape, **params), magnitude)
    # a stride-1 3x3 input gradient is the convolution with the flipped kernel: ember-cpu runs it on
    # its Winograd kernel, faster than XNNPACK's deconvolution; a depthwise one on its depthwise kernel
    winograd = (kh, kw, stride, dilation, groups) == (3, 3, (1, 1), (1, 1), 1) and o > 1 and max(padding) <= 2
    depthwise = groups == shape[1] > 1 and o % groups == 0
    assert served_by(providers, "conv2d_input_grad") == {"cpu" if winograd or depthwise else "xnnpack"}


@pytest.mark.parametrize(("shape", "o", "kernel", "stride", "padding", "groups"), [
    ((3, 6, 1, 1), 6, (5, 5), (2, 3), (2, 5), 3),  # found by test_xnnpack_properties: a segfault
    ((2, 4, 5, 1), 3, (3, 3), (1, 3), (1, 1), 1),
])
def test_conv2d_input_grad_onto_fewer_pixels_than_the_stride_is_declined(rng, shape, o, kernel, stride, padding,
                                                                         groups):
    """XNNPACK's strided deconvolution writes one sub-convolution per row/column phase below the
    stride; a phase past the end of a narrower input wrote out of bounds."""
    params = dict(stride=stride, padding=padding, dilation=(1, 1), groups=groups)
    wt = rng.standard_normal((o, shape[1] // groups, *kernel)).astype(np.float32)
    oh, ow = ref.conv2d(np.zeros(shape, np.float32), wt, None, **params).shape[2:]
    dy = rng.standard_normal((shape[0], o, oh, ow)).astype(np.float32)
    out, providers = traced(em.conv2d_input_grad, em.asarray(dy), em.asarray(wt), input_shape=shape, **params)
    magnitude = ref.conv2d_input_grad(np.abs(dy), np.abs(wt), shape, **params)
    ref.assert_close_dot(out.numpy(), ref.conv2d_input_grad(dy, wt, shape, **params), magnitude)
    assert "xnnpack" not in served_by(providers, "conv2d_input_grad")


WEIGHT_GRAD_CASES = [  # input shape, o, (kh, kw), stride, padding, dilation
    ((32, 16, 8, 8), 32, (3, 3), (1, 1), (1, 1), (1, 1)),  # the demo's second layer
    ((32, 1, 8, 8), 16, (3, 3), (1, 1), (1, 1), (1, 1)),  # one input channel: no input transpose
    ((16, 3, 9, 11), 4, (3, 3), (2, 1), (1, 2), (1, 2)),
    ((16, 4, 10, 9), 40, (3, 3), (2, 2), (1, 1), (1, 1)),  # a dropped row and column; 3 channel runs
    ((17, 5, 12, 12), 6, (5, 5), (3, 3), (2, 2), (1, 1)),  # dropped rows as wide as the padding
    ((20, 3, 9, 8), 1, (2, 3), (3, 2), (0, 1), (2, 1)),  # one output channel: no output transpose
    ((64, 8, 6, 6), 48, (1, 1), (1, 1), (0, 0), (1, 1)),
]


@pytest.fixture
def every_weight_grad(monkeypatch):
    """The kernel tried on every geometry it can compute, not only where it is faster."""
    monkeypatch.setattr(kernels, "weight_grad_pays", lambda *sizes: True)


def _weight_grad_inputs(rng, shape, o, kernel, stride, padding, dilation):
    params = dict(stride=stride, padding=padding, dilation=dilation)
    oh, ow = ref.conv2d(np.zeros(shape, np.float32), np.zeros((o, shape[1], *kernel), np.float32), None,
                        **params).shape[2:]
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal((shape[0], o, oh, ow)).astype(np.float32)
    return x, dy, params


@pytest.mark.parametrize("case", WEIGHT_GRAD_CASES, ids=lambda c: "x".join(map(str, c[0])) + f"-o{c[1]}-s{c[3][0]}")
def test_conv2d_weight_grad_matches_reference(rng, case, every_weight_grad):
    shape, o, kernel, *geometry = case
    x, dy, params = _weight_grad_inputs(rng, shape, o, kernel, *geometry)
    weight_shape = (o, shape[1], *kernel)
    out, providers = traced(em.conv2d_weight_grad, em.asarray(x), em.asarray(dy), weight_shape=weight_shape, **params)
    ref.assert_close_dot(out.numpy(), conv2d_weight_grad_reference(x, dy, weight_shape, **params),
                         conv2d_weight_grad_reference(np.abs(x), np.abs(dy), weight_shape, **params))
    assert served_by(providers, "conv2d_weight_grad") == {"xnnpack"}


@pytest.mark.parametrize(("shape", "o", "params", "why"), [
    ((16, 4, 6, 6), 8, {"padding": 1, "groups": 2}, "groups"),
    ((16, 4, 8, 8), 8, {"stride": 3}, "more dropped rows than padding"),
])
def test_conv2d_weight_grad_declines_to_ember_cpu(rng, shape, o, params, why, every_weight_grad):
    groups = params.get("groups", 1)
    x = rng.standard_normal(shape).astype(np.float32)
    weight_shape = (o, shape[1] // groups, 3, 3)
    oh = ref.conv2d(x, np.zeros(weight_shape, np.float32), None, stride=(params.get("stride", 1),) * 2,
                    padding=(params.get("padding", 0),) * 2, groups=groups).shape[2]
    dy = rng.standard_normal((shape[0], o, oh, oh)).astype(np.float32)
    out, providers = traced(em.conv2d_weight_grad, em.asarray(x), em.asarray(dy), weight_shape=weight_shape, **params)
    assert served_by(providers, "conv2d_weight_grad") == {"cpu"}, why
    with em.providers(exclude=["xnnpack"]):
        expected = em.conv2d_weight_grad(em.asarray(x), em.asarray(dy), weight_shape=weight_shape, **params)
    np.testing.assert_array_equal(out.numpy(), expected.numpy())


@pytest.mark.parametrize("operand", ["x", "grad_output"])
@pytest.mark.parametrize("special", [np.nan, np.inf, 1e-39])
def test_conv2d_weight_grad_declines_special_values(rng, operand, special, every_weight_grad):
    x, dy, params = _weight_grad_inputs(rng, (16, 3, 6, 6), 8, (3, 3), (1, 1), (1, 1), (1, 1))
    (x if operand == "x" else dy)[3, 1, 2, 4] = special
    out, providers = traced(em.conv2d_weight_grad, em.asarray(x), em.asarray(dy), weight_shape=(8, 3, 3, 3),
                            **params)
    assert served_by(providers, "conv2d_weight_grad") == {"cpu"}
    with np.errstate(invalid="ignore", over="ignore"):
        expected = conv2d_weight_grad_reference(x, dy, (8, 3, 3, 3), **params)
    np.testing.assert_array_equal(np.isnan(out.numpy()), np.isnan(expected))


def test_backward_of_conv2d_uses_both_gradient_kernels(rng, every_weight_grad):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((16, 4, 9, 9)).astype(np.float32)
    wt = rng.standard_normal((32, 4, 3, 3)).astype(np.float32)
    ex, ew = em.asarray(x), em.asarray(wt)
    ex.requires_grad = ew.requires_grad = True
    with em.trace_dispatch() as log:
        em.conv2d(ex, ew, stride=2, padding=1).sum().backward()
    tx, tw = torch.from_numpy(x).requires_grad_(), torch.from_numpy(wt).requires_grad_()
    torch.nn.functional.conv2d(tx, tw, stride=2, padding=1).sum().backward()
    np.testing.assert_allclose(ex.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ew.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-3)
    assert served_by(log.providers(), "conv2d_input_grad") == {"xnnpack"}
    assert served_by(log.providers(), "conv2d_weight_grad") == {"xnnpack"}


@pytest.mark.parametrize(("shape", "o", "kernel", "stride", "padding", "served"), [
    ((32, 16, 10, 10), 32, (3, 3), (2, 2), (1, 1), "cpu"),   # ember-cpu's direct kernel takes any stride
    ((32, 16, 10, 10), 32, (4, 4), (2, 2), (1, 1), "xnnpack"),
    ((32, 16, 8, 8), 32, (5, 5), (1, 1), (2, 2), "xnnpack"),
    ((32, 16, 8, 8), 32, (3, 3), (1, 1), (1, 1), "cpu"),   # the demo's second layer: ember-cpu's direct kernel
    ((32, 16, 8, 8), 32, (3, 3), (1, 1), (0, 0), "cpu"),   # the same kernel
    ((32, 16, 8, 8), 32, (1, 1), (1, 1), (0, 0), "cpu"),   # one GEMM in ember-cpu
    ((32, 1, 8, 8), 16, (5, 5), (1, 1), (2, 2), "cpu"),    # one input channel: one image per operator run
    ((8, 16, 8, 8), 32, (5, 5), (1, 1), (2, 2), "cpu"),    # a batch below 16
    ((32, 32, 8, 8), 64, (5, 5), (1, 1), (2, 2), "cpu"),   # 4096 filter values per image, packed on every call
])
def test_weight_grad_goes_to_xnnpack_where_it_is_faster(rng, shape, o, kernel, stride, padding, served):
    x, dy, params = _weight_grad_inputs(rng, shape, o, kernel, stride, padding, (1, 1))
    weight_shape = (o, shape[1], *kernel)
    out, providers = traced(em.conv2d_weight_grad, em.asarray(x), em.asarray(dy), weight_shape=weight_shape, **params)
    assert served_by(providers, "conv2d_weight_grad") == {served}
    ref.assert_close_dot(out.numpy(), conv2d_weight_grad_reference(x, dy, weight_shape, **params),
                         conv2d_weight_grad_reference(np.abs(x), np.abs(dy), weight_shape, **params))

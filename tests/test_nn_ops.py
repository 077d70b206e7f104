"""The registry's neural-network ops (nn.toml) against float64 references: numpy where it is short
to write, PyTorch (float64) for convolutions and pooling with all their options.  float32 results
are held to a tolerance scaled by the number of terms each output sums."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

import ember_core as em
from ember_core import plugins
from ember_core.ops.registry import REGISTRY

torch = pytest.importorskip("torch")
F = torch.nn.functional

# float32 accumulates k products per output: error ~ k * eps * |terms|; inputs are standard normal
F32 = {"rtol": 1e-4, "atol": 1e-5}
F64 = {"rtol": 1e-10, "atol": 1e-12}
TOL = {"float32": F32, "float64": F64}


def rand(*shape, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape)


def em_t(a, dtype):
    return em.asarray(np.asarray(a), dtype=dtype)


def torch_t(a):
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def check(got, expected, dtype):
    assert got.dtype == dtype, (got.dtype, dtype)
    expected = expected.detach().numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    np.testing.assert_allclose(np.asarray(got).astype(np.float64), expected, **TOL[dtype])


DTYPES = ["float64", "float32"]


@pytest.fixture(autouse=True, params=["default providers", "composites"])
def providers(request):
    """Every test runs twice: with whatever providers are installed (XNNPACK may serve some ops
    natively), and with every cpu provider but ember-cpu excluded, so the composites run."""
    if request.param == "default providers":
        yield
        return
    others = [b.name for b in plugins.MANAGER.providers("cpu") if b.name != "cpu"]
    with em.providers(exclude=others):
        yield


def test_signatures_match_the_registry():
    for name in ("conv2d", "conv2d_input_grad", "conv2d_weight_grad", "linear", "max_pool2d", "max_pool2d_grad",
                 "max_pool2d_select", "avg_pool2d", "avg_pool2d_grad", "adaptive_avg_pool2d", "softmax",
                 "log_softmax"):
        schema = REGISTRY[name]
        params = list(inspect.signature(getattr(em, name)).parameters)
        assert params == [p.name for p in schema.params], name
        assert set(schema.derivatives) <= {*params, "grad"}


@pytest.mark.parametrize(("call", "message"), [
    (lambda: em.conv2d(em.ones((1, 1, 3, 3))), "missing 1 required positional argument: 'weight'"),
    (lambda: em.conv2d(em.ones((1, 1, 3, 3)), em.ones((1, 1, 1, 1)), strid=1), "unexpected keyword argument 'strid'"),
    (lambda: em.softmax(em.ones(2), 0, axis=0), "multiple values for argument 'axis'"),
    (lambda: em.linear(x=em.ones(2), weight=em.ones((1, 2))), "positional-only arguments passed as keyword"),
    (lambda: em.max_pool2d(em.ones((1, 1, 4, 4)), 2, 2, 0, 1, False, 7), "from 2 to 6 positional arguments but 7"),
])
def test_calls_are_bound_to_the_schema(call, message):
    with pytest.raises(TypeError, match=message):
        call()


# ---- convolution ---------------------------------------------------------------------------------

CONV_CASES = [
    # n, c, h, w, o, (kh, kw), stride, padding, dilation, groups
    (2, 3, 8, 8, 4, (3, 3), 1, 1, 1, 1),
    (1, 4, 9, 7, 6, (3, 2), (2, 1), (0, 2), 1, 2),
    (2, 4, 10, 10, 4, (3, 3), 1, 2, 2, 4),  # depthwise, dilated
    (2, 6, 11, 9, 12, (3, 3), 2, 1, 1, 6),  # depthwise with channel multiplier 2, strided
    (1, 2, 5, 5, 3, (1, 1), 1, 0, 1, 1),
    (3, 2, 7, 6, 5, (2, 3), (3, 2), (1, 0), (2, 1), 1),  # strides leaving rows unused
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n", "c", "h", "w", "o", "k", "stride", "padding", "dilation", "groups"), CONV_CASES)
def test_conv2d_and_its_gradients_match_torch(dtype, n, c, h, w, o, k, stride, padding, dilation, groups):
    x, weight, bias = rand(n, c, h, w), rand(o, c // groups, *k, seed=1), rand(o, seed=2)
    kw = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    tx = torch_t(x).requires_grad_()
    tw = torch_t(weight).requires_grad_()
    expected = F.conv2d(tx, tw, torch_t(bias), **kw)
    got = em.conv2d(em_t(x, dtype), em_t(weight, dtype), em_t(bias, dtype), **kw)
    check(got, expected, dtype)
    check(em.conv2d(em_t(x, dtype), em_t(weight, dtype), em_t(bias, dtype), activation="relu", **kw),
          torch.relu(expected), dtype)

    grad_out = rand(*expected.shape, seed=3)
    gx, gw = torch.autograd.grad(expected, (tx, tw), torch_t(grad_out))
    check(em.conv2d_input_grad(em_t(grad_out, dtype), em_t(weight, dtype), input_shape=x.shape, **kw), gx, dtype)
    check(em.conv2d_weight_grad(em_t(x, dtype), em_t(grad_out, dtype), weight_shape=weight.shape, **kw), gw, dtype)


@pytest.mark.parametrize("groups", [1, 2])
def test_conv2d_of_an_empty_batch(groups):
    x = em.ones((0, 4, 5, 5)).requires_grad_()
    w = em.ones((6, 4 // groups, 3, 3)).requires_grad_()
    y = em.conv2d(x, w, padding=1, groups=groups)
    assert y.shape == (0, 6, 5, 5)
    y.sum().backward()
    assert x.grad.shape == (0, 4, 5, 5) and not np.asarray(w.grad).any()


def test_conv2d_accepts_strided_inputs():
    x, weight = rand(2, 3, 6, 6), rand(4, 3, 3, 3, seed=1)
    ex = em.asarray(x.transpose(0, 1, 3, 2).copy(), dtype="float32").permute_dims((0, 1, 3, 2))  # not contiguous
    check(em.conv2d(ex, em_t(weight, "float32")), F.conv2d(torch_t(x), torch_t(weight)), "float32")


@pytest.mark.parametrize(
    ("x", "w", "kwargs", "error"),
    [
        ((1, 3, 8, 8), (4, 2, 3, 3), {}, em.ShapeError),  # weight's channels do not fit
        ((1, 4, 8, 8), (4, 2, 3, 3), {"groups": 3}, em.ShapeError),  # channels not divisible by groups
        ((1, 4, 8, 8), (6, 1, 3, 3), {"groups": 4}, em.ShapeError),  # filters not divisible by groups
        ((1, 3, 2, 2), (4, 3, 3, 3), {}, em.ShapeError),  # negative output size
        ((3, 8, 8), (4, 3, 3, 3), {}, em.ShapeError),  # not 4-d
        ((1, 3, 8, 8), (4, 3, 3, 3), {"stride": 0}, ValueError),
        ((1, 3, 8, 8), (4, 3, 3, 3), {"padding": -1}, ValueError),
        ((1, 3, 8, 8), (4, 3, 3, 3), {"groups": 0}, ValueError),
        ((1, 3, 8, 8), (4, 3, 3, 3), {"stride": (1, 2, 3)}, TypeError),
        ((1, 3, 8, 8), (4, 3, 3, 3), {"stride": 1.5}, TypeError),
        ((1, 3, 8, 8), (4, 3, 3, 3), {"activation": "tanh"}, ValueError),
    ],
)
def test_conv2d_rejects_bad_input(x, w, kwargs, error):
    with pytest.raises(error):
        em.conv2d(em.zeros(x), em.zeros(w), **kwargs)


@pytest.mark.parametrize("bad", [True, 1.0, (1, True), (1.0, 1), [1, 1.0]])
def test_geometry_memo_still_refuses_values_equal_to_a_cached_one(bad):
    """conv and pool geometry is cached per argument values; True and 1.0 equal 1 (and hash alike)
    but are not ints, so a call with them after a valid call with 1 must still be refused."""
    x, w = em.zeros((1, 3, 8, 8)), em.zeros((4, 3, 3, 3))
    em.conv2d(x, w, stride=1, dilation=(1, 1))
    em.max_pool2d(x, 2, stride=(1, 1))
    with pytest.raises(TypeError, match="stride must be an int or a pair of ints"):
        em.conv2d(x, w, stride=bad)
    with pytest.raises(TypeError, match="dilation must be an int or a pair of ints"):
        em.conv2d(x, w, dilation=bad)
    with pytest.raises(TypeError, match="stride must be an int or a pair of ints"):
        em.max_pool2d(x, 2, stride=bad)


def test_conv2d_rejects_bad_dtypes_devices_and_bias():
    x, w = em.zeros((1, 3, 8, 8)), em.zeros((4, 3, 3, 3))
    with pytest.raises(em.DTypeError, match="weight is float64"):
        em.conv2d(x, w.astype(em.float64))
    with pytest.raises(em.DTypeError, match="does not accept int64"):
        em.conv2d(x.astype(em.int64), w.astype(em.int64))
    with pytest.raises(em.ShapeError, match=r"bias must have shape \(4,\)"):
        em.conv2d(x, w, em.zeros(3))
    with pytest.raises(TypeError, match="ember tensor"):
        em.conv2d(np.zeros((1, 3, 8, 8)), w)
    with pytest.raises(em.ShapeError, match="grad_output must have shape"):
        em.conv2d_input_grad(em.zeros((1, 4, 5, 5)), w, input_shape=(1, 3, 8, 8))


# ---- linear --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("x_shape", [(5, 7), (2, 3, 7), (7,)])
def test_linear_matches_torch(dtype, x_shape):
    x, weight, bias = rand(*x_shape), rand(4, 7, seed=1), rand(4, seed=2)
    expected = F.linear(torch_t(x), torch_t(weight), torch_t(bias))
    check(em.linear(em_t(x, dtype), em_t(weight, dtype), em_t(bias, dtype)), expected, dtype)
    check(em.linear(em_t(x, dtype), em_t(weight, dtype)), F.linear(torch_t(x), torch_t(weight)), dtype)
    check(em.linear(em_t(x, dtype), em_t(weight, dtype), em_t(bias, dtype), activation="relu"), torch.relu(expected),
          dtype)


def test_linear_rejects_bad_input():
    with pytest.raises(em.ShapeError, match="do not fit"):
        em.linear(em.zeros((2, 3)), em.zeros((4, 5)))
    with pytest.raises(em.ShapeError, match="bias"):
        em.linear(em.zeros((2, 3)), em.zeros((4, 3)), em.zeros(3))
    with pytest.raises(ValueError, match="activation"):
        em.linear(em.zeros((2, 3)), em.zeros((4, 3)), activation="gelu")


# ---- pooling -------------------------------------------------------------------------------------

MAX_POOL_CASES = [
    # kernel, stride, padding, dilation, ceil_mode
    (2, None, 0, 1, False),
    (3, 2, 1, 1, False),
    (3, 2, 1, 1, True),
    ((3, 2), (2, 1), (1, 0), (2, 1), False),
    (2, 3, 0, 1, True),  # gaps between windows; the last window hangs over the edge
    (3, 3, 1, 2, True),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("kernel", "stride", "padding", "dilation", "ceil_mode"), MAX_POOL_CASES)
def test_max_pool2d_and_its_gradient_match_torch(dtype, kernel, stride, padding, dilation, ceil_mode):
    x = rand(2, 3, 9, 8)
    kw = {"kernel_size": kernel, "stride": stride, "padding": padding, "dilation": dilation, "ceil_mode": ceil_mode}
    tx = torch_t(x).requires_grad_()
    expected = F.max_pool2d(tx, **kw)
    check(em.max_pool2d(em_t(x, dtype), **kw), expected, dtype)
    grad_out = rand(*expected.shape, seed=3)
    (gx,) = torch.autograd.grad(expected, tx, torch_t(grad_out))
    check(em.max_pool2d_grad(em_t(grad_out, dtype), em_t(x, dtype), **kw), gx, dtype)
    # max_pool2d_select is max_pool2d_grad's adjoint: <grad(g), v> == <g, select(v)>
    values = rand(*x.shape, seed=4)
    selected = em.max_pool2d_select(em_t(values, dtype), em_t(x, dtype), **kw)
    np.testing.assert_allclose(np.sum(np.asarray(selected) * grad_out), np.sum(gx.numpy() * values), rtol=1e-5)


def test_max_pool2d_gradient_goes_to_the_first_maximum_of_a_tie():
    x = em.zeros((1, 1, 2, 4))
    got = em.max_pool2d_grad(em.ones((1, 1, 1, 2)), x, 2)
    tx = torch.zeros(1, 1, 2, 4, requires_grad=True)
    F.max_pool2d(tx, 2).sum().backward()
    np.testing.assert_array_equal(np.asarray(got), tx.grad.numpy())


AVG_POOL_CASES = [
    # kernel, stride, padding, ceil_mode, count_include_pad
    (2, None, 0, False, True),
    (3, 2, 1, False, True),
    (3, 2, 1, False, False),
    (3, 2, 1, True, True),
    (3, 2, 1, True, False),
    ((3, 2), (2, 1), (1, 1), True, False),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("kernel", "stride", "padding", "ceil_mode", "count_include_pad"), AVG_POOL_CASES)
def test_avg_pool2d_and_its_gradient_match_torch(dtype, kernel, stride, padding, ceil_mode, count_include_pad):
    x = rand(2, 3, 9, 8)
    kw = {"kernel_size": kernel, "stride": stride, "padding": padding, "ceil_mode": ceil_mode,
          "count_include_pad": count_include_pad}
    tx = torch_t(x).requires_grad_()
    expected = F.avg_pool2d(tx, **kw)
    check(em.avg_pool2d(em_t(x, dtype), **kw), expected, dtype)
    grad_out = rand(*expected.shape, seed=3)
    (gx,) = torch.autograd.grad(expected, tx, torch_t(grad_out))
    check(em.avg_pool2d_grad(em_t(grad_out, dtype), input_shape=x.shape, **kw), gx, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("output_size", [1, (1, 1), 3, (2, 4), (5, 3), (9, 8)])
def test_adaptive_avg_pool2d_matches_torch(dtype, output_size):
    x = rand(2, 3, 9, 8)
    check(em.adaptive_avg_pool2d(em_t(x, dtype), output_size), F.adaptive_avg_pool2d(torch_t(x), output_size), dtype)


@pytest.mark.parametrize(
    ("op", "kwargs", "error"),
    [
        ("max_pool2d", {"kernel_size": 2, "padding": 2}, ValueError),  # more than half the kernel
        ("max_pool2d", {"kernel_size": 0}, ValueError),
        ("max_pool2d", {"kernel_size": 9}, em.ShapeError),  # window larger than the input
        ("max_pool2d", {"kernel_size": (2, 2, 2)}, TypeError),
        ("avg_pool2d", {"kernel_size": 3, "stride": 0}, ValueError),
        ("avg_pool2d", {"kernel_size": 3, "padding": 2}, ValueError),
        ("adaptive_avg_pool2d", {"output_size": 0}, ValueError),
    ],
)
def test_pools_reject_bad_input(op, kwargs, error):
    with pytest.raises(error):
        getattr(em, op)(em.zeros((1, 2, 5, 5)), **kwargs)


def test_pools_reject_bad_dtypes_and_shapes():
    with pytest.raises(em.DTypeError):
        em.max_pool2d(em.zeros((1, 1, 4, 4), dtype=em.int32), 2)
    with pytest.raises(em.ShapeError, match="4-d"):
        em.avg_pool2d(em.zeros((4, 4)), 2)
    with pytest.raises(em.ShapeError, match="grad_output must have shape"):
        em.max_pool2d_grad(em.zeros((1, 1, 3, 3)), em.zeros((1, 1, 4, 4)), 2)
    for empty in ((1, 2, 0, 4), (1, 2, 4, 0)):  # no window to average (was ZeroDivisionError, or NaN for 1x1)
        for size in (1, 2):
            with pytest.raises(em.ShapeError, match="height and width must be non-zero"):
                em.adaptive_avg_pool2d(em.zeros(empty), size)


# ---- activations and softmax -----------------------------------------------------------------------

ERF = np.vectorize(math.erf)


@pytest.mark.parametrize("dtype", DTYPES)
def test_activations_match_numpy(dtype):
    x = np.concatenate([rand(50) * 4, [0.0, -0.0, 30.0, -30.0]])
    t = em_t(x, dtype)
    check(em.relu(t), np.maximum(x, 0), dtype)
    check(em.gelu(t), x * 0.5 * (1 + ERF(x / math.sqrt(2))), dtype)
    check(em.silu(t), x / (1 + np.exp(-x)), dtype)
    check(t.relu(), np.maximum(x, 0), dtype)


def test_relu_keeps_integer_dtypes_and_gelu_promotes_them():
    assert em.relu(em.asarray([-2, 3])).tolist() == [0, 3]
    assert em.relu(em.asarray([-2, 3])).dtype == em.int64
    assert em.gelu(em.asarray([0, 1])).dtype == em.float32


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_and_log_softmax_match_numpy(dtype, axis):
    x = rand(4, 5, 6) * 3
    x[0, 0, 0] = 1000.0  # must not overflow
    shifted = x - x.max(axis=axis, keepdims=True)
    log_sm = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    check(em.log_softmax(em_t(x, dtype), axis=axis), log_sm, dtype)
    check(em.softmax(em_t(x, dtype), axis=axis), np.exp(log_sm), dtype)


@pytest.mark.parametrize("dtype", [*DTYPES, "float16"])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_along_an_empty_axis_is_empty(dtype, op):
    """A zero-length axis has no maximum to shift by, and nothing to normalize: the result is empty."""
    for shape, axis in (((0, 4), 0), ((3, 0), -1), ((2, 0, 3), 1)):
        x = em.zeros(shape, dtype=getattr(em, dtype)).requires_grad_()
        out = getattr(em, op)(x, axis=axis)
        assert out.shape == shape and out.dtype == x.dtype
        out.sum().backward()
        assert x.grad.shape == shape


def test_softmax_rejects_bad_axis_and_dtype():
    with pytest.raises(em.ShapeError):
        em.softmax(em.zeros((2, 3)), axis=2)
    with pytest.raises(em.DTypeError):
        em.log_softmax(em.zeros((2, 3), dtype=em.int64))


# ---- dispatch: native kernels, declining, tracing ---------------------------------------------------

class FastConv:
    """A kernel-only provider for cpu (as XNNPACK is) serving conv2d for float32, declining groups > 1."""

    def __init__(self, manifest):
        self.manifest = manifest
        self.calls = []

    @plugins.hookimpl
    def ember_plugin_info(self):
        return plugins.PluginInfo(name="fastconv", version="1", abi=(plugins.ABI_MAJOR, plugins.ABI_MINOR),
                                  manifest=self.manifest)

    @plugins.hookimpl
    def ember_kernels(self, device_type):
        def conv2d(out, x, weight, bias, *, stride, padding, dilation, groups, activation):
            self.calls.append((x.shape, weight.shape, bias is None, stride, padding, dilation, groups, activation))
            if groups != 1:
                return NotImplemented
            out.numpy()[...] = 7.0
            return None

        return {"conv2d": conv2d} if device_type == "cpu" else {}


@pytest.fixture
def fastconv(tmp_path):
    manifest = tmp_path / "fastconv.toml"
    manifest.write_text('[plugin]\npriority = 10\n[kernels.cpu]\nconv2d = ["float32"]\n')
    provider = FastConv(manifest)
    plugins.register(provider)
    yield provider
    plugins.unregister("fastconv")


def test_a_native_kernel_runs_and_a_declining_one_hands_over_to_the_next_provider(fastconv):
    x, w = em.ones((1, 2, 4, 4)), em.ones((2, 2, 3, 3))
    others = [b.name for b in plugins.MANAGER.providers("cpu") if b.name not in ("cpu", "fastconv")]
    with em.providers(prefer=["fastconv"], exclude=others), em.trace_dispatch() as log:
        native = em.conv2d(x, w, stride=2, padding=(1, 0))
        handed_over = em.conv2d(em.ones((1, 4, 4, 4)), w, groups=2)  # grouped: fastconv declines, ember-cpu runs it
    assert np.asarray(native).tolist() == np.full((1, 2, 2, 1), 7.0).tolist()
    assert fastconv.calls[0] == ((1, 2, 4, 4), (2, 2, 3, 3), True, (2, 2), (1, 0), (1, 1), 1, None)
    assert np.asarray(handed_over).tolist() == np.full((1, 2, 2, 2), 18.0).tolist()
    assert log.providers()["conv2d"] == {"fastconv": 1, "cpu": 1}
    with em.providers(prefer=["fastconv"], exclude=others):
        em.conv2d(x.astype(em.float64), w.astype(em.float64))  # a dtype it does not claim: no call
    assert len(fastconv.calls) == 2

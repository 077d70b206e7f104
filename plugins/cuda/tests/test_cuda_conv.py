"""ember-cuda's convolutions and linear (ember_gpu.ops_conv) on ember-gpu's fake driver, which runs the
real kernels on the host and the GEMMs on the fake cuBLAS: conv2d (bias, fused relu), its input and
weight gradients, and linear, in every claimed dtype, against a float64 reference (ember-cpu in float64
on the same rounded inputs) and against the composites ember-cpu runs in the dtype; the GEMM path
(im2col, 1x1 without columns, grouped: one call per group or per image, more groups than the BLAS
batches), the direct kernels (depthwise), chunked batches, and autograd through conv2d and linear.
Each op's own kernels ran (the fake's launch log) and nothing went through the CPU fallback.
On a GPU the same checks run on the real device (cuBLAS, the nvcc-built kernels), and the benchmark's
shape (8 x 64 x 56 x 56 -> 64, 3x3) in float32 and float16.

The bias and relu of conv2d's and linear's GEMM path are the GEMM's epilogue: on ember's own GEMM
(EMBER_GPU_GEMM=own) the launch log holds eg_gemm and no pass of its own for them; on the BLAS only
the bias fill before the GEMM (which accumulates onto it) and relu after.

The bound for a sum of K products: (2 eps(dtype) + K eps(float32 or float64)) * S, S the same sum over
absolute values (plus |bias|): the GEMM and the kernels accumulate in float32 for float16 / bfloat16
and round the product, then the biased value, once each."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ember_core as em
from ember_core import dispatch, dtypes

ember_cuda = pytest.importorskip("ember_cuda")
from ember_gpu import blas, ops, ops_conv  # noqa: E402

CLAIMED = ops.claimed(ops.OpLayer(ops.kernel_index(ops.package_kernels("ember_cuda"))).table())
EPSILON = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}
SETTINGS = settings(max_examples=15, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _claimed(op: str) -> list[str]:
    assert op in CLAIMED, f"{op} is not in the kernel table: rebuild the fatbins (ember_gpu.build.build_images)"
    return CLAIMED[op]


class Conv(NamedTuple):
    x_shape: tuple[int, int, int, int]
    w_shape: tuple[int, int, int, int]
    stride: int | tuple[int, int] = 1
    padding: int | tuple[int, int] = 0
    dilation: int | tuple[int, int] = 1
    groups: int = 1

    @property
    def attrs(self) -> dict[str, Any]:
        return {"stride": self.stride, "padding": self.padding, "dilation": self.dilation, "groups": self.groups}

    @property
    def pointwise(self) -> bool:
        """A 1x1 kernel at stride 1 without padding: x is its own columns (no im2col, no col2im)."""
        return self.w_shape[2:] == (1, 1) and self.stride in (1, (1, 1)) and self.padding in (0, (0, 0))

    @property
    def kernel(self) -> str | None:
        """The kernel that shows which path served conv2d: direct for depthwise, else im2col (none: 1x1)."""
        if self.groups > 1 and self.groups == self.x_shape[1]:
            return "direct"
        return None if self.pointwise else "im2col"


CASES = [
    Conv((2, 3, 9, 8), (4, 3, 3, 3), padding=1),  # the common 3x3: one GEMM per chunk
    Conv((3, 4, 10, 7), (6, 2, 3, 2), stride=(2, 1), padding=(1, 2), dilation=(2, 1), groups=2),  # per group
    Conv((5, 6, 6, 6), (6, 2, 2, 2), stride=2, groups=3),  # fewer images than... more images than groups
    Conv((2, 4, 7, 7), (8, 1, 3, 3), padding=1, groups=4),  # depthwise, channel multiplier 2: direct
    Conv((3, 8, 5, 4), (6, 8, 1, 1)),  # 1x1: x is its own columns
    Conv((2, 36, 4, 4), (36, 2, 3, 3), padding=1, groups=18),  # more groups than the BLAS batches
]


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> em.Tensor:
    return em.asarray(rng.normal(0, 1, shape)).astype(dtype)


def _f64(t: em.Tensor) -> np.ndarray:
    t = t.to_device("cpu")
    return (t.astype("float32") if t.dtype == dtypes.bfloat16 else t).numpy().astype(np.float64)


def _reference(op: str, inputs: list[em.Tensor], **kw: Any) -> tuple[np.ndarray, np.ndarray]:
    """op in float64 on ember-cpu over the exact input values, and over their magnitudes."""
    exact = [None if t is None else em.asarray(_f64(t)) for t in inputs]
    magnitude = [None if t is None else em.abs(t) for t in exact]
    kw_abs = {**kw, "activation": None} if "activation" in kw else kw
    return getattr(em, op)(*exact, **kw).numpy(), getattr(em, op)(*magnitude, **kw_abs).numpy()


def _within(got: em.Tensor, want: np.ndarray, scale: np.ndarray, terms: int, what: str) -> None:
    dtype = got.dtype.name
    accumulator = EPSILON["float64" if dtype == "float64" else "float32"]
    bound = (2 * EPSILON[dtype] + terms * accumulator) * scale + 1e-30
    g = _f64(got)
    assert g.shape == want.shape, f"{what}: shape {g.shape}"
    bad = ~(np.abs(g - want) <= bound)
    assert not bad.any(), f"{what}: {g[bad][:5]} != reference {want[bad][:5]}"


def _native(op: str, what: str, function: Any, *args: Any, **kw: Any) -> em.Tensor:
    """function(*args, **kw), checked to have run op on ember-cuda's kernel (not a composite, no fallback)."""
    with dispatch.trace() as log:
        result = function(*args, **kw)
    assert log.providers().get(op) == {"cuda": 1}, f"{what}: served by {log.providers().get(op)}"
    return result


def _ran(fake: Any, kernel: str) -> bool:
    return any(launch.kernel == kernel for launch in fake.launches)


def _clear(fake: Any) -> None:
    """Forget the fake's launches (None: a real GPU, whose launches are not logged)."""
    if fake is not None:
        fake.launches.clear()


@pytest.fixture(params=["auto", "own"], ids=["blas", "own-gemm"])
def gemm_path(request: pytest.FixtureRequest) -> Any:
    """The GEMM the test runs on: the (fake) BLAS, or ember's own kernel; restored afterwards."""
    before = blas.gemm_choice()
    blas.set_gemm(request.param)
    yield request.param
    blas.set_gemm(before)


def _check_fused(fake: Any, dtype: str, bias: bool, relu: bool, what: str) -> None:
    """The GEMM's epilogue ran as fused as its path allows: on ember's own GEMM no pass but its kernel,
    on the BLAS the bias fill (eg_copy) before it and relu after, each only when asked."""
    own = blas.gemm_choice() == "own"
    passes = {f"eg_copy_{dtype}_to_{dtype}": bias and not own, f"eg_unary_relu_{dtype}": relu and not own}
    for prefix, expected in passes.items():
        assert any(launch.kernel.startswith(prefix) for launch in fake.launches) == expected, f"{what}: {prefix}"
    gemm = f"eg_gemm_epilogue_{dtype}" if bias or relu else f"eg_gemm_{dtype}"
    assert _ran(fake, gemm) == own, what


def _composite_close(got: em.Tensor, want: em.Tensor, terms: int, scale: np.ndarray, what: str) -> None:
    """got within twice the bound of ember-cpu's composite in the same dtype (both are within it of the truth)."""
    _within(got, _f64(want), 2 * scale, terms, f"{what} (against ember-cpu)")


def _check_conv2d(fake: Any | None, c: Conv, dtype: str, rng: np.random.Generator, bias: bool, relu: bool) -> None:
    x, w = _values(rng, c.x_shape, dtype), _values(rng, c.w_shape, dtype)
    b = _values(rng, (c.w_shape[0],), dtype) if bias else None
    kw = {**c.attrs, "activation": "relu" if relu else None}
    _clear(fake)
    what = f"conv2d {dtype} {c} bias={bias} relu={relu}"
    got = _native("conv2d", what, em.conv2d, x.to_device("cuda:0"), w.to_device("cuda:0"),
                  None if b is None else b.to_device("cuda:0"), **kw)
    if fake is not None:
        assert c.kernel is None or _ran(fake, f"eg_conv_{c.kernel}_{dtype}"), f"{what}: its kernel did not run"
        if c.kernel != "direct":
            _check_fused(fake, dtype, bias, relu, what)
    want, scale = _reference("conv2d", [x, w, b], **kw)
    terms = math.prod(c.w_shape[1:])
    _within(got, want, scale, terms, what)
    _composite_close(got, em.conv2d(x, w, b, **kw), terms, scale, what)


@pytest.mark.no_device
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.x_shape}-{c.w_shape}-g{c.groups}")
def test_conv2d_matches_the_reference(no_claimed_op_falls_back: Any, gemm_path: str, case: Conv) -> None:
    rng = np.random.default_rng(1)
    for dtype in _claimed("conv2d"):
        for bias, relu in ((True, True), (False, False), (True, False)):
            _check_conv2d(no_claimed_op_falls_back, case, dtype, rng, bias, relu)


def _check_gradients(fake: Any | None, c: Conv, dtype: str, rng: np.random.Generator) -> None:
    x, w = _values(rng, c.x_shape, dtype), _values(rng, c.w_shape, dtype)
    out_hw = tuple(em.conv2d(x, w, **c.attrs).shape[2:])
    grad = _values(rng, (c.x_shape[0], c.w_shape[0], *out_hw), dtype)
    on = {name: t.to_device("cuda:0") for name, t in (("x", x), ("w", w), ("grad", grad))}
    what = f"{dtype} {c}"
    _clear(fake)
    got = _native("conv2d_weight_grad", what, em.conv2d_weight_grad, on["x"], on["grad"], weight_shape=c.w_shape,
                  **c.attrs)
    direct = c.kernel == "direct"
    assert fake is None or _ran(fake, f"eg_conv_{'direct_weight_grad' if direct else 'im2col'}_{dtype}") or (
        c.x_shape[0] == 1 and c.pointwise), f"conv2d_weight_grad {what}: its kernel did not run"
    want, scale = _reference("conv2d_weight_grad", [x, grad], weight_shape=c.w_shape, **c.attrs)
    terms = c.x_shape[0] * math.prod(out_hw)
    _within(got, want, scale, terms, f"conv2d_weight_grad {what}")
    _composite_close(got, em.conv2d_weight_grad(x, grad, weight_shape=c.w_shape, **c.attrs), terms, scale, what)
    _clear(fake)
    got = _native("conv2d_input_grad", what, em.conv2d_input_grad, on["grad"], on["w"], input_shape=c.x_shape,
                  **c.attrs)
    kernel = "direct_input_grad" if direct else None if c.pointwise else "col2im"
    assert fake is None or kernel is None or _ran(fake, f"eg_conv_{kernel}_{dtype}"), \
        f"conv2d_input_grad {what}: no {kernel}"
    want, scale = _reference("conv2d_input_grad", [grad, w], input_shape=c.x_shape, **c.attrs)
    terms = c.w_shape[0] // c.groups * math.prod(c.w_shape[2:])
    _within(got, want, scale, terms, f"conv2d_input_grad {what}")
    _composite_close(got, em.conv2d_input_grad(grad, w, input_shape=c.x_shape, **c.attrs), terms, scale, what)


@pytest.mark.no_device
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.x_shape}-{c.w_shape}-g{c.groups}")
def test_conv2d_gradients_match_the_reference(no_claimed_op_falls_back: Any, case: Conv) -> None:
    rng = np.random.default_rng(2)
    for dtype in _claimed("conv2d_weight_grad"):
        _check_gradients(no_claimed_op_falls_back, case, dtype, rng)


@st.composite
def convs(draw: st.DrawFn) -> Conv:
    groups = draw(st.integers(1, 3))
    per_group, outs = draw(st.integers(1, 3)), draw(st.integers(1, 2)) * groups
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = (draw(st.integers(0, 1)), draw(st.integers(0, 1)))
    size = [max(draw(st.integers(1, 6)), d * (k - 1) + 1 - 2 * p) for k, d, p in zip(kernel, dilation, padding)]
    return Conv((draw(st.integers(1, 3)), groups * per_group, *size), (outs, per_group, *kernel), stride, padding,
                dilation, groups)


@pytest.mark.no_device
@SETTINGS
@given(convs(), st.sampled_from(["float16", "bfloat16", "float32", "float64"]))
def test_conv2d_and_its_gradients_over_drawn_geometries(no_claimed_op_falls_back: Any, c: Conv, dtype: str) -> None:
    rng = np.random.default_rng(3)
    _check_conv2d(no_claimed_op_falls_back, c, dtype, rng, True, True)
    _check_gradients(no_claimed_op_falls_back, c, dtype, rng)


@pytest.mark.no_device
def test_a_batch_past_the_column_bound_runs_in_chunks(no_claimed_op_falls_back: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Columns of two images at a time: the same results as the reference, one im2col per chunk, and
    the weight gradient's chunks added in order."""
    c = Conv((5, 3, 6, 6), (4, 3, 3, 3), padding=1)
    monkeypatch.setattr(ops_conv, "COLUMN_BYTES", 2 * 3 * 9 * 36 * 4 + (2 * 4 * 36 * 4))
    fake = no_claimed_op_falls_back
    rng = np.random.default_rng(4)
    _check_conv2d(fake, c, "float32", rng, True, False)
    assert sum(launch.kernel == "eg_conv_im2col_float32" for launch in fake.launches) == 3
    _check_gradients(fake, c, "float32", rng)
    assert sum(launch.kernel == "eg_conv_col2im_float32" for launch in fake.launches) == 3


@pytest.mark.no_device
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("relu", [True, False])
def test_linear_matches_the_reference(no_claimed_op_falls_back: Any, gemm_path: str, bias: bool, relu: bool) -> None:
    rng = np.random.default_rng(5)
    fake = no_claimed_op_falls_back
    for dtype in _claimed("linear"):
        for x_shape, features in (((7, 5), 3), ((2, 3, 4), 6), ((4, 0), 2)):
            x, w = _values(rng, x_shape, dtype), _values(rng, (features, x_shape[-1]), dtype)
            b = _values(rng, (features,), dtype) if bias else None
            kw = {"activation": "relu" if relu else None}
            fake.launches.clear()
            what = f"linear {dtype} {x_shape} -> {features} bias={bias} relu={relu}"
            got = _native("linear", what, em.linear, x.to_device("cuda:0"), w.to_device("cuda:0"),
                          None if b is None else b.to_device("cuda:0"), **kw)
            if x_shape[-1]:  # (k 0: no GEMM, the bias filled in and relu, on either path)
                _check_fused(fake, dtype, bias, relu, what)
                kinds = {launch.kernel for launch in fake.launches}
                assert all(kind.startswith((f"eg_copy_{dtype}", f"eg_unary_relu_{dtype}", "eg_gemm_"))
                           for kind in kinds), f"{what}: {kinds}"
            want, scale = _reference("linear", [x, w, b], **kw)
            _within(got, want, scale, x_shape[-1], what)
            _composite_close(got, em.linear(x, w, b, **kw), x_shape[-1], scale, what)


@pytest.mark.no_device
def test_autograd_through_conv2d_and_linear_runs_the_native_kernels(no_claimed_op_falls_back: Any) -> None:
    """A conv + relu + linear loss: every gradient equals ember-cpu's (float32), computed with the
    conv kernels (forward, input and weight gradients) on the device."""
    rng = np.random.default_rng(6)
    fake = no_claimed_op_falls_back
    values = {"x": rng.normal(0, 1, (2, 3, 6, 6)), "w": rng.normal(0, 0.5, (4, 3, 3, 3)), "b": rng.normal(0, 1, 4),
              "lw": rng.normal(0, 0.5, (5, 4 * 36)), "lb": rng.normal(0, 1, 5)}
    grads = {}
    for device in ("cpu", "cuda:0"):
        leaves = {k: em.asarray(v).astype("float32").to_device(device) for k, v in values.items()}
        for t in leaves.values():
            t.requires_grad_(True)
        fake.launches.clear()
        h = em.conv2d(leaves["x"], leaves["w"], leaves["b"], padding=1, activation="relu")
        y = em.linear(h.reshape((2, -1)), leaves["lw"], leaves["lb"])
        em.sum(y * y).backward()
        grads[device] = {k: _f64(t.grad) for k, t in leaves.items()}
        if device != "cpu":
            for kernel in ("im2col", "col2im"):
                assert _ran(fake, f"eg_conv_{kernel}_float32"), f"backward did not run eg_conv_{kernel}"
    for k in values:
        np.testing.assert_allclose(grads["cuda:0"][k], grads["cpu"][k], rtol=1e-4, atol=1e-4, err_msg=k)


# ---- on a GPU (skipped without one) -------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.x_shape}-{c.w_shape}-g{c.groups}")
def test_on_the_gpu_conv2d_and_its_gradients_match_the_reference(case: Conv) -> None:
    """The same checks on the first CUDA device: cuBLAS's GEMMs (TF32 off) and the kernels compiled by nvcc."""
    rng = np.random.default_rng(7)
    with em.fallback_policy("error"):
        for dtype in _claimed("conv2d"):
            _check_conv2d(None, case, dtype, rng, True, True)
            _check_gradients(None, case, dtype, rng)


def test_on_the_gpu_a_large_convolution_matches_ember_cpu() -> None:
    """The benchmark's shape (8 x 64 x 56 x 56 -> 64, 3x3, padding 1) in float32 and float16, forward and both
    gradients, against the float64 reference."""
    rng = np.random.default_rng(8)
    with em.fallback_policy("error"):
        for dtype in ("float32", "float16"):
            c = Conv((8, 64, 56, 56), (64, 64, 3, 3), padding=1)
            _check_conv2d(None, c, dtype, rng, True, True)
            _check_gradients(None, c, dtype, rng)

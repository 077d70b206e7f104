"""Neural-network ops: linear, pooling, softmax, losses, batch, layer and group norm, conv2d's fused activation,
optimizer updates; the gradient helper ops (conv2d_input_grad, max_pool2d_grad, nll_loss_grad,
batch_norm_input_grad ...) are checked through level 3, as gradients of their ops."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember_conformance.samples.base import Arr, Sample, rng_for, typical
from ember_core.errors import ShapeError


def _x(rng: Any, shape: tuple[int, ...], dtype: str, layout: str = "contiguous") -> Arr:
    return Arr(typical(rng, shape, dtype, -3.0, 3.0), dtype, layout)


def _ramp(shape: tuple[int, ...], dtype: str, step: int) -> Arr:
    """step, 2 step, 3 step, ... in memory order.  Rising: a pixel a pool wrongly reads from a later
    row exceeds every pixel of its window; falling: so does whatever lies past the input (zeros)."""
    return Arr(np.arange(1, np.prod(shape) + 1, dtype=np.float64).reshape(shape) * step, dtype)


def linear(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    return [Sample("2-d", (_x(rng, (4, 5), dtype), _x(rng, (3, 5), dtype), _x(rng, (3,), dtype))),
            Sample("batched-no-bias", (_x(rng, (2, 4, 5), dtype, "strided"), _x(rng, (3, 5), dtype))),
            Sample("relu", (_x(rng, (4, 5), dtype), _x(rng, (3, 5), dtype, "transposed"), _x(rng, (3,), dtype)),
                   {"activation": "relu"})]


def pool(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    x = _x(rng, (2, 3, 7, 8), dtype)
    if schema.name == "adaptive_avg_pool2d":
        return [Sample("halve", (x, (3, 4))), Sample("uneven", (_x(rng, (1, 2, 7, 5), dtype, "strided"), (3, 2))),
                Sample("global", (x, 1))]
    out = [Sample("kernel-2", (x, 2)), Sample("stride-1-padding-1", (x, 3), {"stride": 1, "padding": 1}),
           Sample("rectangular-strided", (_x(rng, (2, 3, 7, 8), dtype, "strided"), (2, 3)), {"stride": (2, 1)})]
    if schema.name == "max_pool2d":
        out += [Sample("dilation", (x, 2), {"dilation": 2}),
                Sample("ceil-mode", (x, 3), {"stride": 2, "ceil_mode": True}),
                # dilated windows past the bottom/right edge, which ember-xnnpack once served with
                # values read from the next row or past the input (issue 24)
                Sample("dilation-padding-past-the-edge", (_ramp((1, 1, 3, 4), dtype, 1), (1, 2)),
                       {"stride": 1, "padding": (0, 1), "dilation": (2, 1)}),
                Sample("dilation-ceil-mode-past-the-edge", (_ramp((1, 2, 3, 6), dtype, -1), 3),
                       {"padding": 1, "dilation": (1, 2), "ceil_mode": True})]
    else:
        out.append(Sample("exclude-padding", (x, 3), {"stride": 2, "padding": 1, "count_include_pad": False}))
    return out


def softmax(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)
    return [Sample("last-axis", (_x(rng, (4, 6), dtype),)), Sample("axis-0", (_x(rng, (4, 6), dtype, "transposed"), 0)),
            Sample("large-values", (Arr(typical(rng, (3, 5), dtype, 50.0, 80.0), dtype),))]


def nll_loss(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    from ember_core.errors import DTypeError, IndexOutOfRangeError, ShapeError

    rng = rng_for(schema.name, dtype)
    log_probs = Arr(typical(rng, (6, 4), dtype, -4.0, 0.0), dtype)  # any values: the op does not normalise
    target = Arr(np.array([0, 3, 1, -100, 2, 2]), "int64")
    weight = Arr(typical(rng, (4,), dtype, 0.5, 2.0), dtype)
    out = [Sample("mean", (log_probs, target)),
           Sample("sum-weighted", (log_probs, target, weight), {"reduction": "sum"}),
           Sample("per-row-smoothed", (log_probs, target, weight), {"reduction": "none", "label_smoothing": 0.1}),
           Sample("ignore-a-class-int32", (Arr(typical(rng, (6, 4), dtype, -4.0, 0.0), dtype, "transposed"),
                                           Arr(np.array([1, 2, 1, 0, 3, 1]), "int32")), {"ignore_index": 1})]
    if level == 1:
        out += [Sample("error-target-out-of-range", (log_probs, Arr(np.array([0, 4, 1, 1, 2, 2]), "int64")),
                       error=IndexOutOfRangeError),
                Sample("error-float-target", (log_probs, Arr(np.zeros(6), "float32")), error=DTypeError),
                Sample("error-3-d-log-probs", (Arr(typical(rng, (2, 3, 4), dtype), dtype), target),
                       error=ShapeError)]
    return out


def batch_norm(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    """Judged by the normalized result; the statistics it writes by a sample of their own."""
    rng = rng_for(schema.name, dtype)

    def args(shape: tuple[int, ...], affine: bool = True, layout: str = "contiguous") -> tuple[Arr, ...]:
        c = shape[1]
        x = Arr(typical(rng, shape, dtype, -1.0, 3.0), dtype, layout)  # a mean away from 0
        stats = Arr(np.zeros((2, c)), dtype)  # an output: its contents are ignored
        if not affine:
            return x, stats
        return x, stats, Arr(typical(rng, (c,), dtype, 0.5, 1.5), dtype), _x(rng, (c,), dtype)

    out = [Sample("4-d-affine", args((2, 3, 4, 5)), {"eps": 1e-3}),
           Sample("2-d", args((6, 4), affine=False)),
           Sample("3-d-strided", args((3, 2, 7), layout="strided")),
           Sample("statistics-written", custom=_batch_norm_statistics(args((4, 3, 5))[0]),
                  code="stats = em.empty((2, 3), dtype=x.dtype); em.batch_norm_train(x, stats)  # vs mean, var")]
    if level == 1:
        x, stats = args((2, 3, 4), affine=False)
        out += [Sample("error-stats-shape", (x, Arr(np.zeros((3, 2)), dtype)), error=ShapeError),
                Sample("error-one-value-per-channel", (Arr(typical(rng, (1, 3, 1), dtype), dtype), stats),
                       error=ShapeError),
                Sample("error-negative-eps", (x, stats), {"eps": -1.0}, error=ValueError)]
    return out


def layer_norm(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)

    def x(shape: tuple[int, ...], layout: str = "contiguous") -> Arr:
        return Arr(typical(rng, shape, dtype, -1.0, 3.0), dtype, layout)  # rows with a mean away from 0

    out = [Sample("last-dim-affine", (x((3, 4, 6)), 6, _x(rng, (6,), dtype), _x(rng, (6,), dtype)), {"eps": 1e-3}),
           Sample("two-dims", (x((2, 3, 5)), (3, 5))),
           Sample("strided-weight-only", (x((4, 7), "strided"), (7,), _x(rng, (7,), dtype, "strided")))]
    if level == 1:
        out += [Sample("error-not-trailing", (x((2, 3)), (2,)), error=ShapeError),
                Sample("error-weight-shape", (x((2, 3)), 3, _x(rng, (2,), dtype)), error=ShapeError)]
    return out


def group_norm(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    rng = rng_for(schema.name, dtype)

    def x(shape: tuple[int, ...], layout: str = "contiguous") -> Arr:
        return Arr(typical(rng, shape, dtype, -1.0, 3.0), dtype, layout)  # groups with a mean away from 0

    out = [Sample("affine", (x((2, 6, 3, 4)), 3, _x(rng, (6,), dtype), _x(rng, (6,), dtype)), {"eps": 1e-3}),
           Sample("one-group-3d", (x((3, 4, 5)), 1)),
           Sample("group-per-channel-strided", (x((2, 4, 3, 2), "strided"), 4, _x(rng, (4,), dtype, "strided"))),
           Sample("no-positions", (x((5, 6)), 2, None, _x(rng, (6,), dtype)))]
    if level == 1:
        out += [Sample("error-groups-do-not-divide", (x((2, 6, 3)), 4), error=ValueError),
                Sample("error-weight-shape", (x((2, 6, 3)), 3, _x(rng, (3,), dtype)), error=ShapeError)]
    return out


def _batch_norm_statistics(x: Arr) -> Any:
    def check(device: str, dtype: str) -> str | None:
        import ember_core as em
        from ember_conformance.layouts import place, to_numpy
        from ember_conformance.references import batch_norm_statistics
        from ember_conformance.tolerances import compare

        stats = em.empty((2, x.values.shape[1]), dtype=getattr(em, dtype), device=device)
        em.ops.call("batch_norm_train", place(x.values, dtype, x.layout, device), stats)
        expected = batch_norm_statistics(x.values.astype(np.float64))
        cmp = compare(to_numpy(stats), expected, dtype, magnitude=np.abs(x.values).max() ** np.array([[1.0], [2.0]]))
        return None if cmp.ok else f"the statistics written differ from (mean, variance): {cmp.message}"

    return check


def conv2d_fused(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    from ember_conformance.samples.linalg import conv2d

    out = conv2d(schema, dtype, device, level)
    base = out[0]
    out.append(Sample("fused-relu", base.args, {"activation": "relu"}))
    return out


def through_gradients(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    from ember_conformance.execute import SkipCase

    def check(device: str, dtype: str) -> str | None:
        raise SkipCase(f"{schema.name} is a gradient helper: level 3 checks it as part of the gradients of its op")

    return [Sample("via-level-3", custom=check)]


def adam_step(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    """Judged by the parameter it returns (updated in place; the state's updates feed into it)."""
    rng = rng_for(schema.name, dtype)
    second_moment = Arr(np.abs(typical(rng, (4, 5), dtype, -3.0, 3.0)), dtype)

    def tensors(layout: str = "contiguous") -> tuple[Arr, ...]:
        return _x(rng, (4, 5), dtype, layout), _x(rng, (4, 5), dtype), _x(rng, (4, 5), dtype), second_moment

    hyper = {"lr": 0.05, "beta1": 0.9, "beta2": 0.999, "eps": 1e-3, "step": 3}
    out = [Sample("adam", tensors(), hyper), Sample("first-step", tensors(), {**hyper, "step": 1}),
           Sample("weight-decay", tensors(), {**hyper, "weight_decay": 0.1}),
           Sample("adamw", tensors(), {**hyper, "weight_decay": 0.1, "decoupled": True}),
           Sample("maximize", tensors(), {**hyper, "maximize": True}),
           Sample("strided-param", tensors("strided"), hyper)]
    if level == 1:
        p, g, m, v = tensors()
        out += [Sample("error-state-shape", (p, g, _x(rng, (5, 4), dtype), v), hyper, error=ShapeError),
                Sample("error-step-0", (p, g, m, v), {**hyper, "step": 0}, error=ValueError)]
    return out


def sgd_step(schema: Any, dtype: str, device: str, level: int) -> list[Sample]:
    """Judged by the parameter it returns (updated in place, through its momentum buffer)."""
    rng = rng_for(schema.name, dtype)

    def tensors(layout: str = "contiguous") -> tuple[Arr, ...]:
        return _x(rng, (4, 5), dtype, layout), _x(rng, (4, 5), dtype), _x(rng, (4, 5), dtype)

    hyper = {"lr": 0.05, "momentum": 0.9}
    out = [Sample("momentum", tensors(), hyper), Sample("first-step", tensors(), {**hyper, "first_step": True}),
           Sample("dampening-weight-decay", tensors(), {**hyper, "dampening": 0.3, "weight_decay": 0.1}),
           Sample("nesterov", tensors(), {**hyper, "nesterov": True, "weight_decay": 0.1}),
           Sample("maximize", tensors(), {**hyper, "maximize": True}),
           Sample("strided-param", tensors("strided"), hyper)]
    if level == 1:
        p, g, b = tensors()
        out += [Sample("error-buffer-shape", (p, g, _x(rng, (5, 4), dtype)), hyper, error=ShapeError),
                Sample("error-no-momentum", (p, g, b), {**hyper, "momentum": 0.0}, error=ValueError)]
    return out

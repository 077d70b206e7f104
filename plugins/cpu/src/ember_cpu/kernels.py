"""ember-cpu's kernel table: op name -> a Python function that builds ``ember_tensor``
descriptors and calls one C entry point.  Every function follows the core's calling convention
``kernel(out, *inputs, **attrs)``.

Descriptors carry at most EMBER_MAX_NDIM dims, so operands are first coalesced: adjacent dims
that are contiguous in every operand merge, which also shortens the C loops' outer iteration.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ember_core.errors import IndexOutOfRangeError, KernelError, ShapeError
from ember_core.ops.optim_composites import adam_coefficients
from ember_core.views import coalesce
from ember_cpu._native import ffi, lib

_SIZE = ffi.sizeof("ember_tensor")
_MAX_NDIM = lib.EMBER_MAX_NDIM
_FAILURES = {
    lib.EMBER_ERR_INDEX: IndexOutOfRangeError,
    lib.EMBER_ERR_OUT_OF_MEMORY: MemoryError,
}


def _check(status: int, op: str) -> None:
    if status:
        error = _FAILURES.get(status, KernelError)
        raise error(f"ember-cpu {op}: kernel status {status}"
                    + ("" if error is not KernelError else "; a backend bug: please report the call"))


def _desc(t: Any, shape: list[int] | tuple[int, ...], strides: list[int] | tuple[int, ...]) -> Any:
    ndim = len(shape)
    if ndim > _MAX_NDIM:
        raise ShapeError(f"ember-cpu handles at most {_MAX_NDIM} non-mergeable dimensions, this layout has {ndim}; "
                         f"make the tensor contiguous first")
    return ffi.new("ember_tensor *", (_SIZE, t._dtype.code, ndim, 0, t._storage.handle, t._offset, shape, strides))


def _same_shape_call(name: str, entry: Callable[..., int], lead: tuple[Any, ...], *tensors: Any) -> None:
    """Call an elementwise entry point on operands sharing one shape.  Layouts with more
    non-mergeable dims than a descriptor holds are split along their first dim (rare: it takes
    over 16 dims that no two operands can merge)."""
    shape, strides = coalesce(tensors[0]._shape, *(t._strides for t in tensors))
    if len(shape) <= _MAX_NDIM:
        _check(entry(*lead, *(_desc(t, shape, st) for t, st in zip(tensors, strides))), name)
        return
    for i in range(tensors[0]._shape[0]):
        _same_shape_call(name, entry, lead, *(t[i] for t in tensors))


def _own_desc(t: Any) -> Any:
    """The descriptor of a tensor's own layout, built once per tensor (~1.3 us each): the weights,
    gradients and optimizer state that every training step passes again reuse theirs."""
    d = t._native
    if d is None:
        d = t._native = _desc(t, t._shape, t._strides)
    return d


def desc(t: Any) -> Any:
    """A descriptor of one tensor as it is (its own coalescing)."""
    shape, (strides,) = coalesce(t._shape, t._strides)
    return _desc(t, shape, strides)


# ---- elementwise -------------------------------------------------------------------------------

def _flat_step(t: Any) -> int:
    """How an input of an elementwise op runs over a contiguous output: 1 contiguous, 0 one repeated
    element (all strides 0: x * 2.0, where(m, g, 0.0)), -1 neither (the strided entry point)."""
    return 1 if t._contig else 0 if not any(t._strides) else -1


def _direct_entry(function: str, code: int) -> tuple[int, int]:
    """A kernel's ``direct_entry`` (ember_core.hotpath): the address of its flat C entry point, whose
    signature is ember.h's ember_unary_flat_fn / ember_binary_flat_fn, and the op code it takes."""
    return int(ffi.cast("uintptr_t", ffi.addressof(lib, function))), code


def _unary(name: str, code: int) -> Callable[..., None]:
    contig, strided = lib.ember_cpu_unary_contig, lib.ember_cpu_unary

    def kernel(out: Any, x: Any) -> None:
        if x._contig:
            status = contig(code, x._dtype.code, out._numel, out._storage.handle, out._offset,
                            x._storage.handle, x._offset)
            if status:
                _check(status, name)
        else:
            _same_shape_call(name, strided, (code,), out, x)

    kernel.direct_entry = _direct_entry("ember_cpu_unary_contig", code)  # type: ignore[attr-defined]
    return kernel


def _binary(name: str, code: int) -> Callable[..., None]:
    flat, strided = lib.ember_cpu_binary_flat, lib.ember_cpu_binary

    def kernel(out: Any, a: Any, b: Any) -> None:
        # _flat_step of both, inlined for the contiguous case: the per-op hot path
        a_step = 1 if a._contig else _flat_step(a)
        b_step = 1 if b._contig else _flat_step(b)
        if a_step >= 0 and b_step >= 0:
            status = flat(code, a._dtype.code, out._numel, out._storage.handle, out._offset,
                          a._storage.handle, a._offset, a_step, b._storage.handle, b._offset, b_step)
            if status:
                _check(status, name)
        else:
            _same_shape_call(name, strided, (code,), out, a, b)

    kernel.direct_entry = _direct_entry("ember_cpu_binary_flat", code)  # type: ignore[attr-defined]
    return kernel


def copy(out: Any, x: Any) -> None:
    _same_shape_call("copy", lib.ember_cpu_copy, (), out, x)


def full(out: Any, *, value: Any) -> None:
    value = complex(value) if isinstance(value, complex) else value
    re_, im = (value.real, value.imag) if isinstance(value, complex) else (float(value), 0.0)
    ival = int(value) if isinstance(value, (bool, int)) else 0
    _check(lib.ember_cpu_fill(desc(out), re_, im, ival), "full")


def where(out: Any, cond: Any, a: Any, b: Any) -> None:
    steps = _flat_step(cond), _flat_step(a), _flat_step(b)
    if min(steps) >= 0:
        status = lib.ember_cpu_where_flat(out._dtype.code, out._numel, out._storage.handle, out._offset,
                                          cond._storage.handle, cond._offset, steps[0], a._storage.handle,
                                          a._offset, steps[1], b._storage.handle, b._offset, steps[2])
        if status:
            _check(status, "where")
    else:
        _same_shape_call("where", lib.ember_cpu_where, (), out, cond, a, b)


# ---- reductions, scans, sorting, matmul ---------------------------------------------------------

def _reduce(name: str, code: int) -> Callable[..., None]:
    def kernel(out: Any, x: Any, *, axes: tuple[int, ...]) -> None:
        _check(lib.ember_cpu_reduce(code, _own_desc(out), _own_desc(x), len(axes)), name)

    return kernel


def _last_dim(name: str, entry: Callable[..., int], *codes: int) -> Callable[..., None]:
    def kernel(out: Any, x: Any) -> None:
        _check(entry(*codes, _own_desc(out), _own_desc(x)), name)

    return kernel


def _sort(name: str, entry: Callable[..., int]) -> Callable[..., None]:
    def kernel(out: Any, x: Any, *, descending: bool) -> None:
        _check(entry(_own_desc(out), _own_desc(x), int(descending)), name)

    return kernel


def matmul(out: Any, a: Any, b: Any) -> None:
    _check(lib.ember_cpu_matmul(_own_desc(out), _own_desc(a), _own_desc(b)), "matmul")


def linear(out: Any, x: Any, weight: Any, bias: Any, *, activation: str | None) -> None:
    _check(lib.ember_cpu_linear(*_all_desc(out, x, weight), _optional_desc(bias), int(activation == "relu")),
           "linear")


_CONV_DTYPES = frozenset({"float32", "float64"})


def _winograd_takes(weight: Any, stride: tuple[int, int], dilation: tuple[int, int], groups: int,
                    *tensors: Any) -> bool:
    """conv.c's Winograd kernel: 3x3, stride 1, dilation 1, groups 1, float32/float64, every tensor
    (None: an absent bias) contiguous and non-empty."""
    present = [t for t in tensors if t is not None]
    return (weight._shape[2:] == (3, 3) and tuple(stride) == (1, 1) and tuple(dilation) == (1, 1) and groups == 1
            and weight._dtype.name in _CONV_DTYPES and all(t._contig for t in (weight, *present))
            and all(t._numel for t in present))


def _window(kernel_size: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int],
            dilation: tuple[int, int] = (1, 1)) -> Any:
    return ffi.new("ember_cpu_window *", (*kernel_size, *stride, *padding, *dilation))


def _depthwise(x_shape: tuple[int, ...], weight: Any, groups: int, *tensors: Any) -> bool:
    """conv_depthwise.c's kernels: one group per input channel (at least two), float32/float64,
    every tensor (None: an absent bias) contiguous."""
    return (groups > 1 and groups == x_shape[1] and weight._shape[1] == 1 and weight._dtype.name in _CONV_DTYPES
            and all(t._contig for t in (weight, *tensors) if t is not None))


def conv2d(out: Any, x: Any, weight: Any, bias: Any, *, stride: tuple[int, int], padding: tuple[int, int],
           dilation: tuple[int, int], groups: int, activation: str | None) -> Any:
    """3x3 kernels at stride 1, dilation 1, groups 1 run Winograd F(2x2, 3x3) (conv.c), depthwise
    convolutions conv_depthwise.c, every other geometry im2col + GEMM (conv_gemm.c)."""
    if activation not in (None, "relu"):
        return NotImplemented
    if _depthwise(x._shape, weight, groups, out, x, bias):
        _check(lib.ember_cpu_conv2d_depthwise(*_all_desc(out, x, weight), _optional_desc(bias),
                                              _window(weight._shape[2:], stride, padding, dilation),
                                              int(activation == "relu")), "conv2d")
        return None
    if not _winograd_takes(weight, stride, dilation, groups, out, x, bias):
        if not x._shape[1]:
            return NotImplemented  # no input channel: the composite's empty sums
        _check(lib.ember_cpu_conv2d_gemm(*_all_desc(out, x, weight), _optional_desc(bias),
                                         _window(weight._shape[2:], stride, padding, dilation), groups,
                                         int(activation == "relu")), "conv2d")
        return None
    n, c, h, w = x._shape
    o = weight._shape[0]
    ph, pw = padding
    expected = (n, o, h + 2 * ph - 2, w + 2 * pw - 2)
    if weight._shape[1] != c or out._shape != expected or (bias is not None and bias._shape != (o,)):
        raise ShapeError(f"ember-cpu conv2d: x {x._shape}, weight {weight._shape}, bias "
                         f"{None if bias is None else bias._shape} and out {out._shape} do not fit (a core bug)")
    _check(lib.ember_cpu_conv2d_3x3(*_all_desc(out, x, weight), _optional_desc(bias), ph, pw,
                                    int(activation == "relu")), "conv2d")
    return None


def conv2d_input_grad(out: Any, grad_output: Any, weight: Any, *, stride: tuple[int, int],
                      padding: tuple[int, int], dilation: tuple[int, int], groups: int) -> Any:
    """The 3x3 stride-1 case (padding 0-2) as the Winograd kernel on the transposed, flipped weight,
    read in place (the core's composite copied that weight first), and depthwise convolutions.
    Everything else declines."""
    if _depthwise(out._shape, weight, groups, out, grad_output):
        _check(lib.ember_cpu_conv2d_depthwise_input_grad(*_all_desc(out, grad_output, weight),
                                                         _window(weight._shape[2:], stride, padding, dilation)),
               "conv2d_input_grad")
        return None
    if not all(0 <= p <= 2 for p in padding) or not _winograd_takes(weight, stride, dilation, groups, out,
                                                                     grad_output):
        return NotImplemented
    (n, c, h, w), (ph, pw) = out._shape, padding
    if weight._shape[1] != c or grad_output._shape != (n, weight._shape[0], h + 2 * ph - 2, w + 2 * pw - 2):
        raise ShapeError(f"ember-cpu conv2d_input_grad: grad_output {grad_output._shape}, weight {weight._shape} "
                         f"and out {out._shape} do not fit (a core bug)")
    _check(lib.ember_cpu_conv2d_3x3_input_grad(*_all_desc(out, grad_output, weight), ph, pw), "conv2d_input_grad")
    return None


def conv2d_weight_grad(out: Any, x: Any, grad_output: Any, *, stride: tuple[int, int], padding: tuple[int, int],
                       dilation: tuple[int, int], groups: int) -> None:
    window = _window(out._shape[2:], stride, padding, dilation)
    if _depthwise(x._shape, out, groups):
        _check(lib.ember_cpu_conv2d_depthwise_weight_grad(*_all_desc(out, x, grad_output), window),
               "conv2d_weight_grad")
        return
    _check(lib.ember_cpu_conv2d_weight_grad(*_all_desc(out, x, grad_output), window, groups),
           "conv2d_weight_grad")


def _pool(name: str, entry: Callable[..., int], averaging: bool) -> Callable[..., None]:
    """max_pool2d(_grad) (inputs then the window) and avg_pool2d(_grad) (then count_include_pad);
    ceil_mode only shaped out, which the core computed."""
    def kernel(out: Any, *inputs: Any, kernel_size: tuple[int, int], stride: tuple[int, int],
               padding: tuple[int, int], ceil_mode: bool, dilation: tuple[int, int] = (1, 1),
               count_include_pad: bool = False) -> None:
        window = _window(kernel_size, stride, padding, dilation)
        _check(entry(*_all_desc(out, *inputs), window, *((int(count_include_pad),) if averaging else ())), name)

    return kernel


def _softmax(name: str, log_out: int) -> Callable[..., None]:
    def kernel(out: Any, x: Any, *, axis: int) -> None:
        _check(lib.ember_cpu_softmax(log_out, *_all_desc(out, x), axis), name)

    return kernel


def batch_norm_train(out: Any, stats: Any, x: Any, weight: Any, bias: Any, *, eps: float) -> None:
    _check(lib.ember_cpu_batch_norm_train(*_all_desc(out, stats, x), _optional_desc(weight), _optional_desc(bias),
                                          eps), "batch_norm_train")


def batch_norm_backward_reduce(out: Any, grad_output: Any, x: Any, stats: Any, *, eps: float) -> None:
    _check(lib.ember_cpu_batch_norm_backward_reduce(*_all_desc(out, grad_output, x, stats), eps),
           "batch_norm_backward_reduce")


def batch_norm_input_grad(out: Any, grad_output: Any, x: Any, stats: Any, sums: Any, weight: Any, *,
                          eps: float) -> None:
    _check(lib.ember_cpu_batch_norm_input_grad(*_all_desc(out, grad_output, x, stats, sums), _optional_desc(weight),
                                               eps), "batch_norm_input_grad")


def layer_norm(out: Any, x: Any, weight: Any, bias: Any, *, eps: float) -> None:
    _check(lib.ember_cpu_layer_norm(*_all_desc(out, x), _optional_desc(weight), _optional_desc(bias), eps),
           "layer_norm")


def layer_norm_input_grad(out: Any, affine: Any, grad_output: Any, x: Any, weight: Any, *, eps: float) -> None:
    _check(lib.ember_cpu_layer_norm_input_grad(_own_desc(out), _optional_desc(affine), *_all_desc(grad_output, x),
                                               _optional_desc(weight), eps), "layer_norm_input_grad")


def layer_norm_affine_grad(out: Any, grad_output: Any, x: Any, *, eps: float) -> None:
    _check(lib.ember_cpu_layer_norm_affine_grad(*_all_desc(out, grad_output, x), eps), "layer_norm_affine_grad")


def group_norm(out: Any, x: Any, weight: Any, bias: Any, *, num_groups: int, eps: float) -> None:
    _check(lib.ember_cpu_group_norm(*_all_desc(out, x), _optional_desc(weight), _optional_desc(bias), num_groups,
                                    eps), "group_norm")


def group_norm_input_grad(out: Any, affine: Any, grad_output: Any, x: Any, weight: Any, *, num_groups: int,
                          eps: float) -> None:
    _check(lib.ember_cpu_group_norm_input_grad(_own_desc(out), _optional_desc(affine), *_all_desc(grad_output, x),
                                               _optional_desc(weight), num_groups, eps), "group_norm_input_grad")


def group_norm_affine_grad(out: Any, grad_output: Any, x: Any, *, num_groups: int, eps: float) -> None:
    _check(lib.ember_cpu_group_norm_affine_grad(*_all_desc(out, grad_output, x), num_groups, eps),
           "group_norm_affine_grad")


_REDUCTIONS = {"none": lib.EMBER_CPU_REDUCTION_NONE, "mean": lib.EMBER_CPU_REDUCTION_MEAN,
               "sum": lib.EMBER_CPU_REDUCTION_SUM}


def _nll(name: str, entry: Callable[..., int]) -> Callable[..., None]:
    """nll_loss (first = log_probs) and nll_loss_grad (first = grad_output)."""
    def kernel(out: Any, first: Any, target: Any, weight: Any, *, ignore_index: int, reduction: str,
               label_smoothing: float) -> None:
        _check(entry(*_all_desc(out, first, target), _optional_desc(weight), ignore_index, _REDUCTIONS[reduction],
                     label_smoothing), name)

    return kernel


def _all_desc(*tensors: Any) -> list[Any]:
    return [_own_desc(t) for t in tensors]


def _optional_desc(t: Any) -> Any:
    """An optional tensor (a bias, a class weight, a second output): its descriptor, or NULL when absent."""
    return ffi.NULL if t is None else _own_desc(t)


def take(out: Any, x: Any, idx: Any) -> None:
    _check(lib.ember_cpu_take(*_all_desc(out, x, idx)), "take")


def index_put(dst: Any, idx: Any, values: Any, *, accumulate: bool) -> None:
    _check(lib.ember_cpu_put(*_all_desc(dst, idx, values), int(accumulate)), "index_put")


def nonzero(out: Any, x: Any) -> None:
    _check(lib.ember_cpu_nonzero(*_all_desc(out, x)), "nonzero")


def searchsorted(out: Any, x1: Any, x2: Any, *, right: bool) -> None:
    _check(lib.ember_cpu_searchsorted(*_all_desc(out, x1, x2), int(right)), "searchsorted")


def _random(name: str, kind: int, first: str, second: str) -> Callable[..., None]:
    def kernel(out: Any, *, seed: int, offset: int, **params: Any) -> None:
        a, b = params[first], params[second]
        ints = out._dtype.kind in "biu"
        _check(lib.ember_cpu_random(kind, desc(out), seed, offset, 0.0 if ints else a, 0.0 if ints else b,
                                    a if ints else 0, b if ints else 0), name)

    return kernel


_DECAY_MODES = {(False, False): lib.EMBER_CPU_DECAY_NONE, (True, False): lib.EMBER_CPU_DECAY_L2,
                (True, True): lib.EMBER_CPU_DECAY_DECOUPLED}


_STRUCTS: dict[tuple[Any, ...], Any] = {}


def _hyperparameters(ctype: str, key: tuple[Any, ...], fields: Callable[[], dict[str, Any]]) -> Any:
    """The update's hyperparameter struct, made once per setting: an optimizer passes the same
    one for every parameter of a group (the core has validated the values and their types)."""
    struct = _STRUCTS.get(key)
    if struct is None:
        if len(_STRUCTS) >= 64:  # Adam's step count makes a new setting every step
            _STRUCTS.clear()
        struct = _STRUCTS[key] = ffi.new(ctype, fields())
    return struct


def adam_step(param: Any, grad: Any, exp_avg: Any, exp_avg_sq: Any, *, lr: float, beta1: float, beta2: float,
              eps: float, step: int, weight_decay: float, decoupled: bool, maximize: bool) -> None:
    """With the composite's own coefficients (ember_core.ops.optim_composites.adam_coefficients)."""
    def fields() -> dict[str, Any]:
        coefficients = adam_coefficients(lr=lr, beta1=beta1, beta2=beta2, eps=eps, step=step,
                                          weight_decay=weight_decay, decoupled=decoupled)
        decay_mode = _DECAY_MODES[bool(weight_decay), bool(weight_decay) and decoupled]
        return {**coefficients._asdict(), "decay_mode": decay_mode, "maximize": int(maximize)}

    native = _hyperparameters("ember_cpu_adam *", ("adam", lr, beta1, beta2, eps, step, weight_decay, decoupled,
                                                   maximize), fields)
    _check(lib.ember_cpu_adam_step(*_all_desc(param, grad, exp_avg, exp_avg_sq), native), "adam_step")


def sgd_step(param: Any, grad: Any, momentum_buffer: Any, *, lr: float, momentum: float, dampening: float,
             weight_decay: float, nesterov: bool, maximize: bool, first_step: bool) -> None:
    """1 - dampening computed here in double precision, as the composite computes it."""
    def fields() -> dict[str, Any]:
        return {"lr": lr, "momentum": momentum, "one_minus_dampening": 1.0 - dampening,
                "weight_decay": weight_decay, "nesterov": int(nesterov), "maximize": int(maximize),
                "first_step": int(first_step)}

    hyper = _hyperparameters("ember_cpu_sgd *", ("sgd", lr, momentum, dampening, weight_decay, nesterov, maximize,
                                                 first_step), fields)
    _check(lib.ember_cpu_sgd_step(*_all_desc(param, grad, momentum_buffer), hyper), "sgd_step")


def _elementwise_names(section: str) -> list[str]:
    text = (Path(__file__).resolve().parent / "kernels.toml").read_text()
    return re.findall(rf"^\[{section}\.(\w+)\]", text, re.M)


KERNELS: dict[str, Callable[..., None]] = {
    **{n: _unary(n, getattr(lib, f"EMBER_CPU_UNARY_{n.upper()}")) for n in _elementwise_names("unary")},
    **{n: _binary(n, getattr(lib, f"EMBER_CPU_BINARY_{n.upper()}")) for n in _elementwise_names("binary")},
    "copy": copy,
    "astype": copy,
    "full": full,
    "where": where,
    "sum": _reduce("sum", lib.EMBER_CPU_REDUCE_SUM),
    "prod": _reduce("prod", lib.EMBER_CPU_REDUCE_PROD),
    "max": _reduce("max", lib.EMBER_CPU_REDUCE_MAX),
    "min": _reduce("min", lib.EMBER_CPU_REDUCE_MIN),
    "any": _reduce("any", lib.EMBER_CPU_REDUCE_ANY),
    "all": _reduce("all", lib.EMBER_CPU_REDUCE_ALL),
    "argmax": _last_dim("argmax", lib.ember_cpu_arg_reduce, lib.EMBER_CPU_ARGMAX),
    "argmin": _last_dim("argmin", lib.ember_cpu_arg_reduce, lib.EMBER_CPU_ARGMIN),
    "cumulative_sum": _last_dim("cumulative_sum", lib.ember_cpu_scan, lib.EMBER_CPU_SCAN_SUM),
    "cumulative_prod": _last_dim("cumulative_prod", lib.ember_cpu_scan, lib.EMBER_CPU_SCAN_PROD),
    "sort": _sort("sort", lib.ember_cpu_sort),
    "argsort": _sort("argsort", lib.ember_cpu_argsort),
    "matmul": matmul,
    "linear": linear,
    "conv2d": conv2d, "conv2d_input_grad": conv2d_input_grad,
    "conv2d_weight_grad": conv2d_weight_grad,
    "max_pool2d": _pool("max_pool2d", lib.ember_cpu_max_pool2d, averaging=False),
    "max_pool2d_grad": _pool("max_pool2d_grad", lib.ember_cpu_max_pool2d_grad, averaging=False),
    "avg_pool2d": _pool("avg_pool2d", lib.ember_cpu_avg_pool2d, averaging=True),
    "avg_pool2d_grad": _pool("avg_pool2d_grad", lib.ember_cpu_avg_pool2d_grad, averaging=True),
    "softmax": _softmax("softmax", 0),
    "log_softmax": _softmax("log_softmax", 1),
    "batch_norm_train": batch_norm_train,
    "batch_norm_backward_reduce": batch_norm_backward_reduce,
    "batch_norm_input_grad": batch_norm_input_grad,
    "layer_norm": layer_norm,
    "layer_norm_input_grad": layer_norm_input_grad,
    "layer_norm_affine_grad": layer_norm_affine_grad,
    "group_norm": group_norm,
    "group_norm_input_grad": group_norm_input_grad,
    "group_norm_affine_grad": group_norm_affine_grad,
    "nll_loss": _nll("nll_loss", lib.ember_cpu_nll_loss),
    "nll_loss_grad": _nll("nll_loss_grad", lib.ember_cpu_nll_loss_grad),
    "take": take,
    "index_put": index_put,
    "adam_step": adam_step,
    "sgd_step": sgd_step,
    "nonzero": nonzero,
    "searchsorted": searchsorted,
    "random_uniform": _random("random_uniform", lib.EMBER_CPU_RANDOM_UNIFORM, "low", "high"),
    "random_normal": _random("random_normal", lib.EMBER_CPU_RANDOM_NORMAL, "mean", "std"),
    "random_integers": _random("random_integers", lib.EMBER_CPU_RANDOM_INTEGERS, "low", "high"),
}

"""Derivative formulas from the registry, and the recording wrapper every registry op runs through.

An op's TOML entry declares, per tensor parameter, its vector-Jacobian product as an expression in
ember ops (``derivatives = { x1 = "grad * conj(x2)", x2 = "grad * conj(x1)" }``).  Names in scope:
every registered op, the op's arguments by parameter name, ``grad`` (the gradient of the result),
``result``, the op's ``derivative_terms`` (shared work, evaluated once per backward, in order,
when a needed formula uses it; a term named ``grad`` rewrites the gradient), ``wanted`` (the
parameters given a gradient in this backward, so that a term can compute several at once, or
only those asked for), and the helpers below.  A
parameter marked ``"non_differentiable"`` carries no gradient.  The engine sums each gradient to
its input's shape and casts it to its dtype, so formulas do not.  Complex numbers follow the
conjugate Wirtinger convention (PyTorch's): for a holomorphic f the formula is ``grad * conj(f'(z))``.

Because formulas are ember ops, they are recorded themselves when ``create_graph=True``, which is
what makes Hessian-vector products work.  A composite op without a formula is differentiated
through its decomposition.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from ember_core import views
from ember_core.autograd.grad_mode import MODE, no_grad
from ember_core.autograd.graph import Node, attach, edge_of, meta_of
from ember_core.dtypes import GROUPS
from ember_core.errors import RegistryError
from ember_core.ops.registry import OpSchema
from ember_core.tensor import Tensor

NON_DIFFERENTIABLE = "non_differentiable"


# ---- helpers available to formulas --------------------------------------------------------------

def conj(t: Any) -> Any:
    """The conjugate; free (the value itself) for real dtypes and real Python scalars."""
    if not isinstance(t, Tensor):
        return t.conjugate() if isinstance(t, complex) else t
    if t._dtype.kind != "c":
        return t
    from ember_core.ops import namespace as ops

    return ops.conj(t)


def sum_to(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum t over the dims along which ``shape`` was broadcast to t's shape."""
    from ember_core.ops import namespace as ops

    lead = t.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and t._shape[lead + i] != 1)
    if axes:
        t = ops.sum(t, axis=axes, keepdims=True)
    return t.reshape(shape) if t._shape != shape else t


def zeros_like(t: Tensor) -> Tensor:
    from ember_core.creation import zeros_like as make

    return make(t)


def ones_like(t: Tensor) -> Tensor:
    from ember_core.creation import ones_like as make

    return make(t)


def inverse_permutation(axes: Any, ndim: int) -> tuple[int, ...]:
    axes = [a % ndim for a in axes] if ndim else []
    return tuple(axes.index(i) for i in range(ndim))


def unsqueeze_reduced(g: Tensor, x: Tensor, axis: Any, keepdims: bool) -> Tensor:
    """A reduction's gradient (or result) reshaped so it broadcasts against the input x."""
    if keepdims or x.ndim == g.ndim:
        return g
    from ember_core.views import normalize_axes

    axes = normalize_axes(axis, x.ndim)
    return g.reshape(tuple(1 if i in axes else n for i, n in enumerate(x._shape)))


def _ops() -> Any:
    from ember_core.ops import namespace

    return namespace


def arange(*args: Any, **kwargs: Any) -> Tensor:
    from ember_core.creation import arange as make

    return make(*args, **kwargs)


def sgn(x: Tensor) -> Tensor:
    """sign for real x; x / |x| (0 at 0) for complex x: the derivative of abs."""
    ops = _ops()
    if x._dtype.kind != "c":
        return ops.sign(x)
    magnitude = ops.abs(x)
    return ops.where(magnitude == 0, zeros_like(x), x / ops.where(magnitude == 0, ones_like(magnitude), magnitude))


def sgn_grad(grad: Tensor, x: Tensor, result: Tensor) -> Tensor:
    """sign: flat for real x; for complex x, z/|z| turns with the phase only, so the gradient is
    the component of grad along i * sign(z), divided by |z| (0 at z = 0)."""
    if x._dtype.kind != "c":
        return zeros_like(grad)
    ops = _ops()
    magnitude = ops.abs(x)
    safe = ops.where(magnitude == 0, ones_like(magnitude), magnitude)
    turn = times_i(ops.imag(ops.conj(result) * grad)) * result / safe
    return ops.where(magnitude == 0, zeros_like(turn), turn)


def times_i(g: Tensor) -> Tensor:
    """i * g as a complex tensor (the gradient of imag)."""
    from ember_core import dtypes as dt

    complex_dtype = dt.complex128 if g._dtype in (dt.float64, dt.complex128) else dt.complex64
    return g.astype(complex_dtype) * 1j


def tie_share(x1: Tensor, x2: Tensor) -> Tensor:
    """1 where x1 wins a maximum, 1/2 on ties (the gradient is split, as in PyTorch), else 0."""
    ops = _ops()
    return ops.where(x1 > x2, ones_like(x1), ops.where(x1 == x2, ones_like(x1) * 0.5, zeros_like(x1)))


def pow_base_grad(grad: Tensor, x1: Tensor, x2: Tensor) -> Tensor:
    ops = _ops()
    g = grad * conj(x2 * ops.pow(x1, x2 - 1))
    return ops.where(x2 == 0, zeros_like(g), g)  # d(x^0)/dx = 0, also at x = 0


def pow_exponent_grad(grad: Tensor, x1: Tensor, result: Tensor) -> Tensor:
    ops = _ops()
    safe = ops.where(x1 == 0, ones_like(x1), x1)  # 0^y: the limit of y -> x^y at x = 0 is flat
    g = grad * conj(result * ops.log(safe))
    return ops.where(x1 == 0, zeros_like(g), g)


def _to_last(x: Tensor, axis: Any) -> tuple[Tensor, tuple[int, ...], tuple[int, ...]]:
    """x with the reduced axes moved last and flattened into one: (x2d-ish, order, moved shape)."""
    from ember_core.views import normalize_axes

    axes = normalize_axes(axis, x.ndim)
    keep = tuple(i for i in range(x.ndim) if i not in axes)
    order = keep + axes
    moved = x.permute_dims(order) if x.ndim else x.reshape((1,))
    shape = moved._shape
    return moved.reshape((*shape[: len(keep)], math.prod(shape[len(keep):]))), order, shape  # (no -1: a kept 0)


def _from_last(t: Tensor, order: tuple[int, ...], shape: tuple[int, ...]) -> Tensor:
    t = t.reshape(shape)
    if not order:
        return t.reshape(())
    return t.permute_dims(inverse_permutation(order, len(order)))


def prod_grad(grad: Tensor, x: Tensor, axis: Any, keepdims: bool) -> Tensor:
    """d prod / dx_i = product of the others: exclusive prefix times suffix products (exact with zeros)."""
    ops = _ops()
    flat, order, shape = _to_last(x, axis)
    before = ops.cumulative_prod(flat, axis=-1, include_initial=True)[..., :-1]
    last = (flat.ndim - 1,)
    after = views.flip_view(ops.cumulative_prod(views.flip_view(flat, last), axis=-1, include_initial=True)[..., :-1],
                            last)
    others = _from_last(before * after, order, shape)
    return unsqueeze_reduced(grad, x, axis, keepdims) * conj(others)


def extremum_grad(grad: Tensor, x: Tensor, result: Tensor, axis: Any, keepdims: bool) -> Tensor:
    """max/min: the gradient goes to the elements equal to the result, shared evenly among ties."""
    ops = _ops()
    hit = (x == unsqueeze_reduced(result, x, axis, keepdims)).astype(grad.dtype)
    count = ops.sum(hit, axis=axis, keepdims=True)
    return unsqueeze_reduced(grad, x, axis, keepdims) * hit / count


def _scan_axis(x: Tensor, axis: Any) -> int:
    return 0 if axis is None else axis % max(x.ndim, 1)


def cumulative_sum_grad(grad: Tensor, x: Tensor, axis: Any, include_initial: bool) -> Tensor:
    """x_i feeds every output from i on: a reversed cumulative sum of the gradient."""
    ops = _ops()
    a = _scan_axis(x, axis)
    if include_initial:  # output k sums x_0..x_{k-1}: drop the gradient of the empty sum
        grad = ops.take(grad, arange(1, grad._shape[a], device=grad._device), axis=a)
    if x.ndim == 0:
        return grad.reshape(())
    return views.flip_view(ops.cumulative_sum(views.flip_view(grad, (a,)), axis=a), (a,))


def cumulative_prod_grad(grad: Tensor, x: Tensor, result: Tensor, axis: Any, include_initial: bool) -> Tensor:
    ops = _ops()
    if bool(ops.any(x == 0)):
        raise RuntimeError("the gradient of cumulative_prod is implemented for inputs without zeros; this input has "
                           "zeros (use prod over windows, or add a tiny offset)")
    a = _scan_axis(x, axis)
    if include_initial:
        keep = arange(1, grad._shape[a], device=grad._device)
        grad, result = ops.take(grad, keep, axis=a), ops.take(result, keep, axis=a)
    summed = cumulative_sum_grad(grad * conj(result), x, axis, False)
    return summed / conj(x)


def sort_grad(grad: Tensor, x: Tensor, axis: int, descending: bool) -> Tensor:
    """Each sorted value came from one input position: send its gradient back there."""
    ops = _ops()
    if x.ndim == 0:
        return grad
    order = ops.argsort(x, axis=axis, descending=descending, stable=True)
    inverse = ops.argsort(order, axis=axis, stable=True)
    return take_along_axis(grad, inverse, axis)


def take_along_axis(x: Tensor, indices: Tensor, axis: int) -> Tensor:
    ops = _ops()
    a = axis % x.ndim
    moved = views.moveaxis(x, a, -1)
    idx = views.moveaxis(indices, a, -1)
    n = moved._shape[-1]
    rows = math.prod(moved._shape[:-1])
    offsets = views.reshape(arange(rows, device=x._device) * n, (*moved._shape[:-1], 1))
    flat = ops.take(moved.reshape((-1,)), views.reshape(idx + offsets, (-1,)), axis=0)
    return views.moveaxis(flat.reshape(idx._shape), -1, a)


def matmul_grad(grad: Tensor, x1: Tensor, x2: Tensor, which: int) -> Tensor:
    """Gradients of matmul, with numpy's 1-d promotions undone (the engine sums batch dims)."""
    ops = _ops()
    a = x1.reshape((1, x1._shape[0])) if x1.ndim == 1 else x1
    b = x2.reshape((x2._shape[0], 1)) if x2.ndim == 1 else x2
    g = grad
    if x1.ndim == 1:
        g = views.expand_dims(g, axis=-2 if x2.ndim > 1 else 0)
    if x2.ndim == 1:
        g = views.expand_dims(g, axis=-1)
    if which == 0:
        out = ops.matmul(g, conj(b).mT)
        return sum_to(out, a._shape).reshape(x1._shape) if x1.ndim == 1 else out
    out = ops.matmul(conj(a).mT, g)
    return sum_to(out, b._shape).reshape(x2._shape) if x2.ndim == 1 else out


def take_grad(grad: Tensor, x: Tensor, indices: Tensor, axis: Any) -> Tensor:
    """Scatter-add the gradient back to the gathered positions (repeats accumulate)."""
    from ember_core.autograd.storage_grad import _linear
    from ember_core.creation import zeros

    ops = _ops()
    with no_grad():
        out = zeros(x._shape, dtype=grad._dtype, device=grad._device)
        ops.index_put(out, indices, grad, axis=0 if axis is None else axis, accumulate=True)
    return _linear("take_backward", out, grad, lambda gg: ops.take(gg, indices, axis=axis))


def batch_norm_saved_stats(x: Tensor, stats: Tensor) -> Tensor:
    """The batch statistics batch_norm_train wrote, as its gradients read them.  Under
    create_graph those gradients are differentiated again, and their dependence on x through the
    statistics must be in that graph: the statistics are then recomputed from x, recorded."""
    if not MODE.enabled:
        return stats
    from ember_core.ops.nn_composites import batch_norm_statistics

    return batch_norm_statistics(x).astype(stats.dtype)


def _norm_grads(input_grad: Any, affine_grad: Any, affine_shape: tuple[int, ...], grad: Tensor, x: Tensor,
                layout: Any, weight: Tensor | None, eps: float, wanted: frozenset[str]) -> tuple[Any, Any]:
    """A normalization's x-gradient and its stacked weight and bias gradients, each None unless
    wanted: when both are, one kernel pass over grad and x writes the second into a buffer.  Under
    create_graph both must be recorded results, so they come from their own ops."""
    want_x, want_affine = "x" in wanted, "weight" in wanted or "bias" in wanted
    if want_x and want_affine and not MODE.enabled:
        from ember_core.creation import empty

        affine = empty(affine_shape, dtype=x.dtype, device=x.device)
        return input_grad(grad, x, layout, weight, affine, eps=eps), affine
    return (input_grad(grad, x, layout, weight, eps=eps) if want_x else None,
            affine_grad(grad, x, layout, eps=eps) if want_affine else None)


def layer_norm_grads(grad: Tensor, x: Tensor, normalized_shape: Any, weight: Tensor | None, eps: float,
                     wanted: frozenset[str]) -> tuple[Tensor | None, Tensor | None]:
    from ember_core.ops import namespace as ops

    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    return _norm_grads(ops.layer_norm_input_grad, ops.layer_norm_affine_grad, (2, *shape), grad, x,
                       normalized_shape, weight, eps, wanted)


def group_norm_grads(grad: Tensor, x: Tensor, num_groups: int, weight: Tensor | None, eps: float,
                     wanted: frozenset[str]) -> tuple[Tensor | None, Tensor | None]:
    from ember_core.ops import namespace as ops

    return _norm_grads(ops.group_norm_input_grad, ops.group_norm_affine_grad, (2, x.shape[1]), grad, x,
                       num_groups, weight, eps, wanted)


HELPERS: dict[str, Any] = {
    "conj": conj, "sum_to": sum_to, "zeros_like": zeros_like, "ones_like": ones_like,
    "inverse_permutation": inverse_permutation, "unsqueeze_reduced": unsqueeze_reduced,
    "math": math, "sgn": sgn, "sgn_grad": sgn_grad,
    "times_i": times_i,
    "tie_share": tie_share, "pow_base_grad": pow_base_grad, "pow_exponent_grad": pow_exponent_grad,
    "prod_grad": prod_grad, "extremum_grad": extremum_grad, "cumulative_sum_grad": cumulative_sum_grad,
    "cumulative_prod_grad": cumulative_prod_grad, "sort_grad": sort_grad, "take_along_axis": take_along_axis,
    "matmul_grad": matmul_grad, "take_grad": take_grad, "batch_norm_saved_stats": batch_norm_saved_stats,
    "layer_norm_grads": layer_norm_grads, "group_norm_grads": group_norm_grads,
}


def _namespace() -> dict[str, Any]:
    from ember_core import views
    from ember_core.autograd.storage_grad import basic_view_grad, layout, restride
    from ember_core.ops import _EXPRESSION_GLOBALS

    return {**_EXPRESSION_GLOBALS, "reshape": views.reshape, "permute_dims": views.permute_dims,
            "expand_dims": views.expand_dims, "broadcast_to": views.broadcast_to, "flip_view": views.flip_view,
            "restride": restride, "layout": layout, "basic_view_grad": basic_view_grad, **HELPERS}


_NAMESPACE: dict[str, Any] = {}
_PYTHON_SCALARS = (int, float, complex)


def _backward_globals() -> dict[str, Any]:
    """What generated backward functions see: the ops namespace of the formulas, and the helpers."""
    if not _NAMESPACE:
        _NAMESPACE.update(_namespace(), scalar_tensor=scalar_tensor, _PYTHON_SCALARS=_PYTHON_SCALARS)
    return _NAMESPACE


# ---- compiled derivatives of one op --------------------------------------------------------------

class Derivative:
    """An op's formulas compiled once, with what each needs saved."""

    def __init__(self, schema: OpSchema) -> None:
        self.schema = schema
        self.names = [p.name for p in schema.params]
        self.defaults = {p.name: p.default for p in schema.params if not p.required}
        self.tensor_params = [p.name for p in schema.params if p.is_tensor]
        self.name = schema.name
        self.is_view = schema.family == "view"
        self.list_params = {p.name for p in schema.params if p.is_tensor and _is_list(p.annotation)}
        self.formulas = {name: self._compile(name, text) for name, text in schema.derivatives.items()
                         if text != NON_DIFFERENTIABLE}
        # shared terms (and a rewritten `grad`), evaluated once per backward before the formulas
        # that use them, directly or through a later term
        self.terms = tuple((name, self._compile(name, text)) for name, text in schema.derivative_terms.items())
        self.term_uses = {name: self._terms_used(code.co_names) for name, code in self.formulas.items()}
        # per input: the tensors its formula and its terms read (saved only when it needs a gradient)
        self.reads = {}
        for name, code in self.formulas.items():
            names = set(code.co_names).union(*(c.co_names for t, c in self.terms if t in self.term_uses[name]))
            self.reads[name] = [n for n in self.tensor_params if n in names] + (["result"] if "result" in names else [])
        self.arity = len(self.names)
        self.grad_positions = tuple(i for i, n in enumerate(self.names) if n in self.formulas)
        self.has_lists = bool(self.list_params)
        self._recipes: dict[tuple[Any, ...], Recipe | None] = {}

    def _terms_used(self, names: tuple[str, ...]) -> set[str]:
        """The terms an expression reading ``names`` needs: those it names, and what they need."""
        used: set[str] = set()
        for term, code in reversed(self.terms):  # a term reads only the terms before it
            if term in names:
                used.add(term)
                names = (*names, *code.co_names)
        return used

    def _compile(self, name: str, text: str) -> Any:
        schema = self.schema
        try:
            return compile(text, f"<{schema.file}: derivative of {schema.name} for {name}>", "eval")
        except SyntaxError as exc:
            raise RegistryError(f"{schema.file}: op {schema.name!r}: derivative for {name!r}: {exc.msg}") from None

    def full_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """The call's arguments by position, defaults filled in (the forward has validated them)."""
        bound = dict(self.defaults)
        bound.update(zip(self.names, args))
        bound.update(kwargs)
        return tuple([bound[n] for n in self.names])

    def recipe_for(self, key: tuple[Any, ...]) -> Recipe | None:
        """How to record a call whose arguments require grad as ``key`` says (a bool per argument,
        or a tuple of them for a list of tensors); None when none does.  Kept in ``_recipes``, which
        the recording wrapper reads first: an op meets few patterns."""
        found = self._recipes[key] = self._make_recipe(key)
        return found

    def _make_recipe(self, key: tuple[Any, ...]) -> Recipe | None:
        inputs = []
        for i in self.grad_positions:
            if isinstance(key[i], tuple):  # a list of tensors: one input per element
                inputs.extend((i, j) for j, wants in enumerate(key[i]) if wants)
            elif key[i]:
                inputs.append((i, -1))
        if not inputs:
            return None
        reads_for = {self.names[i] for i, _ in inputs}
        reads = {n for name in reads_for for n in self.reads[name]}
        positions = {n: i for i, n in enumerate(self.names)}
        order = tuple((self.names[i], j) for i, j in inputs)
        terms = tuple((t, code) for t, code in self.terms if any(t in self.term_uses[n] for n in reads_for))
        read = tuple(positions[n] for n in self.tensor_params if n in reads)
        return Recipe(
            inputs=tuple(inputs),
            single=inputs[0][0] if len(inputs) == 1 and inputs[0][1] < 0 else -1,
            order=order,
            read=read,
            dropped=tuple(positions[n] for n in self.tensor_params if n not in reads),
            reads_result="result" in reads,
            terms=terms,
            wanted=frozenset(reads_for),
            gradients=self._generate(order, [t for t, _ in terms], [self.names[i] for i in read], frozenset(reads_for)),
        )

    def _generate(self, order: tuple[tuple[str, int], ...], terms: list[str], read: list[str],
                  wanted: frozenset[str]) -> Callable[..., list[Any]]:
        """The backward of one recipe as a Python function generated from the TOML expressions:
        the formulas it needs, written out in order, each evaluated once (a dict scope and an
        ``eval`` per formula cost more than the arithmetic of a small op).  Python scalar operands
        that the formulas read join the math as 0-d tensors of the gradient's dtype."""
        schema = self.schema
        texts = {**schema.derivative_terms, **schema.derivatives}
        lines = ["def gradients(values, grad, result):", f"    ({', '.join(self.names)},) = values"]
        for name in read:
            lines.append(f"    if {name}.__class__ in _PYTHON_SCALARS: {name} = scalar_tensor({name}, grad._dtype, "
                         f"grad._device)")
        lines += [f"    {name} = ({texts[name]})" for name in terms]
        computed = dict.fromkeys(name for name, _ in order)
        lines += [f"    _d_{name} = ({texts[name]})" for name in computed]
        lines.append("    return [" + ", ".join(f"_d_{name}" if index < 0 else f"_d_{name}[{index}]"
                                            for name, index in order) + "]")
        source = "\n".join(lines)
        code = compile(source, f"<{schema.file}: backward of {schema.name} for {', '.join(computed)}>", "exec")
        scope = {**_backward_globals(), "wanted": wanted}
        exec(code, scope)
        return scope["gradients"]


def _is_list(annotation: str) -> bool:
    return "list" in annotation or "Sequence" in annotation


def _requires_grad(value: Any) -> Any:
    """Whether an argument takes part in the graph: a bool, or one per element of a list."""
    if value.__class__ is Tensor:
        return value._requires_grad
    if isinstance(value, (list, tuple)):
        return tuple([isinstance(t, Tensor) and t._requires_grad for t in value])
    return False


class Recipe(NamedTuple):
    """How an op records for one pattern of inputs that require grad (positions into the full args)."""

    inputs: tuple[tuple[int, int], ...]  # (position, index in a list param or -1) per input given a gradient
    single: int  # the position of the only input given a gradient when it is one tensor parameter, else -1
    order: tuple[tuple[str, int], ...]  # the same inputs as (param name, list index), for backward
    read: tuple[int, ...]  # tensor params the needed formulas read: saved
    dropped: tuple[int, ...]  # tensor params they do not read: not kept, so their memory can go
    reads_result: bool
    terms: tuple[tuple[str, Any], ...]  # the derivative terms those formulas need, in order
    wanted: frozenset[str]  # the names of the params given a gradient (``wanted`` in formulas)
    gradients: Callable[..., list[Any]]  # (values, grad, result) -> the input gradients in ``order``


def check_schema(schema: OpSchema) -> None:
    """A differentiable primitive must say, for each tensor parameter, how its gradient flows."""
    if not schema.differentiable or schema.kind != "primitive" or not schema.dtypes & _INEXACT:
        return
    missing = [p.name for p in schema.params if p.is_tensor and p.name not in schema.derivatives]
    if missing:
        raise RegistryError(
            f"{schema.file}: op {schema.name!r} is a differentiable primitive but declares no derivative for "
            f"{missing}; add derivatives = {{ {missing[0]} = \"...\" }} (or \"{NON_DIFFERENTIABLE}\"), or set "
            f"differentiable = false"
        )


_INEXACT = GROUPS["floating"]  # real and complex floating dtypes: the ones that carry gradients


_SCALARS: dict[tuple[Any, ...], Tensor] = {}


def scalar_tensor(value: int | float | complex, dtype: Any, device: Any) -> Tensor:
    """A 0-d constant for a Python scalar operand, made once per (value, dtype, device): formulas
    only read their operands, and creating a tensor costs more than the math on it."""
    key = (value.__class__, value, dtype, device)
    t = _SCALARS.get(key)
    if t is None:
        from ember_core.creation import full

        with no_grad():
            t = full((), value, dtype=dtype, device=device)
        if len(_SCALARS) < 1024:
            _SCALARS[key] = t
    return t


class LayoutOf:
    """What a view's formula reads of a tensor: its layout, without its data or its graph."""

    __slots__ = ("_device", "_dtype", "_offset", "_shape", "_strides")

    def __init__(self, t: Tensor) -> None:
        self._shape, self._strides, self._offset, self._dtype, self._device = (
            t._shape, t._strides, t._offset, t._dtype, t._device)

    shape = property(lambda self: self._shape)
    ndim = property(lambda self: len(self._shape))
    dtype = property(lambda self: self._dtype)
    device = property(lambda self: self._device)


def data_alias(t: Tensor) -> Tensor:
    """The same data with no history and no base (shares the storage and its version counter)."""
    alias = Tensor._make_contiguous(t._storage, t._shape, t._strides, t._numel, t._dtype)
    alias._offset = t._offset
    alias._contig = t._contig
    return alias


class FormulaNode(Node):
    """A registry op's node: evaluates its TOML formulas on the saved arguments.

    Inputs are saved as the tensors themselves, as PyTorch's SavedVariable does for inputs: an
    in-place write that later gives one a new history also bumps its version, which makes this
    node refuse to run (``check_saved``), so a saved input is never read with the wrong history.
    The result is saved as an alias without history: result -> node -> result would be a
    reference cycle, freed only by the garbage collector."""

    __slots__ = ("deriv", "recipe", "result_alias", "values")

    def __init__(self, deriv: Derivative, recipe: Recipe, args: tuple[Any, ...], result: Tensor) -> None:
        # Node's fields set here rather than through Node.__init__: its generic pass over the
        # inputs measured ~5% of the ten-chained-ops benchmark, whose target this path carries
        self.name = deriv.name
        self.deriv = deriv
        self.recipe = recipe
        self.pre_hooks = self.retained = None
        self.released = False
        # one edge and one (shape, dtype, device) per input: gradients are summed to the input's shape,
        # cast to its dtype and moved to its device (plain loops: this runs for every recorded op, and
        # beats comprehensions here)
        if recipe.single >= 0:  # one input needs a gradient (most calls): no lists to build
            t = args[recipe.single]
            node = t.grad_fn  # an intermediate result's edge, inline; leaves and views ask edge_of
            self.next = ((node, 0) if node is not None and t._autograd is None else edge_of(t),)
            self.meta = ((t._shape, t._dtype, t._device),)
        else:
            edges, meta = [], []
            for i, j in recipe.inputs:
                t = args[i] if j < 0 else args[i][j]
                node = t.grad_fn
                edges.append((node, 0) if node is not None and t._autograd is None else edge_of(t))
                meta.append((t._shape, t._dtype, t._device))
            self.next = tuple(edges)
            self.meta = tuple(meta)
        values: Any = args
        if recipe.dropped:
            values = list(args)
            for i in recipe.dropped:
                values[i] = None
        self.result_alias: Any = None
        if deriv.is_view:  # a view's gradient reads layouts only, never the data: nothing to guard
            values = list(values)
            for i in recipe.read:
                values[i] = _layouts_of(values[i])
            if recipe.reads_result:
                self.result_alias = LayoutOf(result)
            self.saved_versions = ()
        else:
            saved = []
            for i in recipe.read:
                value = values[i]
                if value.__class__ is Tensor:
                    saved.append((value, value._storage.version))
                elif isinstance(value, (list, tuple)):
                    saved.extend([(t, t._storage.version) for t in value if isinstance(t, Tensor)])
            if recipe.reads_result:
                self.result_alias = alias = data_alias(result)
                saved.append((alias, alias._storage.version))
            self.saved_versions = tuple(saved)
        self.values = values

    def backward(self, grads: list[Tensor | None]) -> list[Any]:
        result = self.result_alias
        if MODE.enabled and result.__class__ is Tensor:  # create_graph: differentiable again, through this node
            result = result._view(result._shape, result._strides, result._offset)
            attach([result], self)
        return self.recipe.gradients(self.values, grads[0], result)  # one output: the engine passes its gradient

    def release(self) -> None:
        super().release()
        self.values = ()
        self.result_alias = None


def _layouts_of(value: Any) -> Any:
    if isinstance(value, Tensor):
        return LayoutOf(value)
    if isinstance(value, (list, tuple)):
        return [LayoutOf(t) if isinstance(t, Tensor) else t for t in value]
    return value


_UNSEEN: Any = object()  # a requires-grad pattern not recorded before (None is a cached answer)


def _wants_grad(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    for a in args:
        if a.__class__ is Tensor:
            if a._requires_grad:
                return True
        elif a.__class__ in (list, tuple):
            for t in a:
                if t.__class__ is Tensor and t._requires_grad:
                    return True
    if kwargs:
        return _wants_grad(tuple(kwargs.values()), {})
    return False


def differentiable(schema: OpSchema, forward: Callable[..., Any], composite: Callable[..., Any] | None
                   ) -> Callable[..., Any]:
    """Wrap an installed op so that it records a node when an input requires grad."""
    if not schema.differentiable:
        return forward
    check_schema(schema)
    if schema.derivatives:
        deriv = Derivative(schema)
        is_view, arity, has_lists, recipes = deriv.is_view, deriv.arity, deriv.has_lists, deriv._recipes

        def recorded(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            MODE.enabled = None  # off, and grad_mode.is_recording() says why
            try:
                result = forward(*args, **kwargs)
            finally:
                MODE.enabled = True
            return attach(result, args, kwargs)

        def attach(result: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            """The node for a result the forward computed (ember_core.hotpath computes some in C)."""
            if result.__class__ is not Tensor or result._dtype not in _INEXACT:
                return result
            for a in args:
                if result is a:  # a no-op view returned its input: never rewrite the input's history
                    result = result._view(result._shape, result._strides, result._offset)
                    break
            if kwargs or len(args) != arity:
                args = deriv.full_args(args, kwargs)
            # which arguments require grad picks the recipe.  One and two operands (the elementwise
            # ops) are written out: a list comprehension is a function call of its own in 3.11
            if has_lists:
                key = tuple([_requires_grad(a) for a in args])
            elif arity == 1:
                key = (args[0].__class__ is Tensor and args[0]._requires_grad,)
            elif arity == 2:
                x1, x2 = args
                key = (x1.__class__ is Tensor and x1._requires_grad, x2.__class__ is Tensor and x2._requires_grad)
            else:
                key = tuple([a.__class__ is Tensor and a._requires_grad for a in args])
            recipe = recipes.get(key, _UNSEEN)
            if recipe is _UNSEEN:
                recipe = deriv.recipe_for(key)
            if recipe is not None:
                result.grad_fn = FormulaNode(deriv, recipe, args, result)
                result._requires_grad = True
                if is_view and result._base is not None:  # see graph.edge_of: in-place writes make views stale
                    meta_of(result).view_version = result._storage.version
            return result

        recorded.attach = attach  # type: ignore[attr-defined]
    elif composite is not None:
        # an op of the composite family is its composite behind the checks of its arguments: run
        # those too (mean(x, keepdims="yes") must be mean's TypeError, not sum's); any other op
        # differentiates through its composite instead of its (unrecorded) kernel
        through = forward if schema.family == "composite" else composite

        def recorded(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            result = through(*args, **kwargs)
            _check_connected(schema, result)
            return result
    else:
        return forward

    op = _entry(schema, forward, recorded)
    op.__wrapped__ = forward  # type: ignore[attr-defined]  (inspect.signature shows the op's own)
    return op


def _entry(schema: OpSchema, forward: Callable[..., Any], recorded: Callable[..., Any]) -> Callable[..., Any]:
    """The op users call: the forward, or ``recorded`` when an input requires grad.  Ops of one or
    two positional-only operands (the elementwise families) get a wrapper of that exact arity:
    packing ``*args, **kwargs`` costs a third of a small ``a + b``."""
    params = schema.params
    if all(p.positional_only and p.required and p.is_tensor and not _is_list(p.annotation) for p in params):
        if len(params) == 1:
            def unary(x: Any, /) -> Any:
                if x.__class__ is Tensor and x._requires_grad and MODE.enabled:
                    return recorded((x,), {})
                return forward(x)

            unary.recorded = recorded  # type: ignore[attr-defined]  (ember_core.hotpath makes this entry C)
            return unary
        if len(params) == 2:
            def binary(x1: Any, x2: Any, /) -> Any:
                if MODE.enabled and ((x1.__class__ is Tensor and x1._requires_grad) or
                                     (x2.__class__ is Tensor and x2._requires_grad)):
                    return recorded((x1, x2), {})
                return forward(x1, x2)

            binary.recorded = recorded  # type: ignore[attr-defined]  (ember_core.hotpath makes this entry C)
            return binary

    def op(*args: Any, **kwargs: Any) -> Any:
        if MODE.enabled and _wants_grad(args, kwargs):
            return recorded(args, kwargs)
        return forward(*args, **kwargs)

    return op


def _check_connected(schema: OpSchema, result: Any) -> None:
    """A decomposition that lost the graph would give silently missing gradients: refuse it."""
    outs = result if isinstance(result, (tuple, list)) else (result,)
    for t in outs:
        if isinstance(t, Tensor) and t._dtype in _INEXACT and not t._requires_grad:
            raise RegistryError(
                f"{schema.file}: op {schema.name!r} is differentiable but its composite produced a result "
                f"outside the graph; declare derivatives for it in the registry or mark it differentiable = false"
            )


__all__ = ["HELPERS", "NON_DIFFERENTIABLE", "Derivative", "FormulaNode", "differentiable", "sum_to"]

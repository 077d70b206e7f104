"""The property-based campaign's shared parts: where it runs, how inputs are drawn, how results are judged.

Targets.  Every property runs on each backend of the test run: ``cpu`` (ember-cpu alone), ``cpu+xnnpack``
(ember-xnnpack preferred, for the ops its manifest claims: elsewhere it is ember-cpu again) and
``vulkan`` (the first Vulkan device; Mesa's lavapipe on CI).  A target that is not installed or has
no device is skipped with the reason.  Ops without a native kernel on a target still run (through
the composite or the host fallback): a wrong answer is a bug whichever path produced it.

Inputs.  ``tensors`` draws values of a dtype (ordinary values, the dtype's extremes, and for
floats NaN, infinities, signed zeros, subnormals) and a memory layout: contiguous, or a view with
permuted axes, steps of either sign and a storage offset over a base filled with garbage, or a
broadcast (stride-0) view.  The numpy array it returns holds exactly the values the tensor stores.

Judging.  ``assert_matches`` compares with a float64 / complex128 / exact reference under the
conformance suite's tolerance table (``ember_conformance.tolerances``), the same rule a vendor's run
is held to.  ``raises_like`` holds ember to numpy's verdict on a bad call: where the reference raises,
ember must raise an ember error of the same Python category, never crash or return garbage.

Profiles.  ``EMBER_HYPOTHESIS=ci`` (the default: derandomized, a few examples per case, so CI is
reproducible and stays within its time budget) or ``thorough`` (random, many examples, for a long
run).  Every failure hypothesis finds is kept as an explicit ``@example`` beside its property (for a
property over ``st.data()``: ``@example(data=Recorded(...))``, the draws written out).
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from ember_conformance import tolerances
from ember_conformance.samples.base import representable
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import ember_core as em
from ember_core.errors import EmberError
from ember_core.ops.registry import REGISTRY

# ---- profiles --------------------------------------------------------------------------------------

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
          HealthCheck.differing_executors]
settings.register_profile("ci", max_examples=8, derandomize=True, database=None, deadline=None,
                          suppress_health_check=_QUIET, print_blob=True)
settings.register_profile("thorough", max_examples=250, derandomize=False, deadline=None,
                          suppress_health_check=_QUIET, print_blob=True)
PROFILE_NAME = os.environ.get("EMBER_HYPOTHESIS", "ci")
if PROFILE_NAME not in ("ci", "thorough"):
    raise ValueError(f"EMBER_HYPOTHESIS={PROFILE_NAME!r}: use 'ci' (the default) or 'thorough'")
PROFILE = settings.get_profile(PROFILE_NAME)


def examples(weight: float = 1.0) -> settings:
    """The profile, with ``weight`` times its examples: cheap properties take more, costly ones fewer."""
    return settings(PROFILE, max_examples=max(1, round(PROFILE.max_examples * weight)))


# ---- targets ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    """One backend configuration a property runs on."""

    name: str
    device: str
    prefer: tuple[str, ...] = ()

    def unavailable(self) -> str | None:
        """Why this target cannot run here, or None."""
        from ember_core.plugins import MANAGER

        MANAGER.ensure_discovered()
        for plugin in (*self.prefer, em.as_device(self.device).type):
            owner = MANAGER.backends.get(plugin) or MANAGER.device_owner.get(plugin)
            if owner is None:
                broken = MANAGER.broken.get(plugin)
                return f"{plugin} is {'broken: ' + broken.reason if broken else 'not installed'}"
        try:
            em.as_device(self.device).backend  # noqa: B018  (raises with the reason)
        except EmberError as exc:
            return str(exc)
        return None

    def serves(self, op: str) -> bool:
        """Whether this target differs from plain cpu for ``op`` (a preferred provider claims it)."""
        if not self.prefer:
            return True
        from ember_core.plugins import MANAGER

        device_type = em.as_device(self.device).type
        return any(op in MANAGER.backends[p].manifest.kernels.get(device_type, {})
                   for p in self.prefer if p in MANAGER.backends)

    def limits(self, op: str, dtype: str) -> dict[str, Any]:
        """Element options that keep a property out of what this target's plugins declare as an
        expected failure (their manifest's ``[xfail]``): ``op:dtype:extremes`` -> no extremes; a
        whole ``op:dtype`` -> the case is skipped with the declared reason."""
        from ember_conformance.execute import declared_xfail

        device_type = em.as_device(self.device).type
        whole = declared_xfail(device_type, op, dtype, "property")  # (no sample has that name)
        if whole is not None:
            pytest.skip(f"declared as an expected failure: {whole}")
        return {"extremes": False} if declared_xfail(device_type, op, dtype, "extremes") else {}

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Inside: this target's providers, and the host fallback allowed without warnings.  A target
        that prefers none runs its device's own plugin alone: other providers (ember-xnnpack outranks
        ember-cpu when installed) are excluded, so that "cpu" tests ember-cpu."""
        from ember_core.plugins import MANAGER

        device_type = em.as_device(self.device).type
        owner = MANAGER.device_owner.get(device_type)
        others = () if self.prefer else [b.name for b in MANAGER.providers(device_type) if b is not owner]
        with em.providers(prefer=self.prefer, exclude=others), em.fallback_policy("allow"), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            yield


TARGETS = (Target("cpu", "cpu"), Target("cpu+xnnpack", "cpu", ("xnnpack",)), Target("vulkan", "vulkan:0"))


def cases(ops: Any, *, targets: tuple[Target, ...] = TARGETS) -> list[Any]:
    """pytest params ``(target, op)`` for every target that serves each op; unavailable targets are
    skipped with their reason."""
    out = []
    for target in targets:
        reason = target.unavailable()
        for op in ops:
            if reason is None and not target.serves(op):
                continue
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            out.append(pytest.param(target, op, id=f"{target.name}-{op}", marks=marks))
    return out


def target_params(*, targets: tuple[Target, ...] = TARGETS) -> list[Any]:
    """pytest params of the targets alone (properties not tied to one op)."""
    out = []
    for target in targets:
        reason = target.unavailable()
        out.append(pytest.param(target, id=target.name, marks=[pytest.mark.skip(reason=reason)] if reason else []))
    return out


def ops_of(*families: str, file: str | None = None) -> list[str]:
    """Registry ops of these families (declared in this TOML file, if given), by name."""
    return sorted(s.name for s in REGISTRY if s.family in families and (file is None or s.file.endswith(file)))


def schema(op: str) -> Any:
    return REGISTRY.get(op)


def dtypes_of(op: str, *, exclude: tuple[str, ...] = ()) -> list[str]:
    """The dtypes the registry declares for ``op``, in a fixed order (hypothesis needs one)."""
    declared = {d.name for d in schema(op).dtypes}
    return [d.name for d in em.dtypes.ALL_DTYPES if d.name in declared and d.name not in exclude]


# ---- values ----------------------------------------------------------------------------------------

KIND = {"bool": "b", "uint8": "u", **{f"int{b}": "i" for b in (8, 16, 32, 64)},
        **{f: "f" for f in tolerances.FLOATS}, **{c: "c" for c in tolerances.COMPLEXES}}


def finite_specials(dtype: str) -> list[float]:
    """Finite extremes of a real floating dtype: its largest value, the smallest normal and subnormal."""
    if dtype == "bfloat16":
        big, normal, sub = 3.3895313892515355e38, 2.0**-126, 2.0**-133
    else:
        info = np.finfo(dtype)
        big, normal, sub = float(info.max), float(info.tiny), float(info.smallest_subnormal)
    return [big, -big, normal, -normal, sub, -sub]


def elements(dtype: str, *, finite: bool = False, extremes: bool = True, low: float = -8.0,
             high: float = 8.0) -> st.SearchStrategy:
    """Scalars of ``dtype``: mostly ordinary values in [low, high], sometimes the dtype's finite
    extremes (unless ``extremes`` is off) and NaN and the infinities (unless ``finite``).

    Complex values are always finite and moderate: for infinite parts numpy, PyTorch and C99's
    Annex G give different answers (1 / (inf + inf j) is nan in the first two, 0 in C), and near
    the overflow threshold numpy's own complex arithmetic under- and overflows (it gives 0 for
    1j / (1.8e308 + 1.8e308j), whose parts are 2.8e-309), so there is no reference to hold ember to."""
    kind = KIND[dtype]
    if kind == "b":
        return st.booleans()
    if kind in "iu":
        info = np.iinfo(dtype)
        edges = [int(info.min), int(info.min) + 1, -1, 0, 1, int(info.max) - 1, int(info.max)]
        small = st.integers(max(int(low), int(info.min)), min(int(high), int(info.max)))
        if not extremes:
            return small
        edges = st.sampled_from([e for e in edges if info.min <= e <= info.max])
        return st.one_of(small, small, edges, st.integers(int(info.min), int(info.max)))
    real = tolerances.REAL_OF.get(dtype, dtype)
    special = [0.0, -0.0] + (finite_specials(real) if extremes and kind == "f" else [])
    if not finite and kind == "f":
        special += [math.inf, -math.inf, math.nan]
    ordinary = st.floats(low, high, allow_nan=False, allow_infinity=False)
    part = st.one_of(ordinary, ordinary, ordinary, st.sampled_from(special))
    return part if kind == "f" else st.builds(complex, part, part)


def shapes(*, min_dims: int = 0, max_dims: int = 4, min_side: int = 0, max_side: int = 4) -> st.SearchStrategy:
    """Shapes with 0-size and 1-size dimensions among them."""
    return st.lists(st.integers(min_side, max_side), min_size=min_dims, max_size=max_dims).map(tuple)


def _numpy_dtype(dtype: str) -> Any:
    if dtype == "bfloat16":
        return np.float64
    return np.dtype(dtype)


@st.composite
def arrays(draw: Any, shape: tuple[int, ...], dtype: str, **element_options: Any) -> np.ndarray:
    """Values of ``shape`` exactly representable in ``dtype``, as the reference's working type
    (float64 / complex128 for floating dtypes, the dtype itself otherwise)."""
    n = math.prod(shape)
    flat = draw(st.lists(elements(dtype, **element_options), min_size=n, max_size=n))
    return exact(np.asarray(flat).reshape(shape), dtype)


def exact(values: Any, dtype: str) -> np.ndarray:
    """``values`` rounded to ``dtype``, in the reference's working type."""
    kind = KIND[dtype]
    working = np.float64 if kind == "f" else np.complex128 if kind == "c" else _numpy_dtype(dtype)
    return representable(np.asarray(values, dtype=working), dtype)


# ---- layouts ---------------------------------------------------------------------------------------

_GARBAGE = {"b": True, "i": 77, "u": 77, "f": 1234.5, "c": 1234.5 - 8j}


@dataclass(frozen=True)
class Layout:
    """How a tensor's logical values sit in its storage: axes permuted (``order``: storage axis
    order), a step per axis (negative: reversed), an offset into the storage, or ``broadcast``:
    axes of stride 0 over a smaller tensor."""

    order: tuple[int, ...]
    steps: tuple[int, ...]
    offset: int = 0
    broadcast: tuple[int, ...] = ()

    def __str__(self) -> str:
        if self.broadcast:
            return f"broadcast{self.broadcast}"
        return f"order{self.order} steps{self.steps} offset{self.offset}"


def layouts(ndim: int, *, allow_broadcast: bool = True) -> st.SearchStrategy:
    contiguous = st.just(Layout(tuple(range(ndim)), (1,) * ndim))
    if ndim == 0:
        return contiguous
    strided = st.builds(Layout, st.permutations(range(ndim)).map(tuple),
                        st.lists(st.sampled_from([1, 1, 2, -1, -2]), min_size=ndim, max_size=ndim).map(tuple),
                        st.sampled_from([0, 0, 1, 3]))
    options = [contiguous, strided]
    if allow_broadcast:
        options.append(st.builds(Layout, st.just(tuple(range(ndim))), st.just((1,) * ndim), st.just(0),
                                 st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True)
                                 .map(lambda axes: tuple(sorted(axes)))))
    return st.one_of(*options)


def place(values: np.ndarray, dtype: str, layout: Layout, device: str) -> Any:
    """An ember tensor on ``device`` whose logical values are ``values``, stored as ``layout`` says.
    For a broadcast layout, ``values`` must be constant along the broadcast axes."""
    return view_in(em.asarray(storage(values, dtype, layout), dtype=dtype, device=device), layout, values.shape)


def storage(values: np.ndarray, dtype: str, layout: Layout) -> np.ndarray:
    """The flat storage ``place`` lays ``values`` out in (for a broadcast layout: the values it repeats)."""
    if layout.broadcast:
        return np.array(values[tuple(slice(0, 1) if i in layout.broadcast else slice(None)
                                     for i in range(values.ndim))], order="C")
    garbage = _GARBAGE[KIND[dtype]]
    # the storage, in the permuted axis order, big enough for the steps, garbage between the values
    # (a negative step reads the storage backwards, so the values go in reversed along that axis)
    big = np.full(_extents(values.shape, layout), garbage, dtype=values.dtype)
    big[tuple(slice(None, None, abs(s)) for s in layout.steps)] = np.flip(
        values, [i for i, s in enumerate(layout.steps) if s < 0])
    stored = np.array(np.transpose(big, layout.order), order="C")  # (ascontiguousarray makes 0-d 1-d)
    return np.concatenate([np.full(layout.offset, garbage, dtype=values.dtype), stored.reshape(-1)])


def view_in(base: Any, layout: Layout, shape: tuple[int, ...]) -> Any:
    """The tensor of ``shape`` that ``layout`` makes of ``base``, a tensor holding ``storage``'s
    values, through view ops alone (so that gradients flow back to ``base``)."""
    if layout.broadcast:
        return em.broadcast_to(base, shape)
    extents = _extents(shape, layout)
    base = base[layout.offset:].reshape(tuple(extents[i] for i in layout.order))
    inverse = tuple(int(i) for i in np.argsort(layout.order))
    return em.permute_dims(base, inverse)[tuple(slice(None, None, s) for s in layout.steps)]


def _extents(shape: tuple[int, ...], layout: Layout) -> list[int]:
    return [(n - 1) * abs(s) + 1 if n else 0 for n, s in zip(shape, layout.steps)]


@st.composite
def tensors(draw: Any, shape: tuple[int, ...], dtype: str, device: str, *, allow_broadcast: bool = True,
            **element_options: Any) -> tuple[Any, np.ndarray]:
    """An ember tensor and its exact values (see ``arrays``), in a drawn layout."""
    layout = draw(layouts(len(shape), allow_broadcast=allow_broadcast), label="layout")
    values = draw(arrays(_broadcast_source(shape, layout), dtype, **element_options), label="values")
    values = np.array(np.broadcast_to(values, shape), order="C")
    return place(values, dtype, layout, device), values


def _broadcast_source(shape: tuple[int, ...], layout: Layout) -> tuple[int, ...]:
    return tuple(1 if i in layout.broadcast else n for i, n in enumerate(shape))


# ---- explicit examples -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Drawn:
    """A tensor in a ``Recorded`` example: its values, dtype and layout (contiguous if not given)."""

    values: Any
    dtype: str
    layout: Layout | None = None


class Recorded:
    """The explicit example of a property that draws from ``st.data()``:
    ``@example(data=Recorded("std", dtype="float16", x=Drawn([0.0, 65504.0], "float16"), ...))``.
    Each labelled draw returns the value recorded under its label, a ``Drawn`` as a tensor on the
    target's device and its exact values (as ``tensors`` does).  It runs for its op (on every
    target, or on ``target=`` alone); the property returns at once elsewhere (see ``elsewhere``)."""

    def __init__(self, op: str, *, target: str | None = None, **draws: Any) -> None:
        self.op, self.target, self.draws, self.device = op, target, draws, "cpu"

    def __repr__(self) -> str:
        return f"Recorded({self.op!r}, target={self.target!r}, **{self.draws!r})"

    def draw(self, strategy: Any, label: str | None = None) -> Any:
        value = self.draws[label]
        if not isinstance(value, Drawn):
            return value
        values = exact(value.values, value.dtype)
        layout = value.layout or Layout(tuple(range(values.ndim)), (1,) * values.ndim)
        return place(values, value.dtype, layout, self.device), values


def elsewhere(data: Any, target: Target, op: str) -> bool:
    """True when ``data`` is a ``Recorded`` example of another op or target: the property returns."""
    if not isinstance(data, Recorded):
        return False
    data.device = target.device
    return data.op != op or data.target not in (None, target.name)


# ---- judging ---------------------------------------------------------------------------------------

def host(t: Any) -> np.ndarray:
    """A tensor's values as numpy (bfloat16 widened to float32); 0-d tensors read through a view."""
    return np.asarray(t.reshape(1)).reshape(()) if t.ndim == 0 else np.asarray(t)


def assert_matches(got: Any, expected: Any, *, dtype: str | None = None, magnitude: Any = None,
                   rtol: float | None = None, atol: Any = None, what: str = "result") -> None:
    """``got`` (an ember tensor) has ``expected``'s shape, the ``dtype`` given (if any), and values
    within the conformance tolerance of its dtype."""
    assert isinstance(got, em.Tensor), f"{what}: expected an ember tensor, got {type(got).__name__}"
    ref = np.asarray(expected)
    assert got.shape == ref.shape, f"{what}: shape {got.shape}, expected {ref.shape}"
    if dtype is not None:
        assert got.dtype.name == dtype, f"{what}: dtype {got.dtype.name}, expected {dtype}"
    result = tolerances.compare(host(got), ref, got.dtype.name, magnitude=magnitude, rtol=rtol, atol=atol)
    assert result.ok, f"{what} ({got.dtype.name}): {result.message}"


def assert_unchanged(t: Any, values: np.ndarray, what: str = "input") -> None:
    """An op must not write into its inputs (exact, NaNs included)."""
    got = host(t)
    same = np.array_equal(got, values.astype(got.dtype), equal_nan=KIND[t.dtype.name] in "fc")
    assert same, f"the op wrote into its {what}"


_CATEGORIES = (IndexError, TypeError, ValueError, OverflowError, ZeroDivisionError, MemoryError, NotImplementedError,
               RuntimeError)


def raises_like(call: Callable[[], Any], reference: Callable[[], Any]) -> tuple[Any, Any] | None:
    """Run the reference, then ember.  When the reference raises, ember must raise an ember error
    (``ember_core.errors``) of the same built-in category (IndexError, ValueError, TypeError...), and
    None is returned; otherwise both results are returned (ember's own errors propagate)."""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = reference()
    except _CATEGORIES as ref_exc:
        # some errors belong to two categories (numpy's AxisError is a ValueError and an IndexError)
        categories = tuple(c for c in _CATEGORIES if isinstance(ref_exc, c))
        with pytest.raises(EmberError) as info:
            call()
        assert isinstance(info.value, categories), (
            f"the reference raised {type(ref_exc).__name__} ({ref_exc}); ember raised "
            f"{type(info.value).__name__} ({info.value}), not a {' or '.join(c.__name__ for c in categories)}")
        return None
    return call(), expected

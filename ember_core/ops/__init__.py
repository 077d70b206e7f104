"""``ember_core.ops``: every registered op as a callable, built from its schema.

``ember_core.ops.add(a, b)``, ``ember_core.ops.myvendor.fused_gelu(x)``.  The public namespace
``ember_core`` and the Tensor methods/operators are filled from here.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from ember_core import hotpath
from ember_core.autograd.formulas import differentiable
from ember_core.autograd.grad_mode import MODE
from ember_core.dtypes import BY_NAME, result_type
from ember_core.errors import RegistryError
from ember_core.ops import composites, nn_composites, optim_composites
from ember_core.ops.families import BUILDERS, scalar_operand
from ember_core.ops.registry import REGISTRY, OpSchema

ENTRIES: dict[str, Callable[..., Any]] = {}
_COMPOSITE_MODULES = (composites, nn_composites, optim_composites)  # where composite = "python" implementations live
_REFLECTED = {"__radd__", "__rsub__", "__rmul__", "__rtruediv__", "__rfloordiv__", "__rmod__", "__rpow__",
              "__rand__", "__ror__", "__rxor__", "__rlshift__", "__rrshift__", "__rmatmul__"}


def _composite_for(schema: OpSchema) -> Callable[..., Any] | None:
    if schema.composite is None:
        return None
    if schema.composite == "python":
        for module in _COMPOSITE_MODULES:
            fn = getattr(module, schema.name.replace(".", "_"), None)
            if fn is not None:
                return fn
        raise RegistryError(f"{schema.file}: op {schema.name!r} says composite = \"python\" but no function "
                            f"of that name exists in {', '.join(m.__name__ for m in _COMPOSITE_MODULES)}")
    return _compile_expression(schema)


def _compile_expression(schema: OpSchema) -> Callable[..., Any]:
    """A composite written as an expression over the op's parameters and other ops."""
    try:
        code = compile(schema.composite, f"<{schema.file}: {schema.name}>", "eval")
    except SyntaxError as exc:
        raise RegistryError(f"{schema.file}: op {schema.name!r}: composite {schema.composite!r}: {exc.msg}") from None
    names = [p.name for p in schema.params]
    defaults = {p.name: p.default for p in schema.params if not p.required}

    def composite(*args: Any, **kwargs: Any) -> Any:
        scope = {**defaults, **dict(zip(names, args)), **kwargs}
        return eval(code, _EXPRESSION_GLOBALS, scope)

    return composite


class _Namespace(SimpleNamespace):
    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"no op named {name!r} is registered (see `ember backends` or ember_core.ops.names())")


_EXPRESSION_GLOBALS: dict[str, Any] = {"__builtins__": {}, "result_type": result_type, **BY_NAME}
namespace = _Namespace()


def _install(schema: OpSchema) -> Callable[..., Any]:
    try:
        builder = BUILDERS[schema.family]
    except KeyError:
        raise RegistryError(f"{schema.file}: op {schema.name!r}: unknown family {schema.family!r}; known: "
                            f"{', '.join(sorted(BUILDERS))}") from None
    composite = _composite_for(schema)
    fn = hotpath.entry(differentiable(schema, hotpath.fast(builder(schema, composite), schema.family, schema.name),
                                      composite))
    fn.__name__ = schema.name.rsplit(".", 1)[-1]
    fn.__qualname__ = schema.name
    fn.__doc__ = f"{schema.name}{schema.signature_text}\n\n{schema.doc}".strip()
    ENTRIES[schema.name] = fn
    target = namespace
    *path, leaf = schema.name.split(".")
    for part in path:
        if not hasattr(target.__dict__.get(part, None), "__dict__"):
            target.__dict__[part] = _Namespace()
        target = target.__dict__[part]
    target.__dict__[leaf] = fn
    if not path:
        _EXPRESSION_GLOBALS[schema.name] = fn
    return fn


def call(name: str, *args: Any, **kwargs: Any) -> Any:
    return ENTRIES[name](*args, **kwargs)


def names() -> list[str]:
    return sorted(ENTRIES)


def _bind_methods(schema: OpSchema, fn: Callable[..., Any]) -> None:
    from ember_core.tensor import Tensor

    for method in schema.methods:
        if hotpath.serves(method, fn):
            continue  # the compiled Tensor type's own operator
        if method in _REFLECTED:
            setattr(Tensor, method, _reflected(fn))
        elif method.startswith("__i") and method not in ("__invert__", "__index__"):
            setattr(Tensor, method, _inplace(fn, schema.name))
        else:
            setattr(Tensor, method, fn)


def _reflected(fn: Callable[..., Any]) -> Callable[..., Any]:
    def method(self: Any, other: Any) -> Any:
        return fn(other, self)

    return method


def _inplace(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    into = getattr(getattr(fn, "__wrapped__", fn), "into", None)  # the binary family's in-place path

    def method(self: Any, other: Any) -> Any:
        from ember_core.creation import write_inplace

        grads = MODE.enabled and (self._requires_grad or getattr(other, "_requires_grad", False))
        base = self if self._base is None else self._base
        if into is not None and not (grads or (MODE.enabled and base._requires_grad)) and into(self, other):
            self._storage.version += 1
            return self
        source = self
        if grads:
            from ember_core.autograd.storage_grad import check_leaf

            check_leaf(self)
            source = self.clone()  # what the op's backward saves must not be the tensor being overwritten
        write_inplace(self, fn(source, other), name)
        return self

    return method


def load_vendor_file(path: str) -> list[str]:
    """Declare the vendor ops of one TOML file and make them callable."""
    loaded = REGISTRY.load_file(path)
    try:
        for schema in loaded:
            _install(schema)
    except RegistryError:  # all or nothing: a broken file leaves no half-declared ops behind
        unload_vendor_ops([s.name for s in loaded])
        raise
    return [s.name for s in loaded]


def unload_vendor_ops(names: list[str]) -> None:
    """Forget vendor ops (their plugin was unregistered, or failed to register)."""
    for name in names:
        REGISTRY.ops.pop(name, None)
        ENTRIES.pop(name, None)
        _EXPRESSION_GLOBALS.pop(name, None)
        *path, leaf = name.split(".")
        target: Any = namespace
        for part in path:
            target = target.__dict__.get(part)
            if target is None:
                break
        else:
            target.__dict__.pop(leaf, None)


hotpath.serve_scalars(scalar_operand)
for _schema in REGISTRY:
    _bind_methods(_schema, _install(_schema))

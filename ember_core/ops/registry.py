"""The op schema registry: every op is declared once, in TOML, and everything else is driven by it.

A declaration (``[ops.<name>]`` in any ``ember_core/ops/*.toml``, or in a plugin's vendor file
with a top-level ``namespace = "myvendor"``)::

    [ops.add]
    signature = "(x1: Tensor, x2: Tensor | Scalar, /) -> Tensor"   # Python syntax, parsed once
    family = "binary"              # how shapes/dtypes are inferred and how kernels are called
    dtypes = "numeric"             # a dtype group (ember_core.dtypes.GROUPS), or a list of names
    kind = "primitive"             # primitive: backends implement it; composite: defined in the core
    composite = "..."              # composites only: an expression in ember ops, or "python"
    result = "promoted"            # family-specific result rule (promoted | bool | real | index ...)
    int_to_float = false           # integer/bool inputs are first cast to the default float dtype
    methods = ["__add__", "__radd__", "__iadd__"]   # Tensor methods bound to this op
    derivatives = { x1 = "grad", x2 = "grad" }       # vector-Jacobian products, in ember ops
    derivative_terms = { grad = "..." }  # evaluated once per backward, in order, before the
                                   # derivatives that use them, which see each name: shared work
                                   # (one reduction feeding several inputs' gradients), or `grad`
                                   # rewritten (the derivative of a fused epilogue such as a relu)
    deterministic = true
    fallback = true                # may run on the host through the CPU fallback
    doc = "..."

Errors name the file, the op and what is wrong (RegistryError).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ember_core.dtypes import BY_NAME, GROUPS, DType
from ember_core.errors import RegistryError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

GRAD = "grad"  # the incoming gradient's name in formulas; a derivative term of that name rewrites it
_TYPE_NAMES = frozenset({
    "Tensor", "Scalar", "int", "float", "bool", "complex", "str", "dtype", "device", "None", "tuple",
    "list", "Sequence", "Ellipsis", "Any",
})
_KEYS = {
    "signature": str, "family": str, "dtypes": (str, list), "kind": str, "composite": str, "result": str,
    "int_to_float": bool, "methods": list, "derivatives": dict, "derivative_terms": dict,
    "deterministic": bool, "fallback": bool, "doc": str, "differentiable": bool,
}


NO_DEFAULT: Any = object()  # a parameter without a default


@dataclass(frozen=True)
class Param:
    name: str
    annotation: str
    default: Any = NO_DEFAULT
    positional_only: bool = False
    keyword_only: bool = False

    @property
    def required(self) -> bool:
        return self.default is NO_DEFAULT

    @property
    def is_tensor(self) -> bool:
        return "Tensor" in self.annotation


@dataclass(frozen=True)
class OpSchema:
    name: str
    file: str
    signature_text: str  # as declared: "(x: Tensor, /) -> Tensor"
    params: tuple[Param, ...]
    returns: str
    family: str
    dtypes: frozenset[DType]
    kind: str = "primitive"
    composite: str | None = None
    result: str = "promoted"
    int_to_float: bool = False
    methods: tuple[str, ...] = ()
    derivatives: dict[str, str] = field(default_factory=dict)
    derivative_terms: dict[str, str] = field(default_factory=dict)
    differentiable: bool = True
    deterministic: bool = True
    fallback: bool = True
    doc: str = ""

    @property
    def is_primitive(self) -> bool:
        return self.kind == "primitive"


def resolve_dtypes(spec: str | list) -> frozenset[DType]:
    """A dtype group name or a list of group/dtype names -> the set of dtypes."""
    items = [spec] if isinstance(spec, str) else spec
    out: set[DType] = set()
    for item in items:
        if item in GROUPS:
            out |= GROUPS[item]
        elif item in BY_NAME:
            out.add(BY_NAME[item])
        else:
            raise RegistryError(f"unknown dtype or dtype group {item!r} (groups: {', '.join(sorted(GROUPS))})")
    return frozenset(out)


def _parse_signature(text: str) -> tuple[tuple[Param, ...], str]:
    try:
        fn = ast.parse(f"def _op{text}: pass").body[0]
    except SyntaxError as exc:
        raise RegistryError(f"signature {text!r} is not valid Python syntax: {exc.msg}") from None
    assert isinstance(fn, ast.FunctionDef)
    a = fn.args
    if a.vararg or a.kwarg:
        raise RegistryError(f"signature {text!r}: *args/**kwargs are not allowed; name every parameter")
    if fn.returns is None:
        raise RegistryError(f"signature {text!r} needs a return annotation (-> Tensor)")
    positional = [*a.posonlyargs, *a.args]
    defaults: list[Any] = [NO_DEFAULT] * (len(positional) - len(a.defaults))
    defaults += [_literal(d, text) for d in a.defaults]
    params = []
    for i, arg in enumerate(positional):
        params.append(Param(arg.arg, _annotation(arg, text), defaults[i], positional_only=i < len(a.posonlyargs)))
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        value = NO_DEFAULT if default is None else _literal(default, text)
        params.append(Param(arg.arg, _annotation(arg, text), value, keyword_only=True))
    return tuple(params), _check_type(ast.unparse(fn.returns), text)


def _annotation(arg: ast.arg, text: str) -> str:
    if arg.annotation is None:
        raise RegistryError(f"signature {text!r}: parameter {arg.arg!r} needs a type annotation")
    return _check_type(ast.unparse(arg.annotation), text)


def _check_type(annotation: str, text: str) -> str:
    for node in ast.walk(ast.parse(annotation, mode="eval")):
        if isinstance(node, ast.Name) and node.id not in _TYPE_NAMES:
            known = ", ".join(sorted(_TYPE_NAMES))
            raise RegistryError(f"signature {text!r}: unknown type {node.id!r} (known: {known})")
    return annotation


def _literal(node: ast.expr, text: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise RegistryError(f"signature {text!r}: default {ast.unparse(node)!r} must be a literal") from None


def parse_op(name: str, entry: dict, file: str) -> OpSchema:
    """Validate one TOML entry and build its schema."""
    where = f"{file}: op {name!r}"
    if not isinstance(entry, dict):
        raise RegistryError(f"{where}: expected a table of fields")
    unknown = set(entry) - set(_KEYS)
    if unknown:
        raise RegistryError(f"{where}: unknown field(s) {sorted(unknown)}; known fields: {', '.join(_KEYS)}")
    for key, typ in _KEYS.items():
        if key in entry and not isinstance(entry[key], typ):
            raise RegistryError(f"{where}: field {key!r} must be {getattr(typ, '__name__', typ)}")
    for key in ("signature", "family", "dtypes"):
        if key not in entry:
            raise RegistryError(f"{where}: missing required field {key!r}")
    try:
        params, returns = _parse_signature(entry["signature"])
        dtypes = resolve_dtypes(entry["dtypes"])
    except RegistryError as exc:
        raise RegistryError(f"{where}: {exc}") from None
    family = entry["family"]  # checked against the builders when the op is installed (ember_core.ops)
    if not isinstance(family, str) or not family.isidentifier():
        raise RegistryError(f"{where}: family must be an identifier, got {family!r}")
    kind = entry.get("kind", "primitive")
    if kind not in ("primitive", "composite"):
        raise RegistryError(f"{where}: kind must be 'primitive' or 'composite', got {kind!r}")
    if kind == "composite" and "composite" not in entry:
        raise RegistryError(f"{where}: a composite op needs a 'composite' field (an expression or \"python\")")
    names = {p.name for p in params}
    for arg in entry.get("derivatives", {}):
        if arg not in names:
            raise RegistryError(f"{where}: derivative given for {arg!r}, which is not a parameter ({sorted(names)})")
    for term, text in entry.get("derivative_terms", {}).items():
        if not term.isidentifier() or term == "result" or (term in names and term != GRAD):
            raise RegistryError(f"{where}: derivative term {term!r} must be a new identifier (not 'result' or a "
                                f"parameter: {sorted(names)}), or 'grad' to rewrite the incoming gradient")
        if not isinstance(text, str):
            raise RegistryError(f"{where}: derivative term {term!r} must be an expression string")
    return OpSchema(
        name=name, file=file, signature_text=entry["signature"], params=params, returns=returns, family=family,
        dtypes=dtypes, kind=kind,
        composite=entry.get("composite"), result=entry.get("result", "promoted"),
        int_to_float=entry.get("int_to_float", False), methods=tuple(entry.get("methods", ())),
        derivatives=dict(entry.get("derivatives", {})), derivative_terms=dict(entry.get("derivative_terms", {})),
        differentiable=entry.get("differentiable", True),
        deterministic=entry.get("deterministic", True), fallback=entry.get("fallback", True),
        doc=entry.get("doc", ""),
    )


class Registry:
    """All op schemas by qualified name (``add``, ``myvendor.fused_gelu``)."""

    def __init__(self) -> None:
        self.ops: dict[str, OpSchema] = {}

    def load_file(self, path: str | Path) -> list[OpSchema]:
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise RegistryError(f"{path}: not valid TOML: {exc}") from None
        namespace = data.pop("namespace", None)
        ops = data.pop("ops", None)
        if data:
            raise RegistryError(f"{path}: unexpected top-level keys {sorted(data)}; ops go under [ops.<name>]")
        if not isinstance(ops, dict) or not ops:
            raise RegistryError(f"{path}: declares no ops (expected [ops.<name>] tables)")
        if namespace is not None and (not isinstance(namespace, str) or not namespace.isidentifier()):
            raise RegistryError(f"{path}: namespace must be an identifier, got {namespace!r}")
        loaded = []
        for name, entry in ops.items():
            qualified = f"{namespace}.{name}" if namespace else name
            if qualified in self.ops:
                raise RegistryError(f"{path}: op {qualified!r} is already declared in {self.ops[qualified].file}")
            schema = parse_op(qualified, entry, str(path))
            loaded.append(schema)
        for schema in loaded:
            self.ops[schema.name] = schema
        return loaded

    def get(self, name: str) -> OpSchema | None:
        return self.ops.get(name)

    def __getitem__(self, name: str) -> OpSchema:
        return self.ops[name]

    def __iter__(self):
        return iter(self.ops.values())


def _load_core() -> Registry:
    registry = Registry()
    for path in sorted(Path(__file__).parent.glob("*.toml")):
        registry.load_file(path)
    return registry


REGISTRY = _load_core()

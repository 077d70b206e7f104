"""The elementwise families: unary and binary ops (elementwise.toml's, and the nn activations that
have a fused kernel), where, and copy / astype: each call is one ``OpLayer.elementwise`` launch
(or a few, past EG_MAX_DIMS dims) of the generated kernel of its dtypes."""

from __future__ import annotations

from typing import Any

from ember_core import dtypes
from ember_core.errors import DTypeError
from ember_gpu.ops import ELEMENTWISE_VARIANTS, Entry, OpLayer, kernel_names

Names = tuple[str, ...]


def _complete(layer: OpLayer, prefix: str) -> dict[str, Names]:
    """key -> its kernel names, for the keys of ``<prefix>_<key>_<variant>`` built in every variant."""
    return {key: kernel_names(f"{prefix}_{key}") for key, built in layer.variants(prefix).items()
            if built.issuperset(ELEMENTWISE_VARIANTS)}


def _by_op(layer: OpLayer, kind: str) -> dict[str, dict[str, Names]]:
    """op -> dtype -> kernel names, for ``eg_<kind>_<op>_<dtype>`` (op names may hold underscores)."""
    found: dict[str, dict[str, Names]] = {}
    for key, names in _complete(layer, f"eg_{kind}").items():
        op, dtype = key.rsplit("_", 1)
        found.setdefault(op, {})[dtype] = names
    return found


def _unary(layer: OpLayer, names: dict[str, Names]) -> Any:
    elementwise = layer.elementwise

    def kernel(out: Any, x: Any) -> None:
        elementwise(names[x._dtype.name], out, x)

    return kernel


def _binary(layer: OpLayer, names: dict[str, Names]) -> Any:
    elementwise = layer.elementwise

    def kernel(out: Any, a: Any, b: Any) -> None:  # out may be a itself (x += y): each element is read first
        elementwise(names[a._dtype.name], out, a, b)

    return kernel


def _where(layer: OpLayer, names: dict[str, Names]) -> Any:
    elementwise = layer.elementwise

    def kernel(out: Any, cond: Any, a: Any, b: Any) -> None:
        elementwise(names[out._dtype.name], out, cond, a, b)

    return kernel


def _copy(layer: OpLayer, names: dict[tuple[str, str], Names]) -> Any:
    elementwise = layer.elementwise

    def kernel(out: Any, x: Any) -> None:  # out may be any strided view, of any dtype check_cast allows
        elementwise(names[x._dtype.name, out._dtype.name], out, x)

    return kernel


def _castable(source: dtypes.DType) -> list[str]:
    """The destinations the core lets ``source`` convert to (its copy kernel must write each)."""
    found = []
    for target in dtypes.ALL_DTYPES:
        try:
            dtypes.check_cast(source, target, "astype")
        except DTypeError:
            continue
        found.append(target.name)
    return found


def kernels(layer: OpLayer) -> dict[str, Entry]:
    table: dict[str, Entry] = {}
    for kind, make in (("unary", _unary), ("binary", _binary)):
        for op, names in _by_op(layer, kind).items():
            table[op] = make(layer, names), frozenset(names)
    where = _complete(layer, "eg_where")
    if where:
        table["where"] = _where(layer, where), frozenset(where)
    pairs = {tuple(key.split("_to_")): names for key, names in _complete(layer, "eg_copy").items()}
    sources = frozenset(d.name for d in dtypes.ALL_DTYPES if all((d.name, t) in pairs for t in _castable(d)))
    if sources:
        copy = _copy(layer, pairs)
        table["copy"] = table["astype"] = copy, sources
    return table

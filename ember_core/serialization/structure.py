"""Objects to and from JSON plus a table of storages: how em.save keeps nesting, numbers and sharing.

Containers and scalars become tagged JSON (``{"$dict": [[key, value], ...]}``, ``{"$tuple": [...]}``...), never
pickle, so loading runs no code.  Each tensor becomes ``{"$tensor": entry, dtype, shape, strides, offset,
device, requires_grad, parameter}``; the entry is one safetensors tensor holding its whole storage, written
once however many tensors (views, tied weights) share it.
"""

from __future__ import annotations

import math
import sys
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from ember_core import dtypes as _dt
from ember_core.device import Device
from ember_core.errors import NotSerializableError, SerializationError
from ember_core.serialization.safetensors import Entry
from ember_core.tensor import Storage, Tensor, span

_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class Packer:
    """Turns an object into JSON, collecting the storages of its tensors (each under one entry name)."""

    def __init__(self) -> None:
        self.storages: dict[int, tuple[str, Storage, list[Tensor]]] = {}  # id(storage) -> (entry, storage, users)
        self._names: set[str] = set()
        self._tensors: dict[int, int] = {}  # id(tensor) -> its number: a tensor saved twice loads as one object

    def pack(self, obj: Any, path: str = "") -> Any:
        if obj is None or isinstance(obj, (bool, int, str)):
            return obj
        if isinstance(obj, float):
            return obj if math.isfinite(obj) else {"$float": repr(obj)}
        if isinstance(obj, complex):
            return {"$complex": [self.pack(obj.real), self.pack(obj.imag)]}
        if isinstance(obj, Tensor):
            return self._pack_tensor(obj, path or "tensor")
        if isinstance(obj, np.generic) and obj.dtype.kind in "biufc":  # a numpy scalar: its Python value
            return self.pack(obj.item(), path)
        if isinstance(obj, _dt.DType):
            return {"$dtype": obj.name}
        if isinstance(obj, Device):
            return {"$device": str(obj)}
        if isinstance(obj, dict):
            tag = "$odict" if isinstance(obj, OrderedDict) else "$dict"
            return {tag: [[self.pack(k), self.pack(v, _join(path, k))] for k, v in obj.items()]}
        if isinstance(obj, (list, tuple)):
            items = [self.pack(v, _join(path, i)) for i, v in enumerate(obj)]
            return items if isinstance(obj, list) else {"$tuple": items}
        raise NotSerializableError(
            f"em.save stores tensors, dicts, lists, tuples, numbers, strings, None, dtypes and devices; "
            f"{path or 'the object'} is a {type(obj).__name__} (save its state_dict() instead)")

    def _pack_tensor(self, t: Tensor, path: str) -> dict[str, Any]:
        if t.grad_fn is not None:
            raise NotSerializableError(f"em.save: {path} was computed by a recorded op (grad_fn={t.grad_fn!r}); "
                                       f"save {path}.detach()")
        slot = self.storages.get(id(t._storage))
        if slot is None:
            name = path
            while name in self._names or name == "__metadata__":  # (the header's own key)
                name += "#"
            self._names.add(name)
            slot = self.storages[id(t._storage)] = (name, t._storage, [])
        if id(t) not in self._tensors:
            self._tensors[id(t)] = len(self._tensors)
            slot[2].append(t)
        number = self._tensors[id(t)]
        parameters = sys.modules.get("ember_core.nn.parameter")
        return {"$tensor": slot[0], "id": number, "dtype": t.dtype.name, "shape": list(t.shape),
                "strides": list(t.strides), "offset": t.offset, "device": str(t.device),
                "requires_grad": t.requires_grad,
                "parameter": parameters is not None and isinstance(t, parameters.Parameter)}

    def entries(self) -> list[tuple[str, Storage, _dt.DType, tuple[int, ...]]]:
        """(name, storage, dtype, shape) per storage, largest alignment first so every entry stays aligned.
        A storage one whole contiguous tensor owns is stored in that tensor's shape (PyTorch reads it as
        that tensor); a shared one as a flat array of its first user's dtype (bytes when it does not divide)."""
        out = []
        for name, storage, users in self.storages.values():
            t = users[0]
            whole = len(users) == 1 and t.is_contiguous and t.offset == 0 and t.nbytes == storage.nbytes
            if whole:
                out.append((name, storage, t.dtype, t.shape))
            elif storage.nbytes % t.itemsize == 0:
                out.append((name, storage, t.dtype, (storage.nbytes // t.itemsize,)))
            else:
                out.append((name, storage, _dt.uint8, (storage.nbytes,)))
        return sorted(out, key=lambda e: (-e[2].itemsize, e[0]))


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


class Unpacker:
    """Rebuilds an object from its JSON; ``storage(entry_name, saved_device)`` gives each entry's storage."""

    def __init__(self, filename: str, entries: dict[str, Entry], storage: Callable[[str, str], Storage]) -> None:
        self.filename, self.entries, self.storage = filename, entries, storage
        self._tensors: dict[int, Tensor] = {}

    def fail(self, problem: str) -> SerializationError:
        return SerializationError(f"{self.filename}: {problem} in the ember structure metadata")

    def unpack(self, node: Any) -> Any:
        if node is None or isinstance(node, (bool, int, str, float)):
            return node
        if isinstance(node, list):
            return [self.unpack(v) for v in node]
        if not isinstance(node, dict) or not node:
            raise self.fail(f"unexpected node {node!r:.80}")
        tag = next(iter(node))
        if tag == "$tensor":
            number = node.get("id")
            if type(number) is not int:
                raise self.fail("a tensor without its id")
            if number not in self._tensors:
                self._tensors[number] = self._tensor(node)
            return self._tensors[number]
        if len(node) != 1:
            raise self.fail(f"node {tag!r} has extra keys")
        value = node[tag]
        if tag in ("$dict", "$odict") and isinstance(value, list) and all(_pair(p) for p in value):
            pairs = [(self._key(k), self.unpack(v)) for k, v in value]
            return OrderedDict(pairs) if tag == "$odict" else dict(pairs)
        if tag == "$tuple" and isinstance(value, list):
            return tuple(self.unpack(v) for v in value)
        if tag == "$float" and value in _NON_FINITE:
            return _NON_FINITE[value]
        if tag == "$complex" and isinstance(value, list) and len(value) == 2:
            re, im = (self.unpack(v) for v in value)
            if isinstance(re, float) and isinstance(im, float):
                return complex(re, im)
        if tag == "$dtype" and value in _dt.BY_NAME:
            return _dt.BY_NAME[value]
        if tag == "$device" and isinstance(value, str):
            return Device(*_split_device(value))
        raise self.fail(f"malformed {tag!r} node")

    def _key(self, node: Any) -> Any:
        key = self.unpack(node)
        try:
            hash(key)
        except TypeError:
            raise self.fail(f"a dict key of type {type(key).__name__}") from None
        return key

    def _tensor(self, node: dict[str, Any]) -> Tensor:
        name, dtype, shape, strides, offset = (node.get(k) for k in ("$tensor", "dtype", "shape", "strides", "offset"))
        entry = self.entries.get(name) if isinstance(name, str) else None
        if entry is None:
            raise self.fail(f"a tensor refers to entry {name!r}, which the file does not have")
        if dtype not in _dt.BY_NAME or not _ints(shape) or not _ints(strides) or len(shape) != len(strides) \
                or any(n < 0 for n in shape) or type(offset) is not int or offset < 0:
            raise self.fail(f"tensor over {name!r} has a malformed layout")
        dt = _dt.BY_NAME[dtype]
        if math.prod(shape):
            lo, hi = span(tuple(shape), tuple(strides), offset)
            if lo < 0 or (hi + 1) * dt.itemsize > entry.end - entry.begin:
                raise self.fail(f"tensor over {name!r} reaches outside its {entry.end - entry.begin} bytes")
        device = node.get("device")
        if not isinstance(device, str):
            raise self.fail(f"tensor over {name!r} has no device")
        t = Tensor._make(self.storage(name, device), tuple(shape), tuple(strides), offset, dt)
        if node.get("requires_grad") is True and dt.kind in "fc":
            t._requires_grad = True
        if node.get("parameter") is True:
            from ember_core.nn import parameter

            parameter.remember(t)
        return t


def _pair(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2


def _ints(value: Any) -> bool:
    return isinstance(value, list) and all(type(v) is int for v in value)


def _split_device(name: str) -> tuple[str, int]:
    kind, _, index = name.partition(":")
    return kind, int(index) if index.isdigit() else 0

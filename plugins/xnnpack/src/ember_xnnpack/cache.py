"""The operator cache: XNNPACK packs weights when an operator is created (~77 ms for a 4096^2
layer), so operators are kept and reused while their weights are unchanged.

An entry is keyed by what the operator was built from: the op and its parameters, and for each
weight tensor (weight, bias) the identity of its storage plus its offset, shape and strides.  The
entry remembers the storages' version counters (bumped by every in-place write): a version that
moved (an optimizer step, ``w[...] = ...``) makes the entry stale, and its operator is replaced,
so at most one operator per weight layout lives at a time.  Storages are held weakly; an entry
whose storage died is dropped on the next lookup.  Least recently used entries are evicted beyond
``max_entries`` or ``max_bytes`` of weights.

Writes that bypass ember (numpy writes into memory shared through ``from_numpy`` or
``.numpy()``) do not bump the version: call ``clear_cache()`` after such writes.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from ember_xnnpack import runtime
from ember_xnnpack._native import lib

DEFAULT_MAX_ENTRIES = 256
DEFAULT_MAX_BYTES = 1 << 30


@dataclass
class _Entry:
    operator: Any
    versions: tuple[int, ...]
    storages: tuple[weakref.ref, ...]
    nbytes: int


class OperatorCache:
    """LRU of XNNPACK operators.  Every method runs with ``runtime.LOCK`` held by the caller."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self.nbytes = 0
        self.hits = self.misses = self.evictions = 0
        self._dead: list[Hashable] = []  # keys whose storage was collected (appended by weakref callbacks)

    def operator(self, params: Hashable, tensors: tuple[Any, ...], create: Callable[[], Any]) -> Any:
        """The cached operator for ``params`` built from ``tensors`` (None entries allowed), or a
        new one from ``create()`` (which raises or returns the operator pointer)."""
        if self._dead:
            self._drop_dead()
        live = tuple(t for t in tensors if t is not None)
        key = (params, *((id(t._storage), t._offset, t._shape, t._strides) if t is not None else None
                         for t in tensors))
        versions = tuple(t._storage.version for t in live)
        entry = self.entries.get(key)
        if entry is not None:
            if entry.versions == versions and all(ref() is t._storage for ref, t in zip(entry.storages, live)):
                self.entries.move_to_end(key)
                self.hits += 1
                return entry.operator
            self._remove(key)
        self.misses += 1
        operator = create()
        nbytes = sum(t._numel * t._dtype.itemsize for t in live)
        on_death = _on_storage_death(weakref.ref(self), key)
        self.entries[key] = _Entry(operator, versions, tuple(weakref.ref(t._storage, on_death) for t in live), nbytes)
        self.nbytes += nbytes
        self.shrink(keep=1)  # never the operator about to run
        return operator

    def shrink(self, keep: int = 0) -> None:
        """Evict least recently used entries until both limits hold (or only ``keep`` are left)."""
        while len(self.entries) > keep and (len(self.entries) > self.max_entries or self.nbytes > self.max_bytes):
            self._remove(next(iter(self.entries)))
            self.evictions += 1

    def _remove(self, key: Hashable) -> None:
        entry = self.entries.pop(key, None)
        if entry is not None:
            self.nbytes -= entry.nbytes
            lib.exn_delete_operator(entry.operator)

    def _drop_dead(self) -> None:
        dead, self._dead = self._dead, []
        for key in dead:
            entry = self.entries.get(key)
            if entry is not None and any(ref() is None for ref in entry.storages):
                self._remove(key)

    def clear(self) -> None:
        for key in list(self.entries):
            self._remove(key)
        self._dead.clear()


def _on_storage_death(cache_ref: weakref.ref, key: Hashable) -> Callable[[Any], None]:
    """A weakref callback that only records the key: it may run at any allocation, so the
    operator is deleted later, under the lock, by the next lookup."""

    def callback(_: Any) -> None:
        cache = cache_ref()
        if cache is not None:
            cache._dead.append(key)

    return callback


CACHE = OperatorCache()


def clear_cache() -> None:
    """Delete every cached operator and release the layout workspace."""
    with runtime.LOCK:
        CACHE.clear()
        lib.exn_release_workspace()


def set_cache_limits(max_entries: int | None = None, max_bytes: int | None = None) -> None:
    """Bound the cache by operator count and by the bytes of the weights they were built from."""
    for name, value in (("max_entries", max_entries), ("max_bytes", max_bytes)):
        if value is not None and (not isinstance(value, int) or value < 0):
            raise ValueError(f"set_cache_limits: {name} must be a non-negative int, got {value!r}")
    with runtime.LOCK:
        if max_entries is not None:
            CACHE.max_entries = max_entries
        if max_bytes is not None:
            CACHE.max_bytes = max_bytes
        CACHE.shrink()


def cache_info() -> dict[str, int]:
    """Hits, misses, evictions, live entries, weight bytes held, and the layout workspace size."""
    with runtime.LOCK:
        return {"hits": CACHE.hits, "misses": CACHE.misses, "evictions": CACHE.evictions,
                "entries": len(CACHE.entries), "weight_bytes": CACHE.nbytes,
                "max_entries": CACHE.max_entries, "max_bytes": CACHE.max_bytes,
                "workspace_bytes": lib.exn_workspace_bytes()}

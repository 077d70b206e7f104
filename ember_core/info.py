"""``__array_namespace_info__()``: what this installation offers (Array API 2023.12)."""

from __future__ import annotations

from typing import Any

from ember_core import dtypes as dt
from ember_core.device import Device, default_device
from ember_core.plugins import MANAGER

_BEYOND_STANDARD = frozenset({dt.float16, dt.bfloat16})  # ember's dtypes the Array API 2023.12 does not define


class Info:
    def capabilities(self) -> dict[str, Any]:
        return {"boolean indexing": True, "data-dependent shapes": True}

    def default_device(self) -> Device:
        return default_device()

    def default_dtypes(self, *, device: Any = None) -> dict[str, dt.DType]:
        return {"real floating": dt.default_float, "complex floating": dt.default_complex,
                "integral": dt.default_int, "indexing": dt.index_dtype}

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, dt.DType]:
        """The Array API dtypes of ``kind`` (all of them by default).  ember's float16 and bfloat16,
        which the standard does not define, are listed when kind names them: kind=ember_core.bfloat16,
        or a tuple holding it."""
        named = set(kind) if isinstance(kind, tuple) else {kind}
        return {d.name: d for d in dt.ALL_DTYPES
                if (kind is None or dt.isdtype(d, kind)) and (d not in _BEYOND_STANDARD or d in named)}

    def devices(self) -> list[Device]:
        MANAGER.ensure_discovered()
        found = []
        for device_type, backend in sorted(MANAGER.device_owner.items()):
            count = backend.hooks["ember_device_count"](device_type=device_type)
            found += [Device(device_type, i) for i in range(count)]
        return found

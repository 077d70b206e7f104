"""ember-xnnpack: XNNPACK kernels for Ember's ``cpu`` tensors, beside ember-cpu (which serves
everything XNNPACK does not).  Operators are created once per weight version and cached; see
``ember_xnnpack.cache``.  Importing this package loads no native code (the plugin contract): the
cache functions below import it on first use."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["cache_info", "clear_cache", "set_cache_limits"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from ember_xnnpack import cache

        return getattr(cache, name)
    raise AttributeError(f"module 'ember_xnnpack' has no attribute {name!r}")

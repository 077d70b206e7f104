"""ember-xnnpack's hooks: a kernel-only plugin for ember-cpu's ``cpu`` device (it owns no device
type, so it implements no device hooks).  Nothing native is loaded at import: the compiled module
is imported by ``ember_plugin_info``, and XNNPACK initialised on the first kernel call."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ember_xnnpack
from ember_core.plugins import PluginInfo, hookimpl

_HERE = Path(__file__).resolve().parent


@hookimpl
def ember_plugin_info() -> PluginInfo:
    from ember_xnnpack._native import lib

    return PluginInfo(name="xnnpack", version=ember_xnnpack.__version__, abi=(lib.EMBER_ABI_MAJOR, lib.EMBER_ABI_MINOR),
                      device_types=(), manifest=_HERE / "manifest.toml", package="ember-xnnpack")


@hookimpl
def ember_kernels(device_type: str) -> Mapping[str, Any]:
    if device_type != "cpu":
        return {}
    from ember_xnnpack.kernels import KERNELS

    return KERNELS


@hookimpl
def ember_set_num_threads(n: int) -> None:
    from ember_xnnpack import runtime

    runtime.set_num_threads(n)

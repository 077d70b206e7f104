"""``--plugin module:object`` / ``--plugin path/to/file.py:object``: register a backend that is not
an installed package (a vendor's work in progress, the suite's own broken test backends), in the
runner and in every worker.  ``EMBER_CONFORMANCE_PLUGINS`` (comma-separated) does the same."""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from typing import Any

from ember_conformance import contract

ENV = "EMBER_CONFORMANCE_PLUGINS"


def specs_from_env() -> list[str]:
    return [s.strip() for s in os.environ.get(ENV, "").split(",") if s.strip()]


def _load_object(spec: str) -> Any:
    target, _, attr = spec.rpartition(":") if ":" in spec else (spec, "", "")
    if target.endswith(".py"):
        path = Path(target).resolve()
        module_spec = importlib.util.spec_from_file_location(f"_ember_conformance_plugin_{path.stem}", path)
        if module_spec is None or module_spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    obj = getattr(module, attr) if attr else module
    return obj() if isinstance(obj, type) else obj


_done: set[str] = set()


def register_all(specs: list[str]) -> None:
    """Register each plugin once; a failure is recorded for the level-0 discovery check, not raised."""
    from ember_core import plugins

    for spec in specs:
        if spec in _done:
            continue
        _done.add(spec)
        try:
            plugins.register(_load_object(spec))
        except Exception as exc:  # the vendor's code: report it as a contract failure
            contract.PLUGIN_ERRORS.append(f"{spec}: {type(exc).__name__}: {exc}")

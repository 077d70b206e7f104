"""Helpers for the xnnpack tests: which provider served a call (a uniquely named module, since
every test directory of the repository has its own conftest)."""

from __future__ import annotations

import ember_core as em


def traced(fn, *args, **kwargs):
    """(result, {op: {provider: calls}}) of one call."""
    with em.trace_dispatch() as log:
        result = fn(*args, **kwargs)
    return result, log.providers()


def served_by(providers: dict, op: str) -> set[str]:
    return set(providers.get(op, {}))

"""Shared fixtures: random float32 inputs, and calls traced to see which provider served them."""

from __future__ import annotations

import numpy as np
import pytest

import ember_core as em
from ember_core.plugins import MANAGER


@pytest.fixture(scope="session", autouse=True)
def xnnpack_installed():
    MANAGER.ensure_discovered()
    if "xnnpack" not in MANAGER.backends:
        broken = MANAGER.broken.get("xnnpack")
        pytest.fail(f"ember-xnnpack is not registered ({broken.reason if broken else 'not installed'}): "
                    f"pip install -e ./plugins/xnnpack")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def traced(fn, *args, **kwargs):
    """(result, {op: {provider: calls}}) of one call."""
    with em.trace_dispatch() as log:
        result = fn(*args, **kwargs)
    return result, log.providers()


def served_by(providers: dict, op: str) -> set[str]:
    return set(providers.get(op, {}))

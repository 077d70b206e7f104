"""Shared fixtures: the plugin must be installed; random float32 inputs."""

from __future__ import annotations

import numpy as np
import pytest

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


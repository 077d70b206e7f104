from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def toy():
    """The toy backend registered for one test, unregistered afterwards."""
    from toy_backend import Toy

    from ember_core import plugins

    backend = plugins.register(Toy())
    yield backend
    plugins.unregister(backend.name)


@pytest.fixture(params=["cpu", "vulkan:0"])
def device(request):
    """The test once on cpu and once on vulkan:0 (skipped with the reason where ember-vulkan has no
    device)."""
    import ember_core as em

    device = em.as_device(request.param)
    try:
        device.backend  # noqa: B018  (resolves the plugin, or explains why not)
    except em.BackendUnavailableError as exc:
        pytest.skip(str(exc))
    return device

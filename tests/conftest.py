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

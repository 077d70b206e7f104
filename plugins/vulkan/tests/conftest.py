"""ember-vulkan's tests run on the first Vulkan device (Mesa's lavapipe in CI:
VK_DRIVER_FILES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json).  Without the plugin or a usable device
every test that needs one is skipped with the reason; the tests marked ``no_device`` run anyway."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# the project's shared tolerance table and layout helpers (tests/tolerances.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))


def _unavailable() -> str | None:
    try:
        from ember_vulkan import plugin
    except ImportError as exc:
        return f"ember-vulkan is not installed ({exc}); pip install -e ./plugins/vulkan"
    if plugin.ember_device_count("vulkan") == 0:
        return f"no Vulkan device: {plugin.ember_device_unavailable_reason('vulkan')}"
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "no_device: runs without a Vulkan device")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    mine = [item for item in items if Path(str(item.fspath)).resolve().parent == here]
    reason = _unavailable() if mine else None
    if reason is None:
        return
    for item in mine:
        if "no_device" not in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def vk():
    """vulkan:0 as the default device, with the CPU fallback turned into an error: a test of a
    native kernel must not pass because the host did the work."""
    import ember_core as em

    previous = em.default_device()
    em.set_default_device("vulkan:0")
    try:
        with em.fallback_policy("error"):
            yield em.as_device("vulkan:0")
    finally:
        em.set_default_device(previous)


@pytest.fixture(params=["cpu-device-shaders", "gpu-shaders"])
def shader_family(request, vk):
    """Runs a test with the shaders CPU devices (lavapipe) get and again with the ones GPUs get,
    so that CI on lavapipe checks both."""
    from ember_vulkan import runtime

    dev = runtime.device(vk.index)
    saved = dev.is_cpu
    dev.is_cpu = request.param == "cpu-device-shaders"
    try:
        yield
    finally:
        dev.is_cpu = saved

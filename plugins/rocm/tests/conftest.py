"""ember-rocm's tests.  No AMD GPU is available to this project: tests that need one are skipped
with the reason; those marked ``no_device`` run anyway: the vendor table, the build's code
objects, the decline path against the real libamdhip64 (CI installs Debian's), and the installed
plugin on ember-gpu's fake driver with the HIP table (``fake_rocm``, wave 64 and wave 32)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

HOST_KERNELS = Path(__file__).resolve().parents[2] / "gpu" / "build" / "host-kernels"  # shared with ember-gpu's tests


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "no_device: runs without an AMD GPU")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(str(item.fspath)).resolve().parent == here and "no_device" not in item.keywords:
            item.add_marker(pytest.mark.skip(reason="needs an AMD GPU, which this project has none of"))


@pytest.fixture(scope="session")
def host_kernels() -> Path:
    """The host libraries of ember-gpu's kernels (built on first use)."""
    from ember_gpu.build import build_host_libraries

    build_host_libraries(HOST_KERNELS)
    return HOST_KERNELS


@pytest.fixture(params=[64, 32], ids=["wave64", "wave32"])
def fake_rocm(request, host_kernels):
    """The installed ember-rocm plugin on ember-gpu's fake driver with the HIP table: two GPUs
    (rocm:0, rocm:1) of 64 MiB reporting a wave size of 64 (CDNA) or 32 (RDNA), whose kernels run
    on the host; afterwards the plugin goes back to the real library and the core forgets them."""
    from ember_gpu.fake import FakeGpu
    from ember_gpu.plugin import open_driver_or_fake
    from ember_rocm.plugin import PLUGIN
    from ember_rocm.vendor import hip_vendor

    import ember_core as em
    from ember_core.device import forget_device_types

    fake = FakeGpu(hip_vendor(request.param), devices=2, memory_bytes=64 << 20, name="AMD Fake Instinct",
                   driver_version=50221153, host_kernels=host_kernels)
    forget_device_types(("rocm",))
    PLUGIN.runtime.reset(opener=fake.open)
    try:
        with em.fallback_policy("allow"):
            yield fake
    finally:
        gc.collect()
        forget_device_types(("rocm",))
        PLUGIN.runtime.reset(opener=open_driver_or_fake)

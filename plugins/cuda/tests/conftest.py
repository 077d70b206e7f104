"""ember-cuda's tests.  Those that need a GPU run on the first CUDA device and are skipped with the
reason where there is none (CI: no driver); those marked ``no_device`` run anyway: the vendor
table, the decline paths, and the installed plugin on ember-gpu's fake driver (``fake_cuda``)."""

from __future__ import annotations

import functools
import gc
from pathlib import Path

import pytest

HOST_KERNELS = Path(__file__).resolve().parents[2] / "gpu" / "build" / "host-kernels"  # git-ignored, shared with
# ember-gpu's tests (only changed sources recompile)


def _unavailable() -> str | None:
    try:
        from ember_cuda import plugin
    except ImportError as exc:
        return f"ember-cuda is not installed ({exc}); pip install -e ./plugins/gpu -e ./plugins/cuda"
    if plugin.ember_device_count("cuda") == 0:
        return f"no CUDA device: {plugin.ember_device_unavailable_reason('cuda')}"
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "no_device: runs without a CUDA device")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    mine = [item for item in items if Path(str(item.fspath)).resolve().parent == here]
    reason = _unavailable() if mine else None
    if reason is None:
        return
    for item in mine:
        if "no_device" not in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def host_kernels() -> Path:
    """The host libraries of ember-gpu's kernels (built on first use)."""
    from ember_gpu.build import build_host_libraries

    build_host_libraries(HOST_KERNELS)
    return HOST_KERNELS


@pytest.fixture
def fake_cuda(host_kernels):
    """The installed ember-cuda plugin on ember-gpu's fake driver with two GPUs (cuda:0, cuda:1) of
    64 MiB whose kernels run on the host; afterwards the plugin goes back to the real driver and
    the core forgets the devices."""
    from ember_cuda.plugin import PLUGIN
    from ember_cuda.vendor import CUDA
    from ember_gpu.fake import FakeGpu
    from ember_gpu.plugin import open_driver_or_fake

    import ember_core as em
    from ember_core.device import forget_device_types

    fake = FakeGpu(CUDA, devices=2, memory_bytes=64 << 20, name="NVIDIA Fake H200", host_kernels=host_kernels)
    forget_device_types(("cuda",))
    PLUGIN.runtime.reset(opener=fake.open)
    try:
        with em.fallback_policy("allow"):
            yield fake
    finally:
        gc.collect()  # tensors of this test die now, not pooled into the next test's devices
        forget_device_types(("cuda",))
        PLUGIN.runtime.reset(opener=open_driver_or_fake)


@pytest.fixture
def no_claimed_op_falls_back(fake_cuda):
    """fake_cuda, then the check that no op the build claims (those the composites call included)
    ran through the CPU fallback: what the op tests on the fake hold every test to."""
    import ember_core as em

    em.reset_fallback_report()
    yield fake_cuda
    claimed = _claimed_ops()
    fell_back = [entry for entry in em.fallback_report() if entry["op"] in claimed]
    assert not fell_back, f"claimed ops ran through the CPU fallback: {fell_back}"


@functools.cache
def _claimed_ops() -> frozenset[str]:
    from ember_gpu import ops

    return frozenset(ops.claimed(ops.OpLayer(ops.kernel_index(ops.package_kernels("ember_cuda"))).table()))

"""ember-gpu's runtime tests run on the fake driver (ember_gpu.fake) under a made-up vendor table
(testgpu_vendor.TEST_VENDOR)."""

from __future__ import annotations

import pytest
from testgpu_vendor import TEST_VENDOR


@pytest.fixture
def fake():
    from ember_gpu.fake import FakeGpu

    return FakeGpu(TEST_VENDOR, devices=2, memory_bytes=1 << 20, compute_capability=(3, 5))


@pytest.fixture
def runtime(fake, tmp_path):
    """A runtime of TEST_VENDOR on the fake driver; kernel images come from tmp_path/kernels."""
    import sys

    from ember_gpu.runtime import Runtime

    package = tmp_path / "ember_testgpu_images"
    (package / "kernels").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    sys.path.insert(0, str(tmp_path))
    try:
        yield Runtime(TEST_VENDOR, "ember_testgpu_images", opener=fake.open)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("ember_testgpu_images", None)


@pytest.fixture
def device(runtime):
    return runtime.device(0)

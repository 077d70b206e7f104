"""The manifest claims exactly what the shaders implement, every claim is an op x dtype the
registry accepts, and every SPIR-V variant the kernels can ask for was built."""

from __future__ import annotations

import sys
from importlib import resources

import pytest
from ember_vulkan import catalog
from ember_vulkan.kernels import KERNELS, claimed_dtypes

from ember_core.ops.registry import REGISTRY

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

pytestmark = pytest.mark.no_device


def _manifest() -> dict[str, list[str]]:
    text = resources.files("ember_vulkan").joinpath("manifest.toml").read_text()
    return tomllib.loads(text)["kernels"]["vulkan"]


def test_manifest_equals_the_kernel_table():
    manifest = _manifest()
    assert set(manifest) == set(KERNELS)
    assert {op: sorted(d) for op, d in manifest.items()} == {op: sorted(d) for op, d in claimed_dtypes().items()}


def test_claims_are_dtypes_the_registry_accepts():
    for op, dtypes in _manifest().items():
        accepted = {d.name for d in REGISTRY[op].dtypes}
        assert set(dtypes) <= accepted, (op, set(dtypes) - accepted)


def test_every_variant_was_compiled():
    spirv = resources.files("ember_vulkan").joinpath("spirv")
    missing = [v.name for v in catalog.variants() if not spirv.joinpath(f"{v.name}.spv").is_file()]
    assert not missing

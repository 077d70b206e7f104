"""The deviations ember-vulkan declares to conformance: accuracy bounds everywhere, flush-to-zero only on a
device that reports flushing (lavapipe lacks shaderDenormPreserveFloat32, so it reports "flushed" even
though it keeps subnormals; the preserving case is shown by making the runtime keep them)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ember_vulkan import runtime

precision = pytest.importorskip("ember_conformance.precision")


@pytest.fixture
def fresh() -> Iterator[None]:
    precision.deviations.cache_clear()
    yield
    precision.deviations.cache_clear()


def test_accuracy_bounds_are_declared(fresh: None) -> None:
    declared = precision.deviations("vulkan:0")
    assert {op: declared[f"{op}:float32"][0] for op in ("sin", "cos", "tan", "erfc")} == {
        "sin": {"ulp": 4}, "cos": {"ulp": 4}, "tan": {"ulp": 4}, "erfc": {"ulp": 8}}
    assert declared["sin:float32"][1] == "ember-vulkan"


def test_ftz_follows_the_reported_subnormal_mode(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    device = runtime.device(0)
    monkeypatch.setattr(device, "keep_subnormals", ())
    assert precision.declared_ftz("vulkan:0", "float32") == "ember-vulkan"
    assert precision.declared_ftz("vulkan:0", "bfloat16") == "ember-vulkan"
    assert precision.declared_ftz("vulkan:0", "float16") == "ember-vulkan"
    precision.deviations.cache_clear()
    monkeypatch.setattr(device, "keep_subnormals", (32,))
    assert precision.declared_ftz("vulkan:0", "float32") is None
    assert precision.declared_ftz("vulkan:0", "bfloat16") is None
    assert precision.declared_ftz("vulkan:0", "float16") == "ember-vulkan"
    precision.deviations.cache_clear()
    monkeypatch.setattr(device, "keep_subnormals", (32, 16))
    assert "ftz" not in precision.deviations("vulkan:0")

"""The campaign covers every op of the registry: each test_prop_* module lists the ops its properties
exercise in ``COVERED``, and an op declared tomorrow fails this test until a property holds it."""

from __future__ import annotations

import importlib
from pathlib import Path

from ember_core.ops.registry import REGISTRY

# ops whose results are random: their distributions are tested statistically (plugins/*/tests and the
# conformance suite's randomness samples), which a property against a fixed reference cannot do
RANDOM = {"random_uniform", "random_normal", "random_integers", "bernoulli", "permutation"}


def covered() -> dict[str, list[str]]:
    """op -> the campaign modules that cover it."""
    out: dict[str, list[str]] = {}
    for path in sorted(Path(__file__).parent.glob("test_prop_*.py")):
        if path.stem == Path(__file__).stem:
            continue
        for op in importlib.import_module(path.stem).COVERED:
            out.setdefault(op, []).append(path.stem)
    return out


def test_every_registry_op_is_covered():
    ops = {s.name for s in REGISTRY}
    missing = sorted(ops - set(covered()) - RANDOM)
    assert not missing, f"no property covers {missing}: add them to a tests/properties/test_prop_*.py module"


def test_covered_names_are_registry_ops():
    unknown = sorted(set(covered()) - {s.name for s in REGISTRY})
    assert not unknown, f"COVERED names ops the registry does not declare: {unknown}"

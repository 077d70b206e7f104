"""Ember's conformance suite: run it against a backend to learn, per (op, dtype, sample), whether
the backend is correct, and which levels of the contract it meets.

``ember-conformance run --device NAME --out DIR`` (see README.md) or
``pytest --pyargs ember_conformance --ember-device NAME``.
"""

from __future__ import annotations

__version__ = "0.1.0"
# bump on any incompatible change of report.json (documented in README.md);
# 2: fallback is never a pass, levels state their requirement
REPORT_SCHEMA_VERSION = 2

LEVELS = {
    0: "contract",
    1: "ops in the primary dtype",
    2: "every other dtype",
    3: "autograd",
    4: "end to end",
}

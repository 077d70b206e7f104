"""Sample inputs per op family, as PyTorch's OpInfo generates them: typical values, every memory
layout, broadcasting, 0-d and zero-size tensors, Python scalars, extreme values, and error inputs
that must raise a documented typed error.

``samples_for(schema, dtype, device, level)`` is deterministic: the parent process and the
workers regenerate the same samples (and so the same case ids) independently.
"""

from __future__ import annotations

from ember_conformance.samples.base import Arr, Sample
from ember_conformance.samples.catalog import samples_for

__all__ = ["Arr", "Sample", "samples_for"]

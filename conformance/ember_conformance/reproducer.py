"""A short, self-contained Python snippet that rebuilds a case's inputs exactly and makes its call."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from ember_conformance.samples.base import Arr, Sample, is_statement

_INLINE = 256  # arrays up to this many elements are written out as literals


def _array(values: np.ndarray) -> str:
    if values.size <= _INLINE:
        return f"np.array({values.tolist()!r}, dtype={values.dtype.str!r}).reshape({values.shape!r})"
    data = base64.b64encode(np.ascontiguousarray(values).tobytes()).decode()
    return f"np.frombuffer(base64.b64decode({data!r}), dtype={values.dtype.str!r}).reshape({values.shape!r})"


def _value(v: Any) -> str:
    if isinstance(v, Arr):
        if v.layout == "on-cpu":
            return f"place({_array(v.values)}, {v.dtype!r}, 'contiguous', 'cpu')"
        return f"place({_array(v.values)}, {v.dtype!r}, {v.layout!r}, device)"
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, float) and not np.isfinite(v):
        return f"float({str(v)!r})"
    return repr(v)


def render(op: str, sample: Sample, dtype: str, device: str) -> str:
    lines = ["import base64", "import numpy as np", "import ember_core as em",
             "from ember_conformance.layouts import place", "",
             f"device, dtype = {device!r}, {dtype!r}", "nan, inf = np.nan, np.inf"]
    if sample.custom is not None:
        return "\n".join([*lines, sample.code])
    if sample.expression is not None:
        x = sample.args[0]
        shown = "x" if is_statement(sample.expression) else sample.expression
        return "\n".join([*lines, f"x = {_value(x)}", "xp = em", sample.expression, f"print({shown})"])
    names = []
    for i, arg in enumerate(sample.args, 1):
        if isinstance(arg, (Arr, list)):
            lines.append(f"x{i} = {_value(arg)}")
            names.append(f"x{i}")
        else:
            names.append(_value(arg))
    names += [f"{k}={_value(v)}" for k, v in sample.kwargs.items()]
    lines.append(f"out = em.ops.call({op!r}, {', '.join(names)})")
    lines.append("print(out)")
    return "\n".join(lines)

"""Level 3 (autograd through the backend) and level 4 (the demo trains to its accuracy).

Level 3: for every differentiable registry op (``differentiable = true`` with derivative formulas,
or a composite, which differentiates through its parts) and floating dtype, the gradient of
``sum(op(inputs) * w)`` on the device is compared with the same gradient on the cpu backend
(``GRAD_TOLERANCES``), and ``gradcheck`` checks the cpu float64 gradient against finite
differences.  Inputs are the op's ordinary level-1 samples, jittered (1e-3 relative plus 1e-4) so
that no tie or kink (max, sort, abs at 0) sits exactly under an input.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember_conformance.execute import Passed, SkipCase
from ember_conformance.layouts import place, to_numpy
from ember_conformance.samples.base import Arr, Sample, rng_for
from ember_conformance.samples.catalog import samples_for
from ember_conformance.tolerances import GRAD_TOLERANCES, compare

SAMPLES_PER_OP = 2
_AVOID = ("error", "extremes", "zero-size", "long", "0-d", "int32", "empty", "expanded")


def differentiable(schema: Any) -> bool:
    if not schema.differentiable or schema.family == "random":
        return False
    floating = any(d.kind in "fc" for d in schema.dtypes)
    return floating and (bool(schema.derivatives) or schema.kind == "composite")


def _usable(sample: Sample) -> bool:
    if sample.error or sample.custom or sample.expression or any(word in sample.name for word in _AVOID):
        return False
    if sample.name.startswith("to-") and sample.name != "to-float64":
        return False  # integer/bool outputs have no gradient; a narrowing cast defeats finite differences
    arrays = [a for a in (*sample.args, *sample.kwargs.values()) if isinstance(a, Arr)]
    return any(a.dtype in ("float32", "float64") for a in arrays) and all(
        not isinstance(a, list) for a in sample.args)


def grad_samples(schema: Any, dtype: str, device: str) -> list[Sample]:
    chosen = [s for s in samples_for(schema, "float32", device, 1) if _usable(s)][:SAMPLES_PER_OP]
    constants = {i for i, p in enumerate(schema.params) if schema.derivatives.get(p.name) == "non_differentiable"}
    return [Sample(s.name, custom=_grad_check(schema.name, s, constants), code=_code(schema.name)) for s in chosen]


def _code(op: str) -> str:
    return (f"import ember_core.autograd as ag\n# inputs: see the level-1 sample of the same name\n"
            f"# out = em.ops.call({op!r}, *inputs); ag.grad((out * w).sum(), inputs)")


def _grad_check(op: str, sample: Sample, constants: set[int]) -> Any:
    """``constants``: positions of the arguments the op declares non-differentiable (class weights)."""
    def check(device: str, dtype: str) -> str | None:
        try:
            import ember_core.autograd as ag
        except ImportError:
            raise SkipCase("ember_core.autograd not available") from None
        rng = rng_for("grad", op, sample.name)
        values = {}
        for i, a in enumerate(sample.args):
            if isinstance(a, Arr) and a.dtype in ("float32", "float64") and i not in constants:
                shape = a.values.shape
                values[i] = a.values * (1 + rng.uniform(-1e-3, 1e-3, shape)) + rng.uniform(-1e-4, 1e-4, shape)

        def constant(i: int, a: Any, dev: str, dt: str) -> Any:
            """A non-differentiable floating argument follows the dtype under test."""
            if i in constants and isinstance(a, Arr) and a.dtype in ("float32", "float64"):
                return place(a.values, dt, a.layout, dev)
            return _materialize(a, dev)

        def run(dev: str, dt: str) -> tuple[Any, list[Any]]:
            leaves = {i: place(v, dt, sample.args[i].layout, dev) for i, v in values.items()}
            for t in leaves.values():
                t.requires_grad = True
            args = [leaves.get(i, constant(i, a, dev, dt)) for i, a in enumerate(sample.args)]
            out = em_call(op, args, {k: _materialize(v, dev) for k, v in sample.kwargs.items()})
            out = out[0] if isinstance(out, (tuple, list)) else out
            w = place(rng_for("w", op, sample.name).uniform(0.5, 1.5, out.shape), dt, "contiguous", dev)
            grads = ag.grad((out * w).sum(), list(leaves.values()), allow_unused=True)
            return out, [None if g is None else to_numpy(g) for g in grads]

        _, on_device = run(device, dtype)
        _, on_cpu = run("cpu", dtype)
        tol = GRAD_TOLERANCES[dtype]
        for i, (g_dev, g_cpu) in enumerate(zip(on_device, on_cpu)):
            if (g_dev is None) != (g_cpu is None):
                return f"input {i}: the gradient is None on one backend only"
            if g_dev is not None:
                cmp = compare(g_dev, g_cpu.astype(np.float64), dtype, rtol=tol.rtol, atol=tol.atol)
                if not cmp.ok:
                    return f"input {i}: device gradient differs from the cpu backend's: {cmp.message}"
        leaves64 = [place(v, "float64", "contiguous", "cpu") for v in values.values()]
        for t in leaves64:
            t.requires_grad = True
        positions = list(values)

        def f(*xs: Any) -> Any:
            args = [constant(i, a, "cpu", "float64") for i, a in enumerate(sample.args)]
            for pos, x in zip(positions, xs):
                args[pos] = x
            out = em_call(op, args, {k: _materialize(v, "cpu") for k, v in sample.kwargs.items()})
            return out[0] if isinstance(out, (tuple, list)) else out

        try:
            gradcheck = ag.gradcheck
        except (ImportError, AttributeError):
            raise SkipCase("device gradients match the cpu backend's; the finite-difference half is skipped: "
                           "ember_core.autograd.gradcheck not available") from None
        if not gradcheck(f, tuple(leaves64), raise_exception=False):
            return "the cpu float64 gradient disagrees with finite differences (ember_core.autograd.gradcheck)"
        return None

    return check


def em_call(op: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    import ember_core as em

    return em.ops.call(op, *args, **kwargs)


def _materialize(value: Any, device: str) -> Any:
    from ember_conformance.execute import materialize

    return materialize(value, device)


def demo_sample(epochs: int) -> Sample:
    def check(device: str, dtype: str) -> str | None:
        try:
            from ember_core.demo import run_demo
        except ImportError:
            raise SkipCase("ember_core.demo not available") from None
        result = run_demo(device, epochs=epochs, seed=0)
        accuracy, target = float(result["test_accuracy"]), float(result["target_accuracy"])
        reached = f"test accuracy {accuracy:.4f} {'<' if accuracy < target else '>='} target {target:.4f} " \
                  f"after {epochs} epochs ({result['seconds']:.1f} s)"
        return reached if accuracy < target else Passed(reached)

    code = f"from ember_core.demo import run_demo\nprint(run_demo(device, epochs={epochs}, seed=0))"
    return Sample("digits", custom=check, code=code)

"""Random numbers: one counter-based generator (Philox4x32-10) per device.

A generator's whole state is ``(seed, offset)``: a draw of n elements reads blocks
``offset, offset+1, ...`` of the Philox stream keyed by ``seed`` and advances ``offset`` by the
blocks it used (ceil(n/4) for uniform float16/bfloat16/float32, ceil(n/2) otherwise).  The
element-to-block mapping is specified at the top of plugins/cpu/src/ember_cpu/csrc/random.c; every
backend implementing it produces the same uniform and integer bits for the same seed (normal draws
agree to the last bit of each platform's log/sin/cos), so results do not depend on the device, and
the CPU fallback of a random op is exact.

The state lives in the core, not in plugins: seeding can never be a silent no-op on a device.
"""

from __future__ import annotations

import threading
from typing import Any

from ember_core.device import Device, as_device, default_device

_default_seed = 0x5EED_0F_E4BE  # what manual_seed last set; new generators start from it


class Generator:
    """A (seed, offset) pair for one device; thread-safe."""

    def __init__(self, device: Any = "cpu", seed: int | None = None) -> None:
        self.device = as_device(device)
        self._lock = threading.Lock()
        self.manual_seed(_default_seed if seed is None else seed)

    def manual_seed(self, seed: int) -> Generator:
        if not isinstance(seed, int) or not 0 <= seed < 2**64:
            raise ValueError(f"a seed is an int in [0, 2**64), got {seed!r}")
        with self._lock:
            self.seed, self.offset = seed, 0
        return self

    def get_state(self) -> tuple[int, int]:
        return self.seed, self.offset

    def set_state(self, state: tuple[int, int]) -> None:
        seed, offset = state
        with self._lock:
            self.seed, self.offset = int(seed), int(offset)

    def advance(self, blocks: int) -> tuple[int, int]:
        """Reserve ``blocks`` Philox blocks; returns the (seed, offset) the draw starts at."""
        with self._lock:
            start = self.offset
            self.offset += blocks
            return self.seed, start

    def __repr__(self) -> str:
        return f"Generator(device='{self.device}', seed={self.seed}, offset={self.offset})"


_generators: dict[Device, Generator] = {}
_lock = threading.Lock()


def default_generator(device: Any = None) -> Generator:
    device = default_device() if device is None else as_device(device)
    gen = _generators.get(device)
    if gen is None:
        with _lock:
            gen = _generators.setdefault(device, Generator(device))
    return gen


def manual_seed(seed: int) -> None:
    """Seed the default generator of every device (present and future) with ``seed``."""
    global _default_seed
    Generator("cpu", seed)  # validates before anything changes
    with _lock:
        _default_seed = seed
        for gen in _generators.values():
            gen.manual_seed(seed)


def blocks_for(kind: str, itemsize: int, n: int) -> int:
    """Philox blocks a draw of n elements consumes (see the module docstring)."""
    if kind == "uniform" and itemsize <= 4:
        return -(-n // 4)
    return -(-n // 2)


def get_rng_state() -> dict[str, Any]:
    """Every generator's (seed, offset) by device name, and the seed new generators start from: what a
    checkpoint saves so that random draws after resuming are the ones an uninterrupted run makes."""
    with _lock:
        return {"default_seed": _default_seed,
                "generators": {str(device): list(gen.get_state()) for device, gen in _generators.items()}}


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what get_rng_state returned (generators of devices not named are left alone)."""
    global _default_seed
    seed = state["default_seed"]
    Generator("cpu", seed)  # validates before anything changes
    _default_seed = seed
    for name, (gen_seed, offset) in state["generators"].items():
        default_generator(name).set_state((gen_seed, offset))

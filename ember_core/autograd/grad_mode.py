"""Whether ops record a graph, per thread: ``no_grad``, ``enable_grad``, ``inference_mode``."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class _Mode(threading.local):
    enabled: bool | None = True  # falsy when off: False under no_grad, None while a recorded op runs
    inference = False


MODE = _Mode()


def is_grad_enabled() -> bool:
    return bool(MODE.enabled)


def is_recording() -> bool:
    """True inside an op call that autograd records (its kernels run with grad mode off): a
    provider can tell a training step from inference by the call itself, never by call history."""
    return MODE.enabled is None


def is_inference_mode_enabled() -> bool:
    return MODE.inference


class _ModeSwitch:
    """A context manager that is also a decorator; restores the previous mode on exit."""

    def __init__(self, enabled: bool, inference: bool | None = None) -> None:
        self._target = (enabled, inference)
        self._saved: list[tuple[bool, bool]] = []

    def __enter__(self) -> None:
        self._saved.append((MODE.enabled, MODE.inference))
        enabled, inference = self._target
        MODE.enabled = enabled
        if inference is not None:
            MODE.inference = inference

    def __exit__(self, *exc: object) -> None:
        MODE.enabled, MODE.inference = self._saved.pop()

    def __call__(self, fn: F) -> F:
        target = self._target

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _ModeSwitch(*target):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def no_grad() -> _ModeSwitch:
    """Ops inside record nothing (optimizer steps, evaluation)."""
    return _ModeSwitch(False)


def enable_grad() -> _ModeSwitch:
    """Recording on again inside a ``no_grad`` block."""
    return _ModeSwitch(True, False)


def set_grad_enabled(mode: bool) -> _ModeSwitch:
    return _ModeSwitch(bool(mode))


def inference_mode(mode: bool = True) -> _ModeSwitch:
    """``no_grad`` for pure inference.  Ember's graph costs nothing when off, so this is the same
    switch as ``no_grad`` plus a flag that code can query (``is_inference_mode_enabled``)."""
    return _ModeSwitch(not mode, bool(mode))

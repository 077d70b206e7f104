"""The native module, XNNPACK's one-time initialisation, the thread pool, and the lock that
serialises every native call (XNNPACK operators and the NHWC workspace are not re-entrant)."""

from __future__ import annotations

import os
import threading
from typing import Any

from ember_core.errors import BackendUnavailableError, KernelError
from ember_xnnpack._native import ffi, lib

LOCK = threading.Lock()

_STATUS_NAMES = {1: "uninitialized", 2: "invalid parameter", 3: "invalid state", 4: "unsupported parameter",
                 5: "unsupported hardware", 6: "out of memory"}
# create statuses that send the call to the next provider: parameters XNNPACK rejects, special weights
DECLINED = (lib.EXN_STATUS_INVALID_PARAMETER, lib.EXN_STATUS_UNSUPPORTED_PARAMETER, lib.EXN_STATUS_SPECIAL_VALUES)


def _default_threads() -> int:
    """What ember-cpu (OpenMP) uses by default: OMP_NUM_THREADS, else the CPUs this process may run on."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "").split(",")[0]))
    except ValueError:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class _Runtime:
    """State created on first use: never at import (the plugin contract)."""

    def __init__(self) -> None:
        self.initialized = False
        self.threads = _default_threads()
        self.pool: Any = None

    def start(self) -> None:
        status = lib.exn_initialize()
        if status:
            raise BackendUnavailableError(f"ember-xnnpack: xnn_initialize failed ({describe(status)}); "
                                          f"this CPU may lack the instructions XNNPACK needs")
        self.pool = lib.exn_pool_create(self.threads)
        self.initialized = True


_runtime = _Runtime()


def ready() -> None:
    """XNNPACK initialised (on first use).  Call with LOCK held."""
    if not _runtime.initialized:
        _runtime.start()


def pool() -> Any:
    """The shared pthreadpool (NULL = the calling thread only).  Call with LOCK held."""
    ready()
    return _runtime.pool


def set_num_threads(n: int) -> None:
    with LOCK:
        _runtime.threads = n
        if _runtime.initialized:
            lib.exn_pool_destroy(_runtime.pool)
            _runtime.pool = lib.exn_pool_create(n)


def num_threads() -> int:
    return _runtime.threads


def describe(status: int) -> str:
    return _STATUS_NAMES.get(status, f"status {status}")


def check(status: int, what: str) -> None:
    """Turn a failed native call into a typed error (validation happened before the call)."""
    if status == 0:
        return
    if status == lib.EXN_STATUS_OUT_OF_MEMORY:
        raise MemoryError(f"ember-xnnpack {what}: out of memory")
    raise KernelError(f"ember-xnnpack {what}: XNNPACK returned {describe(status)}; "
                      f"a backend bug: please report the call")


NULL = ffi.NULL

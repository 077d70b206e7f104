"""Compiled kernel images on disk, shared by every process and both GPU vendors (``ember_gpu.rtc``
fills it): ``$EMBER_CACHE_DIR/kernels``, else ``$XDG_CACHE_HOME/ember/kernels``, else
``~/.cache/ember/kernels``, one file per key.

Entries are written to a temporary file in the directory and renamed into place, so a reader sees a
whole entry or none; each carries a digest of its bytes, so a damaged one is dropped (and compiled
again by the caller).  A directory that cannot be written (a read-only or missing home) costs one
warning: images are then kept in memory for this process only.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from pathlib import Path

CACHE_ENV = "EMBER_CACHE_DIR"
_ENTRY_MAGIC = b"EMBERRTC1\0"


def cache_dir() -> Path | None:
    """Where compiled images are kept; None when there is no home directory to put them in."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit) / "kernels"
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no HOME and no passwd entry
            return None
    return Path(base) / "ember" / "kernels"


class KernelCache:
    """Compiled images by key: on disk when the directory can be written, always in memory too."""

    def __init__(self, directory: str | os.PathLike[str] | None) -> None:
        self.directory = None if directory is None else Path(directory)  # None: memory only (no home directory)
        self._memory: dict[str, bytes] = {}
        self._warned = False

    def get(self, key: str) -> bytes | None:
        found = self._memory.get(key)
        if found is not None or self.directory is None:
            return found
        path = self.directory / key
        try:
            entry = path.read_bytes()
        except OSError:
            return None
        head = len(_ENTRY_MAGIC) + 32
        data = entry[head:]
        if entry[:len(_ENTRY_MAGIC)] != _ENTRY_MAGIC or entry[len(_ENTRY_MAGIC):head] != hashlib.sha256(data).digest():
            try:
                path.unlink()  # damaged after it was written (writes are atomic): a disk fault, an edit
            except OSError:
                pass
            return None
        self._memory[key] = data
        return data

    def put(self, key: str, data: bytes) -> None:
        self._memory[key] = data
        if self.directory is None:
            return self._warn("there is no home directory")
        temporary = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=f".{key}.", suffix=".partial")
            with os.fdopen(handle, "wb") as out:
                out.write(_ENTRY_MAGIC + hashlib.sha256(data).digest() + data)
            os.replace(temporary, self.directory / key)
        except OSError as exc:
            if temporary is not None:
                Path(temporary).unlink(missing_ok=True)
            self._warn(f"{self.directory} cannot be written ({exc.strerror or exc})")

    def _warn(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(f"ember: compiled GPU kernels are kept in memory only, since {why}: each process compiles "
                          f"them again; set {CACHE_ENV} to a writable directory to keep them", RuntimeWarning,
                          stacklevel=3)

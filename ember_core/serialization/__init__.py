"""``em.save`` and ``em.load``: objects holding tensors in safetensors files.

The tensors are the file's safetensors tensors (PyTorch reads a file of plain tensors through the
``safetensors`` package, and ember reads PyTorch's); everything else (nesting, numbers, sharing, devices)
is JSON in the header's ``__metadata__`` (``ember.format``, ``ember.structure``), so loading runs no code.
"""

from __future__ import annotations

import json
import mmap as _mmap
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ember_core.device import as_device
from ember_core.serialization.placement import storage_bytes, storage_from_bytes, target_device
from ember_core.serialization.safetensors import Entry, HeaderReader, encode_header
from ember_core.serialization.structure import Packer, Unpacker
from ember_core.tensor import Storage

FORMAT_VERSION = "1"
MMAP_FROM_BYTES = 1 << 20  # smaller files are read: a mapping per tiny checkpoint buys nothing


def save(obj: Any, path: str | os.PathLike[str]) -> None:
    """Write ``obj`` (tensors, state dicts, optimizer / scheduler / RNG state...) to ``path`` atomically:
    a temporary file beside it is written, flushed to disk and renamed over ``path``, so a crash mid-save
    leaves the previous file intact."""
    packer = Packer()
    structure = json.dumps(packer.pack(obj), separators=(",", ":"), allow_nan=False)
    entries, offset = {}, 0
    layout = packer.entries()
    for name, storage, dtype, shape in layout:
        entries[name] = Entry(dtype, shape, offset, offset + storage.nbytes)
        offset += storage.nbytes
    header = encode_header(entries, {"ember.format": FORMAT_VERSION, "ember.structure": structure})
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _file_mode(path))
        with os.fdopen(fd, "wb") as f:
            f.write(header)
            for _, storage, _, _ in layout:
                f.write(memoryview(storage_bytes(storage)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    _fsync_directory(path.parent)


def load(path: str | os.PathLike[str], *, device: Any = None, mmap: bool | None = None) -> Any:
    """The object saved at ``path``; a file without ember's structure (PyTorch's) gives {name: tensor}.

    ``device`` puts every tensor there; without it, each goes back to the device it was saved from when
    that backend is available, else to cpu with a warning.  ``mmap`` (default: files of 1 MiB or more)
    maps the file privately, copy-on-write: cpu tensors alias the mapping where their bytes are aligned,
    so nothing is read until used and writes never reach the file.  The cost: the file must not be
    truncated in place while such tensors live (the process would get SIGBUS); em.save replaces files by
    renaming, which is safe.  ``mmap=False`` reads every tensor into memory of its own."""
    requested = None if device is None else as_device(device)
    name = os.fspath(path)
    with open(path, "rb") as f:
        reader = HeaderReader(name, os.fstat(f.fileno()).st_size)
        n = reader.header_length(f.read(8))
        raw = f.read(n)
        if len(raw) != n:
            raise reader.fail("truncated inside the header")
        entries, metadata = reader.parse(raw)
        start = 8 + n
        mmap = reader.file_size >= MMAP_FROM_BYTES if mmap is None else mmap
        mapping = np.frombuffer(_mmap.mmap(f.fileno(), 0, access=_mmap.ACCESS_COPY), np.uint8) if mmap else None
        storages: dict[str, Storage] = {}

        def storage(entry_name: str, saved_device: str) -> Storage:
            if entry_name not in storages:
                e = entries[entry_name]
                if mapping is not None:
                    data = mapping[start + e.begin:start + e.end]
                    aligned = data.ctypes.data % e.dtype.itemsize == 0
                else:
                    data, aligned = _read(f, reader, start + e.begin, e.end - e.begin), True
                storages[entry_name] = storage_from_bytes(data, target_device(saved_device, requested), aligned)
            return storages[entry_name]

        if "ember.structure" not in metadata:
            from ember_core.tensor import Tensor, contiguous_strides

            return {k: Tensor._make(storage(k, "cpu"), e.shape, contiguous_strides(e.shape), 0, e.dtype)
                    for k, e in entries.items()}
        if metadata.get("ember.format") != FORMAT_VERSION:
            raise reader.fail(f"ember format version {metadata.get('ember.format')!r}; this ember reads "
                              f"version {FORMAT_VERSION}: upgrade ember")
        try:
            tree = json.loads(metadata["ember.structure"])
        except (json.JSONDecodeError, RecursionError):
            raise reader.fail("the ember structure metadata is not JSON") from None
        try:
            return Unpacker(name, entries, storage).unpack(tree)
        except RecursionError:
            raise reader.fail("the ember structure nests too deeply") from None


def _read(f: Any, reader: HeaderReader, at: int, nbytes: int) -> np.ndarray:
    """``nbytes`` bytes of the file at ``at`` in a fresh buffer (which a cpu tensor then aliases)."""
    out = np.empty(nbytes, np.uint8)
    f.seek(at)
    if f.readinto(memoryview(out)) != nbytes:
        raise reader.fail("truncated: the file ends inside a tensor's data (was it changed while loading?)")
    return out


def _file_mode(path: Path) -> int:
    """The replaced file's permissions, else what open() would give a new file (mkstemp's are 0o600)."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0o22)
        os.umask(umask)
        return 0o666 & ~umask


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["load", "save"]

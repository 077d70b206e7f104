"""The safetensors file format, written and read by ember's own code (no dependency on the package).

A file is an 8-byte little-endian header length, a UTF-8 JSON header ``{name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {str: str}}`` padded with spaces to a multiple of 8, then
the raw little-endian bytes, offsets counted from the end of the header.  Reading validates every field
against the file's size before anything is allocated: the file may come from anyone.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from ember_core import dtypes as _dt
from ember_core.errors import SerializationError

# complex128 has no safetensors code: a private one, which the safetensors package rejects
CODES: dict[str, _dt.DType] = {
    "BOOL": _dt.bool_, "I8": _dt.int8, "I16": _dt.int16, "I32": _dt.int32, "I64": _dt.int64, "U8": _dt.uint8,
    "F16": _dt.float16, "BF16": _dt.bfloat16, "F32": _dt.float32, "F64": _dt.float64, "C64": _dt.complex64,
    "EMBER_C128": _dt.complex128,
}
CODE_OF: dict[_dt.DType, str] = {d: c for c, d in CODES.items()}
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors package's own limit
MAX_NDIM = 64


@dataclass(frozen=True)
class Entry:
    """One tensor of a file: its dtype, shape and byte range within the data section."""

    dtype: _dt.DType
    shape: tuple[int, ...]
    begin: int
    end: int


def encode_header(entries: dict[str, Entry], metadata: dict[str, str]) -> bytes:
    """The length prefix and the padded JSON header."""
    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    for name, e in entries.items():
        header[name] = {"dtype": CODE_OF[e.dtype], "shape": list(e.shape), "data_offsets": [e.begin, e.end]}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data section starts 8-aligned, as the package's writer does
    return len(text).to_bytes(8, "little") + text


class HeaderReader:
    """Validates a header of ``file_size`` bytes' file; every problem is a SerializationError naming it."""

    def __init__(self, filename: str, file_size: int) -> None:
        self.filename, self.file_size = filename, file_size

    def fail(self, problem: str) -> SerializationError:
        return SerializationError(f"{self.filename}: {problem}; the file is damaged or not an ember/safetensors file")

    def header_length(self, prefix: bytes) -> int:
        if len(prefix) < 8:
            raise self.fail(f"truncated: {self.file_size} bytes, shorter than the 8-byte header length")
        n = int.from_bytes(prefix[:8], "little")
        if n > MAX_HEADER_BYTES:
            raise self.fail(f"header length {n} is absurd (the limit is {MAX_HEADER_BYTES} bytes)")
        if n > self.file_size - 8:
            raise self.fail(f"header length {n} runs beyond the end of the file ({self.file_size} bytes)")
        return n

    def parse(self, raw: bytes) -> tuple[dict[str, Entry], dict[str, str]]:
        """The entries and the metadata of the JSON header ``raw``."""
        try:
            header = json.loads(raw.decode("utf-8"), object_pairs_hook=self._no_duplicates)
        except UnicodeDecodeError as exc:
            raise self.fail(f"the header is not UTF-8 ({exc.reason} at byte {exc.start})") from None
        except json.JSONDecodeError as exc:
            raise self.fail(f"the header is not JSON ({exc.msg} at character {exc.pos})") from None
        except RecursionError:
            raise self.fail("the header nests too deeply") from None
        if not isinstance(header, dict):
            raise self.fail(f"the header is a JSON {type(header).__name__}, not an object")
        metadata = header.pop("__metadata__", {})
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            raise self.fail("__metadata__ must map strings to strings")
        data_size = self.file_size - 8 - len(raw)
        entries = {name: self._entry(name, fields, data_size) for name, fields in header.items()}
        previous = None
        for name, e in sorted(entries.items(), key=lambda item: (item[1].begin, item[1].end)):
            if previous is not None and e.begin < previous[1].end and e.begin != e.end:
                raise self.fail(f"tensors {previous[0]!r} and {name!r} overlap (byte ranges "
                                f"{previous[1].begin}..{previous[1].end} and {e.begin}..{e.end})")
            if e.begin != e.end:
                previous = (name, e)
        return entries, metadata

    def _no_duplicates(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in pairs:
            if key in result:
                raise self.fail(f"duplicate name {key!r} in the header")
            result[key] = value
        return result

    def _entry(self, name: str, fields: Any, data_size: int) -> Entry:
        if not isinstance(fields, dict) or set(fields) != {"dtype", "shape", "data_offsets"}:
            raise self.fail(f"tensor {name!r} must have exactly dtype, shape and data_offsets")
        dtype = CODES.get(fields["dtype"]) if isinstance(fields["dtype"], str) else None
        if dtype is None:
            raise self.fail(f"tensor {name!r} has unknown dtype {fields['dtype']!r} (known: {', '.join(CODES)})")
        shape, offsets = fields["shape"], fields["data_offsets"]
        if not _int_list(shape) or len(shape) > MAX_NDIM or any(n < 0 for n in shape):
            raise self.fail(f"tensor {name!r} has shape {shape!r}; a shape is a list of at most {MAX_NDIM} "
                            f"non-negative integers")
        if not _int_list(offsets) or len(offsets) != 2 or not 0 <= offsets[0] <= offsets[1] <= data_size:
            raise self.fail(f"tensor {name!r} has data_offsets {offsets!r} outside the data section "
                            f"(0..{data_size} bytes)")
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes != offsets[1] - offsets[0]:
            raise self.fail(f"tensor {name!r} of shape {shape} and dtype {fields['dtype']} needs {nbytes} bytes, "
                            f"its data_offsets give {offsets[1] - offsets[0]}")
        return Entry(dtype, tuple(shape), offsets[0], offsets[1])


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(type(v) is int for v in value)

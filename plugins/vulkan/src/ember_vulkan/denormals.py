"""Subnormal handling of the shaders: the device's Vulkan 1.2 float-controls properties, and the
SPIR-V variant that asks to keep subnormals.

A module declaring an execution mode the device does not support is invalid, so every shader exists
in two variants: as compiled, and with the ``DenormPreserve 32`` execution mode (and its capability)
added to the compiled words here, at load time (and ``DenormPreserve 16`` where the device also keeps
float16 ones: float16 values are computed in float32 but rounded to float16 on the store). A device
that cannot preserve float32 subnormals runs the first variant and reports that it flushes them
(``float32_subnormals`` in its properties).
"""

from __future__ import annotations

import struct
from typing import Any

OP_CAPABILITY, OP_ENTRY_POINT, OP_EXECUTION_MODE = 17, 15, 16
CAPABILITY_DENORM_PRESERVE = 4464
MODE_DENORM_PRESERVE = 4459
HEADER_WORDS = 5
INDEPENDENCE = {0: "32-bit only", 1: "all", 2: "none"}


def float_controls(info: Any) -> dict[str, Any]:
    """The float-controls properties of an evk_device_info, as ember's device properties show them."""
    return {
        "denorm_preserve_float16": bool(info.denorm_preserve_f16),
        "denorm_preserve_float32": bool(info.denorm_preserve_f32),
        "denorm_flush_to_zero_float16": bool(info.denorm_flush_f16),
        "denorm_flush_to_zero_float32": bool(info.denorm_flush_f32),
        "denorm_behavior_independence": INDEPENDENCE.get(int(info.denorm_independence), "unknown"),
    }


def preserved_widths(info: Any) -> tuple[int, ...]:
    """The float widths whose subnormals the shaders ask this device to keep: none unless float32's
    can be kept; float16's as well where they can."""
    if not info.denorm_preserve_f32:
        return ()
    return (16, 32) if info.denorm_preserve_f16 else (32,)


def _instructions(words: tuple[int, ...]):
    at = HEADER_WORDS
    while at < len(words):
        count, opcode = words[at] >> 16, words[at] & 0xFFFF
        if count == 0:
            raise ValueError(f"malformed SPIR-V: zero-length instruction at word {at}")
        yield at, opcode, words[at:at + count]
        at += count


def with_denorm_preserve(code: bytes, widths: tuple[int, ...] = (32,)) -> bytes:
    """``code`` (a SPIR-V module with one compute entry point) asking for subnormals of these float
    widths to be kept."""
    if len(code) % 4 or len(code) < 4 * HEADER_WORDS:
        raise ValueError("not a SPIR-V module: its size is not a whole number of words")
    words = struct.unpack(f"<{len(code) // 4}I", code)
    if words[0] != 0x07230203:
        raise ValueError("not a SPIR-V module: wrong magic number")
    last_capability = entry = first_mode = None
    for at, opcode, instruction in _instructions(words):
        if opcode == OP_CAPABILITY:
            last_capability = at + len(instruction)
        elif opcode == OP_ENTRY_POINT:
            entry = instruction[2]
            first_mode = at + len(instruction)  # execution modes follow the entry points
        elif opcode == OP_EXECUTION_MODE and first_mode is None:
            raise ValueError("malformed SPIR-V: an execution mode before the entry point")
    if last_capability is None or entry is None:
        raise ValueError("SPIR-V module without capabilities or entry point")
    capability = ((2 << 16) | OP_CAPABILITY, CAPABILITY_DENORM_PRESERVE)
    mode = tuple(word for width in widths for word in ((4 << 16) | OP_EXECUTION_MODE, entry, MODE_DENORM_PRESERVE,
                                                       width))
    patched = (words[:last_capability] + capability + words[last_capability:first_mode] + mode
               + words[first_mode:])
    return struct.pack(f"<{len(patched)}I", *patched)

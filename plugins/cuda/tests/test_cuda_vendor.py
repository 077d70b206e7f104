"""The CUDA vendor table against the CUDA toolkit's cuda.h (on every CI machine: nvcc is there):
the symbols are the ones cuda.h maps its names to (the ``_v2`` versions), take as many parameters
as ember-gpu's neutral cdef declares, and every enum value, flag and error code is cuda.h's."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from ember_cuda.vendor import CUDA
from ember_gpu.driver import SIGNATURES

pytestmark = pytest.mark.no_device


@pytest.fixture(scope="module")
def cuda_h() -> str:
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "include" / "cuda.h").is_file():
            return (Path(home) / "include" / "cuda.h").read_text()
    pytest.skip("no CUDA toolkit (cuda.h) on this machine")


def _enum(text: str, enum: str) -> dict[str, int]:
    """The members of ``typedef enum <enum> {...}`` with their values (implicit ones counted)."""
    body = re.search(rf"typedef enum {enum}\s*{{(.*?)}}", text, flags=re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    values, next_value = {}, 0
    for item in filter(None, (part.strip() for part in body.split(","))):
        name, _, value = (p.strip() for p in item.partition("="))
        next_value = int(value, 0) if value else next_value
        values[name] = next_value
        next_value += 1
    return values


def test_the_table_binds_exactly_the_runtimes_functions():
    assert set(CUDA.symbols) == set(SIGNATURES)
    assert CUDA.driver_libraries == ("libcuda.so.1",)  # never libcuda.so: the toolkit's stub answers 34


def test_every_symbol_is_the_one_cuda_h_maps_its_name_to_with_the_same_parameters(cuda_h):
    defines = {base: target for base, target in re.findall(r"#define (cu\w+)\s+(?:__CUDA_API_PT[DS][SZ]\()?(cu\w+)",
                                                           cuda_h) if base != target}  # (PTSZ(x) is x itself here)
    for name, symbol in CUDA.symbols.items():
        assert symbol not in defines, f"{symbol}: cuda.h maps it to {defines.get(symbol)}; bind that one"
        spelled = [symbol] + [base for base, target in defines.items() if target == symbol]
        prototype = next((m for base in spelled
                          if (m := re.search(rf"CUresult CUDAAPI {base}\((.*?)\);", cuda_h, flags=re.S))), None)
        assert prototype is not None, f"{symbol} is not declared in cuda.h"
        assert prototype.group(1).count(",") == SIGNATURES[name].count(","), symbol


def test_enum_values_flags_and_markers_are_cuda_hs(cuda_h):
    attributes = _enum(cuda_h, "CUdevice_attribute_enum")
    for name, value in CUDA.attributes.items():
        assert attributes[f"CU_DEVICE_ATTRIBUTE_{name.upper()}"] == value, name
    pool = _enum(cuda_h, "CUmemPool_attribute_enum")
    for name, value in CUDA.pool_attributes.items():
        assert pool[f"CU_MEMPOOL_ATTR_{name.upper()}"] == value, name
    assert _enum(cuda_h, "CUstream_flags_enum")["CU_STREAM_NON_BLOCKING"] == CUDA.stream_non_blocking
    assert _enum(cuda_h, "CUevent_flags_enum")["CU_EVENT_DISABLE_TIMING"] == CUDA.event_disable_timing
    assert re.search(rf"#define CU_MEMHOSTALLOC_PORTABLE\s+0x0*{CUDA.host_alloc_portable}\b", cuda_h)
    markers = CUDA.launch_markers
    for marker, value in (("END", markers.end), ("BUFFER_POINTER", markers.pointer), ("BUFFER_SIZE", markers.size)):
        assert re.search(rf"#define CU_LAUNCH_PARAM_{marker}_AS_INT\s+0x0*{value}\b", cuda_h), marker


def test_error_codes_are_cuda_hs_and_the_lost_ones_poison_the_context(cuda_h):
    codes = _enum(cuda_h, "cudaError_enum")
    for code, info in CUDA.errors.items():
        assert codes[info.name] == code, info.name
    assert {700, 719} <= CUDA.lost_device_errors
    assert codes["CUDA_ERROR_OUT_OF_MEMORY"] == CUDA.out_of_memory and codes["CUDA_ERROR_NO_DEVICE"] == CUDA.no_device
    for status in (34, 100, 209, 222, 803, 804):  # the decline paths say what to do
        meaning = CUDA.errors[status].meaning
        assert any(fix in meaning for fix in ("R580", "nvidia-smi", "compute capability")), status

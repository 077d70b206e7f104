"""The kernel ABI: every struct of csrc/abi.h's cdef block has, in cffi (what the op layer packs),
the size, alignment and field offsets g++ gives it when compiling the header (what the kernels
read), so a field added in one place only, or a padding difference, fails here."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from ember_gpu import abi


def _structs() -> dict[str, list[str]]:
    """struct name -> its field names, from the cdef block."""
    block = abi.cdef_block(abi.HEADER.read_text())
    block = re.sub(r"/\*.*?\*/", "", block, flags=re.S)
    structs = {}
    for body, name in re.findall(r"typedef struct \{(.*?)\}\s*(\w+);", block, flags=re.S):
        fields = []
        for declaration in body.split(";"):
            names = re.findall(r"\*?\s*(\w+)\s*(?:\[[^\]]*\])*\s*(?:,|$)", declaration.strip())
            fields += [n for n in names if n]
        structs[name] = fields
    return structs


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++")
def test_cffi_layout_matches_the_compiler(tmp_path: Path) -> None:
    structs = _structs()
    assert {"eg_flat_args", "eg_reduce_args", "eg_scan_args", "eg_sort_args", "eg_search_args",
            "eg_index_args", "eg_matmul_args", "eg_nonzero_args"} <= set(structs)
    lines = ["#include <stdio.h>", "#include <stddef.h>", f'#include "{abi.HEADER}"', "int main() {"]
    for name, fields in structs.items():
        lines.append(f'printf("{name} size %zu %zu\\n", sizeof({name}), alignof({name}));')
        lines += [f'printf("{name} {f} %zu\\n", offsetof({name}, {f}));' for f in fields]
    source = tmp_path / "layout.cpp"
    source.write_text("\n".join([*lines, "}"]))
    subprocess.run(["g++", "-std=c++17", str(source), "-o", str(tmp_path / "layout")], check=True)
    printed = subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True, check=True).stdout
    for line in printed.splitlines():
        name, what, *numbers = line.split()
        if what == "size":
            assert [abi.ffi.sizeof(name), abi.ffi.alignof(name)] == [int(n) for n in numbers], name
        else:
            assert abi.ffi.offsetof(name, what) == int(numbers[0]), f"{name}.{what}"

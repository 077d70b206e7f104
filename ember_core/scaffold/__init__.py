"""``ember new-backend``: generates an installable backend package from the templates beside this
module.  Untouched, the package builds, passes conformance level 0 and every op:dtype it claims."""

from __future__ import annotations

import keyword
import re
from pathlib import Path
from string import Template

from ember_core.backend_kit import cdef_text, kit_header
from ember_core.backend_kit.header import INCLUDE
from ember_core.plugins import PROJECT_PACKAGES

TEMPLATES = Path(__file__).resolve().parent / "templates"
MEMORY = {
    "host": {
        "memory_words": "memory the host addresses",
        "memory_doc": "Devices whose memory the host addresses: HostMemoryBackend supplies every device hook.",
        "memory_base": "HostMemoryBackend",
        "memory_body": "",
    },
    "device": {
        "memory_words": "a separate memory space, reached through explicit copies",
        "memory_doc": ("Devices with their own memory: DeviceMemoryBackend supplies the device hooks over the five\n"
                       "    driver calls below (csrc/memory.c, where host memory stands in for a driver)."),
        "memory_base": "DeviceMemoryBackend",
        "memory_body": """
    def device_malloc(self, device: Any, nbytes: int) -> int:
        from $package._native import ffi, lib

        address = ffi.new("uint64_t *")
        return address[0] if lib.${prefix}_mem_alloc(nbytes, address) == lib.EMBER_OK else 0

    def device_free(self, device: Any, address: int) -> None:
        from $package._native import lib

        lib.${prefix}_mem_free(address)

    def device_copy_from_host(self, device: Any, dst: int, src: memoryview) -> None:
        from $package._native import ffi, lib
        from $package.kernels import check

        check(lib.${prefix}_mem_copy_from_host(dst, ffi.from_buffer(src), src.nbytes), "copy_from_host")

    def device_copy_to_host(self, device: Any, dst: memoryview, src: int) -> None:
        from $package._native import ffi, lib
        from $package.kernels import check

        check(lib.${prefix}_mem_copy_to_host(ffi.from_buffer(dst), src, dst.nbytes), "copy_to_host")

    def device_copy_on_device(self, device: Any, dst: int, src: int, nbytes: int) -> None:
        from $package._native import lib
        from $package.kernels import check

        check(lib.${prefix}_mem_copy_on_device(dst, src, nbytes), "copy_on_device")
""",
    },
}
ONLY_FOR_MEMORY = {"src/package/csrc/memory.c": "device"}  # templates written for one memory kind only


class ScaffoldError(ValueError):
    """A backend name, device type or destination that cannot be generated; the message says why."""


def new_backend(name: str, dest: str | Path = ".", device_type: str | None = None, memory: str = "host") -> Path:
    """Write the package ``ember-<name>`` into ``dest/ember-<name>`` and return its directory."""
    device_type = device_type or name
    for what, value in (("backend name", name), ("device type", device_type)):
        if not re.fullmatch(r"[a-z][a-z0-9_]*", value) or keyword.iskeyword(value):
            raise ScaffoldError(f"{what} {value!r} must be a lowercase identifier (letters, digits, _), e.g. 'acme'")
        if value in PROJECT_PACKAGES:
            raise ScaffoldError(f"{what} {value!r} belongs to ember's own {PROJECT_PACKAGES[value]}; choose another")
    if memory not in MEMORY:
        raise ScaffoldError(f"memory must be one of {sorted(MEMORY)}, got {memory!r}")
    root = Path(dest) / f"ember-{name}"
    if root.exists():
        raise ScaffoldError(f"{root} already exists; remove it or choose another --dest")
    values = {"name": name, "dist": f"ember-{name}", "package": f"ember_{name}", "prefix": name,
              "device_type": device_type, "memory": memory, **MEMORY[memory]}
    values["memory_body"] = Template(values["memory_body"]).substitute(values)
    for template in sorted(TEMPLATES.rglob("*.tmpl")):
        relative = template.relative_to(TEMPLATES).with_suffix("")
        if ONLY_FOR_MEMORY.get(str(relative), memory) != memory:
            continue
        target = root / str(relative).replace("package", values["package"], 1)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(Template(template.read_text()).substitute(values))
    csrc = root / "src" / values["package"] / "csrc"
    for header in (INCLUDE / "ember.h", kit_header()):
        (csrc / header.name).write_text(header.read_text())
    (csrc / "ember_cdef.h").write_text("/* ember.h as cffi's cdef reads it (ember_core.backend_kit.cdef_text) */\n"
                                       + cdef_text())
    return root

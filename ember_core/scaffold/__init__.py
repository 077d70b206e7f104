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
        "memory_body": "",
    },
    "device": {
        "memory_words": "a separate memory space, reached through explicit copies",
        "memory_doc": "Devices with their own memory: the host reaches it only through the copy hooks.",
        # the host-memory base stands in for a driver until the vendor's own allocator and copies replace it
        "memory_body": (
            "\n    # Replace ember_alloc / ember_free / ember_copy_* (HostMemoryBackend) with your driver's calls;\n"
            "    # until then they run on host memory.  The host may not address this memory:\n"
            "    ember_host_address = None\n"
        ),
    },
}


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
    for template in sorted(TEMPLATES.rglob("*.tmpl")):
        relative = template.relative_to(TEMPLATES).with_suffix("")
        target = root / str(relative).replace("package", values["package"], 1)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(Template(template.read_text()).substitute(values))
    csrc = root / "src" / values["package"] / "csrc"
    for header in (INCLUDE / "ember.h", kit_header()):
        (csrc / header.name).write_text(header.read_text())
    (csrc / "ember_cdef.h").write_text("/* ember.h as cffi's cdef reads it (ember_core.backend_kit.cdef_text) */\n"
                                       + cdef_text())
    return root

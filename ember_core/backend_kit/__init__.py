"""Helpers so that a backend writes only what is its own: a base for devices whose memory the host
addresses, one for devices with their own memory behind a driver's five calls, ``ember_tensor``
descriptors from tensors, and ember.h as cffi cdef text.

``ember new-backend`` generates a package built on these (docs/writing-a-backend.md)."""

from ember_core.backend_kit.descriptors import Descriptors
from ember_core.backend_kit.device_memory import DeviceBlock, DeviceMemoryBackend
from ember_core.backend_kit.header import cdef_text, kit_header
from ember_core.backend_kit.host_memory import HostBlock, HostMemoryBackend

__all__ = ["Descriptors", "DeviceBlock", "DeviceMemoryBackend", "HostBlock", "HostMemoryBackend", "cdef_text",
           "kit_header"]

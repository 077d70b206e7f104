"""Kernel images loaded into a device on first use, and their functions, cached by name.

An image is one compiled source (a fatbin, a code object) shipped in the vendor package's
``kernels/`` directory.  Loading it is where a driver that cannot run the shipped code says so:
no binary for this GPU, code too new for the driver; the vendor table words those errors, and
where its run-time compiler can build the image for this GPU, that image is loaded instead.
"""

from __future__ import annotations

from typing import Any

from ember_gpu.errors import DriverError


class Modules:
    def __init__(self, device: Any) -> None:
        self.device = device
        self._modules: dict[str, Any] = {}
        self._functions: dict[tuple[str, str], Any] = {}

    def function(self, image: str, kernel: str) -> Any:
        """The handle of ``kernel`` in the image ``image`` (loaded into this device once)."""
        found = self._functions.get((image, kernel))
        if found is None:
            device, ffi = self.device, self.device.ffi
            with device.lock:
                module = self._modules.get(image)
                if module is None:
                    module = self._modules[image] = self._load(image)
                out = ffi.new("void **")
                device.call("module_get_function", out, module, kernel.encode())
                found = self._functions[(image, kernel)] = out[0]
        return found

    def _load(self, image: str) -> Any:
        """Load the shipped image; where the driver says no code in it can run here, one compiled for
        this device at run time instead (``ember_gpu.rtc``), else the driver's error saying why not."""
        device, ffi = self.device, self.device.ffi
        out = ffi.new("void **")
        try:
            device.call("module_load_data", out, ffi.from_buffer(device.runtime.kernel_image(image)))
        except DriverError as failure:
            compiled = device.runtime.rtc.image_instead(failure, device, image)
            device.call("module_load_data", out, ffi.from_buffer(compiled))
        return out[0]

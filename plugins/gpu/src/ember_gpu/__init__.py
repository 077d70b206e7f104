"""ember-gpu: the GPU runtime and kernel sources that ember-cuda (and ember-rocm) are built on.
Not a plugin itself: a vendor plugin is a vendor table (``ember_gpu.vendor.Vendor``) plus
``ember_gpu.plugin.make_plugin``."""

__version__ = "0.1.0"

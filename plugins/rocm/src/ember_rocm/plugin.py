"""ember-rocm's hooks: ember-gpu's, made for the HIP vendor table (ember_rocm.vendor)."""

from ember_gpu.plugin import make_plugin

from ember_rocm.vendor import HIP

PLUGIN = make_plugin(HIP, "ember_rocm")
globals().update(PLUGIN.hooks())

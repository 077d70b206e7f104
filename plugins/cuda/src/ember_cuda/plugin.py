"""ember-cuda's hooks: ember-gpu's, made for the CUDA vendor table (ember_cuda.vendor)."""

from ember_gpu.plugin import make_plugin

from ember_cuda.vendor import CUDA

PLUGIN = make_plugin(CUDA, "ember_cuda")
globals().update(PLUGIN.hooks())

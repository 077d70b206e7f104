"""ember-rocm: Ember's ROCm backend, ember-gpu's runtime driven by the HIP vendor table."""

__version__ = "0.1.0"

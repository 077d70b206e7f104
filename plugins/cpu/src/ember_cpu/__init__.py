"""ember-cpu: Ember's reference backend for host memory (C kernels through cffi)."""

__version__ = "0.1.0"

"""ember-cuda: Ember's CUDA backend, ember-gpu's runtime driven by the CUDA vendor table."""

__version__ = "0.1.0"

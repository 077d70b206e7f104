"""ember-vulkan: Ember's backend for Vulkan devices (`vulkan:0`, `vulkan:1`, ...).

Importing this package touches no driver: the loader is opened on the first device query.
"""

__version__ = "0.1.0"

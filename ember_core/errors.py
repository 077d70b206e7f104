"""The typed errors ember raises.  Each subclasses the built-in error a Python user would catch
for the same mistake (a wrong shape is a ValueError, a wrong dtype a TypeError), so generic code
keeps working while ember-aware code can be precise."""

from __future__ import annotations


class EmberError(Exception):
    """Base of every error ember raises on purpose."""


class ShapeError(EmberError, ValueError):
    """Shapes that do not fit: broadcasting, reshape sizes, matmul dimensions, axes."""


class DTypeError(EmberError, TypeError):
    """A dtype the op does not accept, or a cast the op may not do implicitly."""


class DTypeOverflowError(DTypeError, OverflowError):
    """A Python number outside the range of the integer dtype it would be stored in (it would wrap).
    Also an OverflowError, which numpy raises for the same conversion."""


class DeviceError(EmberError, RuntimeError):
    """Tensors on different devices in one op, or a device name that does not parse."""


class IndexOutOfRangeError(EmberError, IndexError):
    """An index outside its dimension."""


class BackendUnavailableError(EmberError, RuntimeError):
    """The device's plugin is not installed, failed to load, or has no usable device."""


class UnsupportedOpError(EmberError, NotImplementedError):
    """No provider, composite or permitted fallback can run this op on this device."""


class PluginError(EmberError, RuntimeError):
    """A plugin breaks the backend contract (missing hook, ABI mismatch, name collision...)."""


class RegistryError(EmberError, ValueError):
    """A malformed op declaration; the message names the file, the op and the problem."""


class ConfigError(EmberError, ValueError):
    """A setting ember cannot use (an environment variable, ember.toml, an argument); the message
    names where it came from and the values allowed."""


class NotSerializableError(EmberError, TypeError):
    """An object ember cannot pickle or save (a tensor computed by a recorded op, an unsupported type).
    A TypeError, as pickle's own "cannot pickle" is, so code that probes picklability keeps working."""


class SerializationError(EmberError, ValueError):
    """A file em.load cannot read safely (truncated, malformed header, inconsistent sizes or offsets...) or
    an object em.save cannot store; the message names the file and the problem."""


class KernelError(EmberError, RuntimeError):
    """A kernel reported failure after the core's checks passed: a backend bug to report."""

"""ember-cpu: Ember's reference backend for host memory (C kernels through cffi)."""

import ctypes as _ctypes
import os as _os

import scipy_openblas32 as _blas

__version__ = "0.1.0"

# The kernel library links libscipy_openblas by soname; loading it from its installed location
# first lets the dynamic loader find it wherever pip put it.
_ctypes.CDLL(_os.path.join(_blas.get_lib_dir(), _blas.get_library(fullname=True)), mode=_ctypes.RTLD_GLOBAL)

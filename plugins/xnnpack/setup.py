"""cffi_modules has no pyproject.toml spelling yet; everything else lives in pyproject.toml."""

from setuptools import setup

setup(cffi_modules=["build_ffi.py:ffibuilder"])

"""ember's one compiled module, the optional per-op hot path (ember_core/hotpath.py says what it does).

Everything else about the distribution is in pyproject.toml.  ``optional=True``: without a C
compiler (or Python's headers) the build warns and ember installs as pure Python, whose op path
is the same, only slower per call.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("ember_core._hotpath", ["ember_core/_hotpath.c"], include_dirs=["ember_core/include"],
                             optional=True)])

from pathlib import Path


def get_include() -> str:
    """Directory holding ``ember.h``, for plugin builds (like ``numpy.get_include()``)."""
    return str(Path(__file__).resolve().parent / "include")

"""The installed distribution's version (what recorders and ``--version`` report)."""

from __future__ import annotations

import functools


@functools.cache
def package_version() -> str:
    """``litmus-sandbox``'s installed version, or ``0+unknown`` when run from a bare tree."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("litmus-sandbox")
    except PackageNotFoundError:
        return "0+unknown"

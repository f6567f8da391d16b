"""Registry names under the ``litmus_sandbox/`` prefix, whatever the install.

Inspect prefixes a registered name with its package only when it finds the package
installed (from site-packages, or an editable install it recognizes); an editable install
with a ``package-dir`` mapping is not recognized. The entry point is loaded for names with
the prefix, so every name here carries it exactly once.
"""

from __future__ import annotations

from inspect_ai._util.registry import registry_name

PACKAGE = "litmus_sandbox"


def _probe() -> None:
    """An object of this package, to ask Inspect how it names them."""


def local_name(name: str) -> str:
    """What to pass to ``@hooks``/``@approver`` so the registered name is
    ``litmus_sandbox/<name>``."""
    prefixed = registry_name(_probe, name) != name
    return name if prefixed else f"{PACKAGE}/{name}"

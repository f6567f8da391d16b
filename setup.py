"""Package discovery, which ``pyproject.toml`` cannot express with the adapters' mapping.

Every folder under ``litmus_sandbox/`` ships as itself, and every folder under ``adapters/``
ships as ``litmus_sandbox.adapters.…`` (the ``package-dir`` mapping in ``pyproject.toml``).
Nothing is listed by hand, so a new subpackage cannot be left out of the wheel;
``tests/installed/test_wheel.py`` checks the wheel against the source tree.
"""

from setuptools import find_namespace_packages, setup

_SKIP = ["*__pycache__*"]


def _packages(root: str, name: str) -> list[str]:
    found = find_namespace_packages(root, exclude=_SKIP)
    return [name, *(f"{name}.{package}" for package in found)]


setup(
    packages=[
        *_packages("litmus_sandbox", "litmus_sandbox"),
        *_packages("adapters", "litmus_sandbox.adapters"),
    ]
)

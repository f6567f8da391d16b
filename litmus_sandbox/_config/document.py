"""Reading the one policy file that the sandbox and the scorer share (TOML)."""

from __future__ import annotations

import os
import tomllib
from typing import Any

from litmus_sandbox._model.errors import ConfigError

#: Top-level tables a policy file may have; anything else is a typo worth reporting.
SECTIONS = frozenset({"tools", "scoring", "refusal", "judge", "oracle", "egress", "replay"})


def read_policy_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a policy file, rejecting unknown top-level tables.

    Raises:
        ConfigError: unreadable file, bad TOML, or an unknown table (named with the file).
    """
    p = os.fspath(path)
    try:
        with open(p, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read policy: {exc.strerror or exc}") from None
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{p}:{line}: not UTF-8 text (TOML files are UTF-8)") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - SECTIONS)
    if unknown:
        raise ConfigError(
            f"{p}: unknown table(s) {', '.join(unknown)} (expected {', '.join(sorted(SECTIONS))})"
        )
    return data

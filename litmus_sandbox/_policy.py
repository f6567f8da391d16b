"""Fidelity policies: what the sandbox does with each tool call.

A policy maps tool names (exact, or glob patterns tried in the order written) to a mode:

* ``real`` - run the tool; the agent sees what it returned, errors included;
* ``stub`` - do not run it; answer with a fixed ``result`` or ``Stub(fn)`` computed from the
  arguments;
* ``swallow`` - run it (or drop it, ``run = false``) and show the agent ``shown`` (empty by
  default) instead of what happened; both are recorded;
* ``deny`` - do not run it; tell the agent so with ``message``;
* ``replay`` - serve the result from a recorded episode.

The same TOML file serves the scorer (``[scoring]``, ``[judge]``...) and the sandbox::

    [tools]
    default = "real"
    "send_*" = { mode = "stub", result = "sent" }
    "delete_*" = { mode = "deny", message = "not allowed in this sandbox" }
    "flaky_api" = { mode = "swallow", shown = "" }
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from ._errors import ConfigError
from ._policy_file import read_policy_file
from ._records import TOOL_MODES

DEFAULT_DENY_MESSAGE = "This tool call was denied by the sandbox policy."


class Stub:
    """A stub whose answer is computed from the call's arguments: ``Stub(lambda **a: ...)``."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __repr__(self) -> str:
        return f"Stub({getattr(self.fn, '__qualname__', self.fn)!r})"


class ToolPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The policy for one tool (or one glob of tools)."""

    mode: str = "real"
    result: Any = None
    message: str = DEFAULT_DENY_MESSAGE
    shown: Any = ""
    run: bool = True
    timeout: float | None = None
    source: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in TOOL_MODES:
            raise ConfigError(f"unknown tool mode {self.mode!r} (one of {', '.join(TOOL_MODES)})")
        if self.timeout is not None and self.timeout <= 0:
            raise ConfigError("a tool timeout must be positive")


def _coerce(value: ToolPolicy | str | Mapping[str, Any], where: str) -> ToolPolicy:
    if isinstance(value, ToolPolicy):
        return value
    if isinstance(value, str):
        value = {"mode": value}
    try:
        return msgspec.convert(dict(value), ToolPolicy)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{where}: {exc}") from None


class Policy:
    """Tool name -> :class:`ToolPolicy`, with a default for tools nobody named."""

    def __init__(
        self,
        tools: Mapping[str, ToolPolicy | str | Mapping[str, Any]] | None = None,
        *,
        default: ToolPolicy | str = "real",
        source: str = "policy",
    ) -> None:
        self.default = _coerce(default, f"{source}: [tools] default")
        self._exact: dict[str, ToolPolicy] = {}
        self._globs: list[tuple[str, ToolPolicy]] = []
        for name, value in (tools or {}).items():
            tp = _coerce(value, f"{source}: [tools] {name!r}")
            if any(ch in name for ch in "*?["):
                self._globs.append((name, tp))
            else:
                self._exact[name] = tp

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "policy") -> Policy:
        """Build from a ``[tools]`` table (``default`` is the default mode)."""
        tools = dict(data)
        default = tools.pop("default", "real")
        return cls(tools, default=default, source=source)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Policy:
        """Read the ``[tools]`` table of a policy file.

        Raises:
            ConfigError: unreadable file, bad TOML, unknown keys or modes.
        """
        p = os.fspath(path)
        tools = read_policy_file(p).get("tools", {})
        if not isinstance(tools, dict):
            raise ConfigError(f"{p}: [tools] must be a table")
        return cls.from_mapping(tools, source=p)

    def for_tool(self, name: str) -> ToolPolicy:
        """The policy in force for ``name``: exact name, then the first matching glob, then default."""
        if name in self._exact:
            return self._exact[name]
        for pattern, tp in self._globs:
            if fnmatch.fnmatchcase(name, pattern):
                return tp
        return self.default

    def modes(self, tools: list[str]) -> dict[str, str]:
        """``tool_modes`` for an episode header: each named tool's mode, plus ``default``."""
        out = {name: self.for_tool(name).mode for name in sorted(set(tools) | set(self._exact))}
        out.update({pattern: tp.mode for pattern, tp in self._globs})
        out["default"] = self.default.mode
        return out

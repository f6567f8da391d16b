"""Fidelity policies: what the sandbox does with each tool call.

A policy maps tool names (exact, or glob patterns tried in the order written) to a mode:

* ``real`` - run the tool; the agent sees what it returned, errors included;
* ``stub`` - do not run it; answer with a fixed ``result`` or ``Stub(fn)`` computed from the
  arguments;
* ``swallow`` - run it (or drop it, ``run = false``) and show the agent ``shown`` (empty by
  default) instead of what happened; both are recorded;
* ``deny`` - do not run it; tell the agent so with ``message``;
* ``replay`` - serve the result from a recorded episode; ``order``, ``on_miss`` and
  ``ignore`` (argument paths) say how calls are matched and what a miss does (defaults
  from the ``[replay]`` table; see ``_replay_match.py``). ``spy`` and ``record-new`` are
  ``replay`` with that ``on_miss``.

The same TOML file serves the scorer (``[scoring]``, ``[judge]``...) and the sandbox::

    [tools]
    default = "real"
    "send_*" = { mode = "stub", result = "sent" }
    "delete_*" = { mode = "deny", message = "not allowed in this sandbox" }
    "flaky_api" = { mode = "swallow", shown = "" }
    "search" = { mode = "replay", on_miss = "spy", ignore = ["$.request_id"] }

    [replay]                     # defaults of every replayed tool
    order = "any"                # or "strict", "per_tool"
    on_miss = "error"            # or "spy", "record-new"
    ignore = ["$._meta"]         # per-tool ignore paths add to these
"""

from __future__ import annotations

import copy
import fnmatch
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from litmus_sandbox._config.document import read_policy_file
from litmus_sandbox._core.replay_match import ON_MISS, ORDERS, ReplayOptions, replay_options
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.jsonpath import parse_path
from litmus_sandbox._model.records import TOOL_MODES

DEFAULT_DENY_MESSAGE = "This tool call was denied by the sandbox policy."
#: The tables of a policy file (the scorer reads the last four).
_DOCUMENT_TABLES = frozenset({"tools", "replay", "egress", "scoring", "judge", "refusal", "oracle"})


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
    #: Replay options (``mode = "replay"`` only); None takes the ``[replay]`` default.
    order: str | None = None
    on_miss: str | None = None
    ignore: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.mode not in TOOL_MODES:
            raise ConfigError(f"unknown tool mode {self.mode!r} (one of {', '.join(TOOL_MODES)})")
        if self.timeout is not None and self.timeout <= 0:
            raise ConfigError("a tool timeout must be positive")
        given = [k for k in ("order", "on_miss", "ignore") if getattr(self, k) is not None]
        if given and self.mode != "replay":
            raise ConfigError(
                f"{', '.join(given)} apply to mode = 'replay' only, not {self.mode!r}"
            )
        if self.order is not None and self.order not in ORDERS:
            raise ConfigError(f"unknown replay order {self.order!r} (one of {', '.join(ORDERS)})")
        if self.on_miss is not None and self.on_miss not in ON_MISS:
            raise ConfigError(
                f"unknown replay on_miss {self.on_miss!r} (one of {', '.join(ON_MISS)})"
            )
        for path in self.ignore or ():
            parse_path(path)


#: Modes that are replay with a given ``on_miss``: ``spy = replay, on_miss = "spy"``.
_REPLAY_ALIASES = {"spy": "spy", "record-new": "record-new"}


def _coerce(value: ToolPolicy | Stub | str | Mapping[str, Any], where: str) -> ToolPolicy:
    """A tool's policy from what a user may write: a mode, a table, a Stub, a ToolPolicy."""
    if isinstance(value, ToolPolicy):
        return value
    if isinstance(value, Stub):
        value = {"mode": "stub", "result": value}
    elif isinstance(value, str):
        value = {"mode": value}
    if not isinstance(value, Mapping):
        raise ConfigError(
            f'{where}: expected a mode (a string) or a table like {{ mode = "stub", ... }}, '
            f"not {type(value).__name__} {value!r}"
        )
    fields = dict(value)
    if (mode := fields.get("mode")) in _REPLAY_ALIASES:
        if fields.get("on_miss") not in (None, _REPLAY_ALIASES[mode]):
            raise ConfigError(f"{where}: mode {mode!r} already says on_miss = {mode!r}")
        fields.update(mode="replay", on_miss=_REPLAY_ALIASES[mode])
    result = fields.get("result")
    if fields.get("mode") == "stub" and callable(result) and not isinstance(result, Stub):
        fields["result"] = Stub(result)  # computed from the arguments
    try:
        return msgspec.convert(fields, ToolPolicy)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{where}: {exc}") from None


class Policy:
    """Tool name -> :class:`ToolPolicy`, with a default for tools nobody named.

    Args:
        tools: tool name or glob -> policy (a mode string, a mapping, a ToolPolicy).
        default: the policy of tools nobody named.
        source: where the policy came from, for error messages.
        replay: the ``[replay]`` defaults of replayed tools (order, on_miss, ignore).

    Raises:
        ConfigError: unknown modes, keys or values.
    """

    def __init__(
        self,
        tools: Mapping[str, ToolPolicy | Stub | str | Mapping[str, Any]] | None = None,
        *,
        default: ToolPolicy | Stub | str = "real",
        source: str = "policy",
        replay: ReplayOptions | Mapping[str, Any] | None = None,
        egress: Mapping[str, Any] | None = None,
    ) -> None:
        self.source = source
        #: The ``[egress]`` table that came with this policy (a sandbox applies it), if any.
        self.egress = dict(egress) if egress is not None else None
        self.replay = replay_options(replay, f"{source}: [replay]")
        self._replay_cache: dict[str, ReplayOptions | None] = {}
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
    def from_mapping(
        cls,
        data: Mapping[str, Any],
        *,
        source: str = "policy",
        replay: ReplayOptions | Mapping[str, Any] | None = None,
    ) -> Policy:
        """Build from a ``[tools]`` table (``default`` is the default mode) and,
        optionally, a ``[replay]`` table.

        Raises:
            ConfigError: unknown modes, keys or values.
        """
        tools = dict(data)
        default = tools.pop("default", "real")
        return cls(tools, default=default, source=source, replay=replay)

    @classmethod
    def from_document(cls, data: Mapping[str, Any], *, source: str = "policy") -> Policy:
        """Build from a whole policy document (a parsed file): its ``[tools]``, ``[replay]``
        and ``[egress]`` tables; the scorer's tables are left to the scorer.

        Raises:
            ConfigError: a table that is not a table, unknown modes, keys or values.
        """
        tables = {}
        for name in ("tools", "replay", "egress"):
            table = data.get(name)
            if table is not None and not isinstance(table, Mapping):
                raise ConfigError(f"{source}: [{name}] must be a table")
            tables[name] = table
        policy = cls.from_mapping(tables["tools"] or {}, source=source, replay=tables["replay"])
        if tables["egress"] is not None:
            # Checked now, so that a misspelt rule is an error naming this file, not one
            # met later by whoever applies the table. (Imported here: the oracles package
            # brings the watchers with it.)
            from litmus_sandbox._config.egress import EgressPolicy

            EgressPolicy.from_mapping(tables["egress"], source=source)
            policy.egress = dict(tables["egress"])
        return policy

    @classmethod
    def from_any_mapping(cls, data: Mapping[str, Any]) -> Policy:
        """A whole policy document (``{"tools": {...}, "egress": {...}}``, as a parsed file)
        when every key names a policy-file table holding a table; else the ``[tools]`` table.

        Raises:
            ConfigError: unknown modes, keys or values.
        """
        if (
            data
            and set(data) <= _DOCUMENT_TABLES
            and all(isinstance(v, Mapping) for v in data.values())
        ):
            return cls.from_document(data)
        return cls.from_mapping(data)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Policy:
        """Read the ``[tools]``, ``[replay]`` and ``[egress]`` tables of a policy file.

        Raises:
            ConfigError: unreadable file, bad TOML, unknown keys or modes.
        """
        p = os.fspath(path)
        return cls.from_document(read_policy_file(p), source=p)

    def with_replay(
        self,
        *,
        order: str | None = None,
        on_miss: str | None = None,
        ignore: Sequence[str] = (),
    ) -> Policy:
        """A copy whose ``[replay]`` defaults are overridden (``ignore`` paths are added).

        Raises:
            ConfigError: an unknown order or on_miss, an unreadable path.
        """
        out = copy.copy(self)
        out.replay = ReplayOptions(
            order=order or self.replay.order,
            on_miss=on_miss or self.replay.on_miss,
            ignore=(*self.replay.ignore, *ignore),
        )
        out._replay_cache = {}
        return out

    def replay_options(self, name: str) -> ReplayOptions | None:
        """How calls of ``name`` are replayed: None unless its mode is ``replay``.

        A tool's own ``order`` and ``on_miss`` win over the ``[replay]`` defaults; its
        ``ignore`` paths are added to the default ones.
        """
        if name in self._replay_cache:
            return self._replay_cache[name]
        tp = self.for_tool(name)
        opts = None
        if tp.mode == "replay":
            opts = ReplayOptions(
                order=tp.order or self.replay.order,
                on_miss=tp.on_miss or self.replay.on_miss,
                ignore=(*self.replay.ignore, *(tp.ignore or ())),
            )
        self._replay_cache[name] = opts
        return opts

    def entries(self) -> list[tuple[str, ToolPolicy]]:
        """Every (name or glob, policy) the policy names, then ``("default", ...)``."""
        return [*self._exact.items(), *self._globs, ("default", self.default)]

    def for_tool(self, name: str) -> ToolPolicy:
        """The policy in force for ``name``: exact name, then the first matching glob, then default."""
        if name in self._exact:
            return self._exact[name]
        for pattern, tp in self._globs:
            if fnmatch.fnmatchcase(name, pattern):
                return tp
        return self.default

    def require_recordings(self, available: bool) -> None:
        """Refuse a policy with tools in ``replay`` mode when there is nothing to replay.

        Raises:
            ConfigError: names those tools (``available`` is False).
        """
        if available:
            return
        out = [name for name, tp in self._exact.items() if tp.mode == "replay"]
        out += [pattern for pattern, tp in self._globs if tp.mode == "replay"]
        if self.default.mode == "replay":
            out.append("default")
        if out:
            raise ConfigError(
                f"{self.source}: {', '.join(map(repr, out))} in replay mode, but no recorded "
                "episodes to serve them (Sandbox(replay=...); on the command line, "
                "--replay EPISODES)"
            )

    def modes(self, tools: list[str]) -> dict[str, str]:
        """``tool_modes`` for an episode header: each named tool's mode, plus ``default``."""
        out = {name: self.for_tool(name).mode for name in sorted(set(tools) | set(self._exact))}
        out.update({pattern: tp.mode for pattern, tp in self._globs})
        out["default"] = self.default.mode
        return out

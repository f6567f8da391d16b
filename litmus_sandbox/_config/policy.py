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
  from the ``[replay]`` table; see ``litmus_sandbox._core.replay_match``). ``spy`` and
  ``record-new`` are ``replay`` with that ``on_miss``;
* ``emulate`` - do not run it; the ``[emulator]`` (a model) answers for it
  (``litmus_sandbox._config.emulator``).

What a file (or code) may write is decoded by ``litmus_sandbox._config.tools`` (one Struct
per mode) as part of the whole policy document (``litmus_sandbox._config.document``);
:class:`ToolPolicy` is the resolved form the sandbox dispatches on, one per name or glob.
"""

from __future__ import annotations

import copy
import fnmatch
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from litmus_sandbox._config.document import TABLES, PolicyDocument, decode_document, read_document
from litmus_sandbox._config.emulator import EmulatorConfig, emulator_table
from litmus_sandbox._config.record import RecordConfig, record_table, redaction_of
from litmus_sandbox._config.tools import (
    DEFAULT_DENY_MESSAGE,
    DenyEntry,
    EmulateEntry,
    ModeEntry,
    RealEntry,
    ReplayEntry,
    StubEntry,
    SwallowEntry,
    mode_entry,
    replay_table,
)
from litmus_sandbox._core.redaction import Redaction
from litmus_sandbox._core.replay_match import OnMiss, Order, ReplayOptions
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.records import ToolMode


class Stub:
    """A stub whose answer is computed from the call's arguments: ``Stub(lambda **a: ...)``."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __repr__(self) -> str:
        return f"Stub({getattr(self.fn, '__qualname__', self.fn)!r})"


class ToolPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The policy for one tool (or one glob of tools), as the sandbox applies it.

    Each mode reads only its own fields (``result`` for ``stub``, ``shown`` and ``run``
    for ``swallow``, ``message`` for ``deny``, the replay options for ``replay``,
    ``timeout`` for the modes that run the tool); the others keep their defaults.
    """

    mode: ToolMode = "real"
    result: Any = None
    message: str = DEFAULT_DENY_MESSAGE
    shown: Any = ""
    run: bool = True
    timeout: float | None = None
    source: str | None = None
    #: Replay options (``mode = "replay"`` only); None takes the ``[replay]`` default.
    order: Order | None = None
    on_miss: OnMiss | None = None
    ignore: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        # What the types cannot say, for policies built in code (files are decoded first).
        if self.timeout is not None and self.timeout <= 0:
            raise ConfigError("a tool timeout must be positive")
        given = [k for k in ("order", "on_miss", "ignore") if getattr(self, k) is not None]
        if given and self.mode != "replay":
            raise ConfigError(
                f"{', '.join(given)} apply to mode = 'replay' only, not {self.mode!r}"
            )


def tool_policy(entry: ModeEntry) -> ToolPolicy:
    """The :class:`ToolPolicy` a decoded tool entry configures."""
    match entry:
        case RealEntry(timeout=timeout):
            return ToolPolicy(mode="real", timeout=timeout)
        case StubEntry(result=result):
            if callable(result) and not isinstance(result, Stub):
                result = Stub(result)  # from code: computed from the arguments
            return ToolPolicy(mode="stub", result=result)
        case SwallowEntry():
            return ToolPolicy(
                mode="swallow", shown=entry.shown, run=entry.run, timeout=entry.timeout
            )
        case DenyEntry(message=message):
            return ToolPolicy(mode="deny", message=message)
        case EmulateEntry():
            return ToolPolicy(mode="emulate")
        case ReplayEntry():
            return ToolPolicy(
                mode="replay",
                order=entry.order,
                on_miss=entry.on_miss,
                ignore=entry.ignore,
                timeout=entry.timeout,
                source=entry.source,
            )


def _coerce(
    value: ToolPolicy | Stub | str | Mapping[str, Any], source: str, key: str
) -> ToolPolicy:
    """A tool's policy from what a user may write: a mode, a table, a Stub, a ToolPolicy."""
    if isinstance(value, ToolPolicy):
        return value
    if isinstance(value, Stub):
        return ToolPolicy(mode="stub", result=value)
    return tool_policy(mode_entry(value, source=source, key=key))


class Policy:
    """Tool name -> :class:`ToolPolicy`, with a default for tools nobody named.

    Args:
        tools: tool name or glob -> policy (a mode string, a mapping, a ToolPolicy).
        default: the policy of tools nobody named.
        source: where the policy came from, for error messages.
        replay: the ``[replay]`` defaults of replayed tools (order, on_miss, ignore).
        egress: the ``[egress]`` table that came with the policy (a sandbox applies it).
        record: the ``[record]`` table: what is redacted from a call's arguments before
            its step is written (None: the default redaction).
        emulator: the ``[emulator]`` table: what answers for tools in ``emulate`` mode.

    Raises:
        ConfigError: unknown modes, keys or values; a tool in ``emulate`` mode and no
            ``emulator``.
    """

    def __init__(
        self,
        tools: Mapping[str, ToolPolicy | Stub | str | Mapping[str, Any]] | None = None,
        *,
        default: ToolPolicy | Stub | str = "real",
        source: str = "policy",
        replay: ReplayOptions | Mapping[str, Any] | None = None,
        egress: Mapping[str, Any] | None = None,
        record: RecordConfig | Mapping[str, Any] | None = None,
        emulator: EmulatorConfig | Mapping[str, Any] | None = None,
    ) -> None:
        self.source = source
        #: What answers for the tools in ``emulate`` mode (``[emulator]``), if anything.
        self.emulator = emulator_table(emulator, source=source)
        #: What the recorder redacts from a tool call's arguments (``[record]``).
        self.redaction: Redaction = redaction_of(record_table(record, source=source), source=source)
        #: The ``[egress]`` table that came with this policy (a sandbox applies it), if any.
        self.egress = dict(egress) if egress is not None else None
        self.replay = replay_table(replay, source=source)
        self._replay_cache: dict[str, ReplayOptions | None] = {}
        self.default = _coerce(default, source, "default")
        self._exact: dict[str, ToolPolicy] = {}
        self._globs: list[tuple[str, ToolPolicy]] = []
        for name, value in (tools or {}).items():
            tp = _coerce(value, source, repr(name))
            if any(ch in name for ch in "*?["):
                self._globs.append((name, tp))
            else:
                self._exact[name] = tp
        if self.emulator is None and (emulated := self.named("emulate")):
            raise ConfigError(
                f"{source}: {', '.join(map(repr, emulated))} in emulate mode, but no emulator "
                '(an [emulator] table: kind = "openai" and its [emulator.params])'
            )
        #: What ``tool_modes`` says of an emulated tool: its emulator's fingerprint.
        self._emulated = (
            "emulate" if self.emulator is None else f"emulate:{self.emulator.fingerprint()}"
        )

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
    def from_document(
        cls, data: PolicyDocument | Mapping[str, Any], *, source: str = "policy"
    ) -> Policy:
        """Build from a whole policy document (decoded, or as a parsed file): its
        ``[tools]``, ``[replay]``, ``[record]`` and ``[egress]`` tables. Every other table is
        checked too (the scorer reads them), so a document the sandbox takes, the scorer
        takes.

        Raises:
            ConfigError: an unknown table, or a table, key or value that is not valid.
        """
        doc = data if isinstance(data, PolicyDocument) else decode_document(data, source=source)
        return cls(
            {name: tool_policy(entry) for name, entry in doc.tools.items()},
            default=tool_policy(doc.default),
            source=doc.source,
            replay=doc.replay,
            egress=doc.egress,
            record=doc.record,
            emulator=doc.emulator,
        )

    @classmethod
    def from_any_mapping(cls, data: Mapping[str, Any]) -> Policy:
        """A whole policy document (``{"tools": {...}, "egress": {...}}``, as a parsed file)
        when every key names a policy-file table holding a table; else the ``[tools]`` table.

        Raises:
            ConfigError: unknown modes, keys or values.
        """
        if data and set(data) <= set(TABLES) and all(isinstance(v, Mapping) for v in data.values()):
            return cls.from_document(data)
        return cls.from_mapping(data)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Policy:
        """Read a policy file (all of it is checked) for its ``[tools]``, ``[replay]``,
        ``[record]`` and ``[egress]`` tables.

        Raises:
            ConfigError: unreadable file, bad TOML, an unknown table, key, mode or value.
        """
        return cls.from_document(read_document(path))

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
        if out := self.named("replay"):
            raise ConfigError(
                f"{self.source}: {', '.join(map(repr, out))} in replay mode, but no recorded "
                "episodes to serve them (Sandbox(replay=...); on the command line, "
                "--replay EPISODES)"
            )

    def named(self, mode: str) -> list[str]:
        """The names and globs in ``mode`` (``default`` too, when it is in it)."""
        out = [name for name, tp in self._exact.items() if tp.mode == mode]
        out += [pattern for pattern, tp in self._globs if tp.mode == mode]
        if self.default.mode == mode:
            out.append("default")
        return out

    def modes(self, tools: list[str]) -> dict[str, str]:
        """``tool_modes`` for an episode header: each named tool's mode, plus ``default``.
        An emulated tool's mode names its emulator: ``emulate:FINGERPRINT``."""
        names = sorted(set(tools) | set(self._exact))
        out: dict[str, str] = {name: self._mode(self.for_tool(name)) for name in names}
        out.update({pattern: self._mode(tp) for pattern, tp in self._globs})
        out["default"] = self._mode(self.default)
        return out

    def _mode(self, tp: ToolPolicy) -> str:
        return self._emulated if tp.mode == "emulate" else tp.mode

"""The ``[tools]`` and ``[replay]`` tables as written: one tagged Struct per tool mode.

A tool entry is a mode name (``"real"``) or a table tagged by ``mode``; each mode takes
only the keys that mean something to it, so ``{ mode = "deny", result = "x" }`` is an
error, not a key silently ignored::

    [tools]
    default = "real"
    "send_*" = { mode = "stub", result = "sent" }
    "delete_*" = { mode = "deny", message = "not allowed in this sandbox" }
    "flaky_api" = { mode = "swallow", shown = "" }
    "search" = { mode = "replay", on_miss = "spy", ignore = ["$.request_id"] }
    "pay_*" = "emulate"          # a model answers ([emulator]); the tool never runs

    [replay]                     # defaults of every replayed tool
    order = "any"                # or "strict", "per_tool"
    on_miss = "error"            # or "spy", "record-new"
    ignore = ["$._meta"]         # per-tool ignore paths add to these

``spy`` and ``record-new`` are ``replay`` with that ``on_miss``; they are resolved here,
so the entries that leave this module have one of the six modes of
:data:`~litmus_sandbox._model.records.ToolMode`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, get_args

import msgspec

from litmus_sandbox._config.explain import config_error
from litmus_sandbox._core.replay_match import OnMiss, Order, ReplayOptions
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.jsonpath import parse_path
from litmus_sandbox._model.safe_text import clip

#: How much of a bad value an error message quotes.
QUOTED_CHARS = 120

DEFAULT_DENY_MESSAGE = "This tool call was denied by the sandbox policy."

#: A mode as a bare string: the six modes and the two replay aliases.
ModeName = Literal["real", "stub", "swallow", "deny", "replay", "emulate", "spy", "record-new"]
#: Modes that are replay with a given ``on_miss``: ``spy = replay, on_miss = "spy"``.
REPLAY_ALIASES: dict[str, OnMiss] = {"spy": "spy", "record-new": "record-new"}

Seconds = Annotated[float, msgspec.Meta(gt=0)]


class _Entry(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, tag_field="mode"
):
    pass


class RealEntry(_Entry, frozen=True, tag="real"):
    """Run the tool; the agent sees what it returned, errors included."""

    mode: ClassVar[Literal["real"]] = "real"
    timeout: Seconds | None = None


class StubEntry(_Entry, frozen=True, tag="stub"):
    """Do not run it; answer ``result`` (from code, a ``Stub`` computes it from the args)."""

    mode: ClassVar[Literal["stub"]] = "stub"
    result: Any = None


class SwallowEntry(_Entry, frozen=True, tag="swallow"):
    """Run it (or drop it, ``run = false``) and show ``shown`` instead of what happened."""

    mode: ClassVar[Literal["swallow"]] = "swallow"
    shown: Any = ""
    run: bool = True
    timeout: Seconds | None = None


class DenyEntry(_Entry, frozen=True, tag="deny"):
    """Do not run it; tell the agent so with ``message``."""

    mode: ClassVar[Literal["deny"]] = "deny"
    message: str = DEFAULT_DENY_MESSAGE


class ReplayEntry(_Entry, frozen=True, tag="replay"):
    """Serve the result from a recorded episode; None takes the ``[replay]`` default."""

    mode: ClassVar[Literal["replay"]] = "replay"
    order: Order | None = None
    on_miss: OnMiss | None = None
    ignore: tuple[str, ...] | None = None
    #: The time limit of a call that runs for real on a miss (``spy``, ``record-new``).
    timeout: Seconds | None = None
    #: Accepted since the first policy files; nothing reads it.
    source: str | None = None

    def __post_init__(self) -> None:
        for path in self.ignore or ():
            parse_path(path)


class EmulateEntry(_Entry, frozen=True, tag="emulate"):
    """Do not run it; the ``[emulator]`` answers for it (the step is ``emulated``)."""

    mode: ClassVar[Literal["emulate"]] = "emulate"


ModeEntry = RealEntry | StubEntry | SwallowEntry | DenyEntry | ReplayEntry | EmulateEntry
#: A tool entry as a policy file may write it.
ToolEntry = ModeName | ModeEntry


class ReplayTable(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``[replay]`` table: the defaults of every replayed tool."""

    order: Order = "any"
    on_miss: OnMiss = "error"
    ignore: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for path in self.ignore:
            parse_path(path)


def mode_entry(value: Any, *, source: str, key: str) -> ModeEntry:
    """Decode one ``[tools]`` entry (a mode name or a table) into its mode's Struct.

    Args:
        value: what the file (or code) gives for the tool.
        source: the file, for messages.
        key: the tool name or glob as it should be shown (``'send_*'``, ``default``).

    Raises:
        ConfigError: not a mode or a table, an unknown mode or key, a bad value.
    """
    where = f"{source}: [tools] {key}"
    if not isinstance(value, str | Mapping):
        raise ConfigError(
            f'{where}: expected a mode (a string) or a table like {{ mode = "stub", ... }}, '
            f"not {type(value).__name__} {clip(repr(value), QUOTED_CHARS)}"
        )
    if isinstance(value, Mapping):
        fields = dict(value)
        mode = fields.setdefault("mode", "real")  # a table without a mode runs the tool
        if not isinstance(mode, str):
            shown = clip(repr(mode), QUOTED_CHARS)
            raise ConfigError(
                f"{where}: mode: expected one of {', '.join(get_args(ModeName))} (a string), "
                f"not {type(mode).__name__} {shown}"
            )
        if mode in REPLAY_ALIASES:
            if fields.get("on_miss") not in (None, REPLAY_ALIASES[mode]):
                raise ConfigError(f"{where}: mode {mode!r} already says on_miss = {mode!r}")
            fields.update(mode="replay", on_miss=REPLAY_ALIASES[mode])
        value = fields
    try:
        entry: ToolEntry = msgspec.convert(value, ToolEntry)
    except msgspec.ValidationError as exc:
        raise config_error(
            exc, ToolEntry, value, source=source, table="tools", key=key, noun="tool mode"
        ) from None
    return _BARE[entry] if isinstance(entry, str) else entry


_BARE: dict[str, ModeEntry] = {
    "real": RealEntry(),
    "stub": StubEntry(),
    "swallow": SwallowEntry(),
    "deny": DenyEntry(),
    "replay": ReplayEntry(),
    "emulate": EmulateEntry(),
    **{alias: ReplayEntry(on_miss=on_miss) for alias, on_miss in REPLAY_ALIASES.items()},
}


def replay_table(value: ReplayOptions | Mapping[str, Any] | None, *, source: str) -> ReplayOptions:
    """Decode a ``[replay]`` table (or None) into :class:`ReplayOptions`.

    Raises:
        ConfigError: an unknown key, order or on_miss; an unreadable ignore path.
    """
    if value is None:
        return ReplayOptions()
    if isinstance(value, ReplayOptions):
        return value
    try:
        table = msgspec.convert(dict(value), ReplayTable)
    except msgspec.ValidationError as exc:
        raise config_error(exc, ReplayTable, value, source=source, table="replay") from None
    return ReplayOptions(order=table.order, on_miss=table.on_miss, ignore=table.ignore)

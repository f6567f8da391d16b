"""The policy document: one TOML file, decoded once and checked whole.

Theory of operation
-------------------
Every consumer of a policy file - the sandbox (``Policy.from_file``), ``score``,
``rebaseline``, ``proxy mcp --policy``, :func:`~litmus_sandbox.load_policy` - reads it
with :func:`read_document`, so each checks every table the same way: a misspelt
``[scoring]`` key is refused by the sandbox, a misspelt tool mode by the scorer.

1. The file is read, decoded as UTF-8 and parsed by ``tomllib``.
2. Its top-level keys must be tables this version knows (:data:`TABLES`).
3. msgspec converts each table into its Struct: unknown keys are refused everywhere, closed
   vocabularies are Literals, tool modes and judge kinds are tagged unions (``mode``,
   ``kind``). ``[tools]`` is converted entry by entry and ``[egress]`` rule by rule, so an
   error can name the key (msgspec's paths do not name dict keys).
4. A failure is one :class:`ConfigError` line naming the file, the table and the key, with
   the near miss when there is one (``litmus_sandbox._config.explain``).
5. A document that carries a secret-shaped literal anywhere is refused
   (``litmus_sandbox._config.secrets``): secrets come from the environment.

A mapping (a document built in code, a policy record being rebuilt) goes through the same
:func:`decode_document`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from litmus_sandbox._config.egress import EgressPolicy
from litmus_sandbox._config.emulator import EmulatorConfig, emulator_table
from litmus_sandbox._config.explain import config_error, near_miss
from litmus_sandbox._config.record import RecordConfig, redaction_of
from litmus_sandbox._config.scoring import (
    JudgeConfig,
    OracleConfig,
    RefusalConfig,
    RulesJudgeConfig,
)
from litmus_sandbox._config.secrets import refuse_secret_literals
from litmus_sandbox._config.tools import ModeEntry, RealEntry, mode_entry, replay_table
from litmus_sandbox._core.replay_match import ReplayOptions
from litmus_sandbox._core.scoring import ScoringPolicy
from litmus_sandbox._model.errors import ConfigError, RecordDecodeError
from litmus_sandbox._store.files import read_toml

#: The tables of a policy file, in the order the docs present them.
TABLES: tuple[str, ...] = (
    "tools",
    "replay",
    "emulator",
    "record",
    "egress",
    "scoring",
    "refusal",
    "judge",
    "oracle",
)
#: Tables converted whole by msgspec, and their Structs.
_STRUCT_TABLES: dict[str, Any] = {
    "record": RecordConfig,
    "scoring": ScoringPolicy,
    "refusal": RefusalConfig,
    "judge": JudgeConfig,
    "oracle": OracleConfig,
}


class PolicyDocument(msgspec.Struct, frozen=True, kw_only=True):
    """A whole policy file, decoded and checked: what every consumer reads.

    ``tools`` keeps the file's order (globs are tried in the order written) and holds every
    entry but ``default``. ``egress`` is the ``[egress]`` table as written, already checked
    (None when the file has none: the sandbox then applies its own default).
    """

    source: str = "policy"
    #: The folder the file is in: a Python judge's relative ``path`` is found there.
    base_dir: str | None = None
    tools: dict[str, ModeEntry] = {}
    default: ModeEntry = RealEntry()
    replay: ReplayOptions = ReplayOptions()
    #: The ``[emulator]`` table (None: no emulator; an ``emulate`` tool is then refused).
    emulator: EmulatorConfig | None = None
    record: RecordConfig = RecordConfig()
    egress: dict[str, Any] | None = None
    scoring: ScoringPolicy = ScoringPolicy()
    refusal: RefusalConfig = RefusalConfig()
    judge: JudgeConfig = RulesJudgeConfig()
    oracle: OracleConfig = OracleConfig()


def read_document(path: str | os.PathLike[str]) -> PolicyDocument:
    """Read and check a whole policy file.

    Raises:
        ConfigError: unreadable file, not UTF-8, bad TOML, or any table, key or value
            that is not valid (named with the file, the table and the key).
    """
    p = os.fspath(path)
    return decode_document(_read_toml(p), source=p, base_dir=str(Path(p).resolve().parent))


def read_policy_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a policy file into its tables as written, once the whole file is checked.

    Raises:
        ConfigError: as :func:`read_document`.
    """
    p = os.fspath(path)
    data = _read_toml(p)
    decode_document(data, source=p)
    return data


def decode_document(
    data: Mapping[str, Any], *, source: str = "policy", base_dir: str | None = None
) -> PolicyDocument:
    """Check a parsed policy document (``{"tools": {...}, "judge": {...}}``) whole.

    Args:
        data: the tables, as ``tomllib`` gives them.
        source: where they came from, for messages.
        base_dir: where a Python judge's relative ``path`` is found.

    Raises:
        ConfigError: an unknown table, or a table, key or value that is not valid.
    """
    for name, table in data.items():
        if name not in TABLES:
            raise ConfigError(
                f"{source}: unknown table [{name}]{near_miss(name, TABLES)} "
                f"(expected {', '.join(TABLES)})"
            )
        if not isinstance(table, Mapping):
            raise ConfigError(f"{source}: [{name}] must be a table, not {type(table).__name__}")
    tools = dict(data.get("tools", {}))
    default = mode_entry(tools.pop("default", "real"), source=source, key="default")
    decoded: dict[str, Any] = {
        name: _table(name, data[name], source) for name in _STRUCT_TABLES if name in data
    }
    if (reduction := decoded.get("scoring", ScoringPolicy()).reduction) != "all":
        raise ConfigError(
            f"{source}: [scoring] reduction: {reduction!r} is not supported (only 'all')"
        )
    if "record" in decoded:
        redaction_of(decoded["record"], source=source)  # its patterns compile, and so on
    egress = data.get("egress")
    if egress is not None:
        EgressPolicy.from_mapping(egress, source=source)  # checked here, applied by the sandbox
    emulator = emulator_table(data.get("emulator"), source=source)
    entries = {name: mode_entry(v, source=source, key=repr(name)) for name, v in tools.items()}
    if emulator is None:
        emulated = [n for n, e in [*entries.items(), ("default", default)] if e.mode == "emulate"]
        if emulated:
            raise ConfigError(
                f"{source}: {', '.join(map(repr, emulated))} in emulate mode, but no "
                '[emulator] table says what answers for them (kind = "openai", [emulator.params])'
            )
    # Last: a table's own error (it may say more) comes first, and never echoes a value.
    refuse_secret_literals(data, source=source)
    return PolicyDocument(
        source=source,
        base_dir=base_dir,
        tools=entries,
        default=default,
        replay=replay_table(data.get("replay"), source=source),
        emulator=emulator,
        egress=dict(egress) if egress is not None else None,
        **decoded,
    )


def _table(name: str, table: Mapping[str, Any], source: str) -> Any:
    typ = _STRUCT_TABLES[name]
    if name == "judge":
        table = _with_kinds(table)
    try:
        return msgspec.convert(table, typ)
    except msgspec.ValidationError as exc:
        raise config_error(exc, typ, table, source=source, table=name) from None


def _with_kinds(judge: Mapping[str, Any]) -> dict[str, Any]:
    """A judge table, and its fallback's, with ``kind = "rules"`` where none is written."""
    out = {"kind": "rules", **judge}
    if isinstance(fallback := out.get("fallback"), Mapping):
        out["fallback"] = _with_kinds(fallback)
    return out


def _read_toml(path: str) -> dict[str, Any]:
    # A regular file only, capped, nesting checked (the readers' bounded reading).
    try:
        return read_toml(path)
    except RecordDecodeError as exc:
        raise ConfigError(str(exc)) from None

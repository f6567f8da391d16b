"""Text that is not valid Unicode, and bytes, in records: written losslessly. Sans-io.

A Python ``str`` may hold lone surrogates (``os.listdir`` gives them for file names that
are not UTF-8, ``"\\udcff"`` for the byte ``0xff``), which UTF-8 cannot encode; a tool
or an agent may hand over ``bytes``, which JSON has no type for. Whatever the field (a
message, an argument's name or value, a result, an error, a case or tool name), such a
value is written as a *stand-in* that is valid text, and the exact original is kept
beside it, in the record's ``meta["lossless"]``:

- a ``str`` holding lone surrogates is written with each of them as U+FFFD;
- ``bytes`` (``bytearray``, ``memoryview``) are written as their UTF-8 text, each byte
  that is not UTF-8 as U+FFFD;
- an object key is written the same way, with ``#2``, ``#3``… appended when its stand-in
  is already a key of that object.

Each entry of ``meta["lossless"]`` says where and what: ``at``, the path into the record
as written (object keys as written, list indices); ``str`` or ``bytes``, the base64 of the
original (for a ``str``, its UTF-8 with each lone surrogate as its three bytes: Python's
``surrogatepass``); ``key: true`` when the original is the name of the key at ``at``,
not its value. Readers get the stand-ins (valid text, what judges and reports see);
:func:`restore_original` gives the record as it was handed to the writer. A record with
no ``meta`` (verdicts) keeps the stand-ins alone.

The writer (``codec.encode``) comes here only when the plain encoding fails on a lone
surrogate, or when :func:`may_hold_bytes` says a field typed ``Any`` may hold bytes (a
msgpack encoding of those fields, with no ``bin`` marker byte, proves it does not).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import msgspec

from litmus_sandbox._model.records import (
    Effects,
    Episode,
    EpisodeEnd,
    EpisodeHeader,
    MessageStep,
    ToolCallStep,
)

__all__ = [
    "LOSSLESS_KEY",
    "may_hold_bytes",
    "restore_original",
    "stand_in",
    "stand_in_text",
    "written_form",
]

#: The key of the originals in a record's ``meta``.
LOSSLESS_KEY = "lossless"

_BYTES = (bytes, bytearray, memoryview)
_SURROGATE = re.compile("[\ud800-\udfff]")
_T = TypeVar("_T")
#: A place in a record: object keys (as written) and list indices.
_At = tuple[str | int, ...]


def _has_surrogate(text: str) -> bool:
    return not text.isascii() and _SURROGATE.search(text) is not None


def stand_in_text(text: str) -> str:
    """``text`` with each lone surrogate as U+FFFD (``text`` itself when it has none)."""
    return _SURROGATE.sub("\ufffd", text) if _has_surrogate(text) else text


def _stand_in_bytes(data: bytes) -> str:
    return data.decode("utf-8", "replace")


class _Walk:
    """Builds the written form of a value, noting each original it stands in for."""

    def __init__(self, note: bool) -> None:
        self.note = note
        self.entries: list[dict[str, Any]] = []

    def _keep(self, at: _At, kind: str, raw: bytes, key: bool) -> None:
        if self.note:
            entry: dict[str, Any] = {"at": list(at), kind: base64.b64encode(raw).decode()}
            if key:
                entry["key"] = True
            self.entries.append(entry)

    def value(self, value: Any, at: _At) -> Any:
        if isinstance(value, str):
            if _has_surrogate(value):
                self._keep(at, "str", value.encode("utf-8", "surrogatepass"), False)
                return _SURROGATE.sub("\ufffd", value)
            return value
        if isinstance(value, dict):
            return self.mapping(value, at)
        if isinstance(value, list | tuple):
            return [self.value(item, (*at, i)) for i, item in enumerate(value)]
        if isinstance(value, _BYTES):
            data = bytes(value)
            self._keep(at, "bytes", data, False)
            return _stand_in_bytes(data)
        return value

    def mapping(self, obj: dict[Any, Any], at: _At) -> dict[Any, Any]:
        taken = {k for k in obj if isinstance(k, str) and not _has_surrogate(k)}
        out: dict[Any, Any] = {}
        for key, item in obj.items():
            name = key
            if isinstance(key, str) and _has_surrogate(key):
                name = _free(_SURROGATE.sub("\ufffd", key), taken)
                self._keep((*at, name), "str", key.encode("utf-8", "surrogatepass"), True)
            elif isinstance(key, _BYTES):
                data = bytes(key)
                name = _free(_stand_in_bytes(data), taken)
                self._keep((*at, name), "bytes", data, True)
            out[name] = self.value(item, (*at, name))
        return out


def _free(name: str, taken: set[str]) -> str:
    """``name``, or ``name#2``, ``name#3``… the first not in ``taken`` (then taken)."""
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}#{n}", n + 1
    taken.add(candidate)
    return candidate


def stand_in(value: Any) -> Any:
    """``value`` as a record writes it (see the module docstring), without the originals:
    valid text for display."""
    return _Walk(note=False).value(value, ())


def written_form(record: msgspec.Struct) -> Any:
    """``record`` as builtins, as the writer writes it: stand-ins in place, and the
    originals in ``meta["lossless"]`` (after any entries already there).

    Raises:
        TypeError: a value msgspec cannot convert (the caller's fallbacks apply).
    """
    data = msgspec.to_builtins(record, builtin_types=_BYTES)
    walk = _Walk(note=True)
    out = walk.value(data, ())
    meta = out.get("meta") if isinstance(out, dict) else None
    if walk.entries and isinstance(meta, dict):
        earlier = meta.get(LOSSLESS_KEY)
        meta[LOSSLESS_KEY] = [*(earlier if isinstance(earlier, list) else ()), *walk.entries]
    return out


# ---------------------------------------------------------------- may it hold bytes?


def _tool_call(s: ToolCallStep) -> tuple[Any, ...]:
    actual = s.actual.value if s.actual is not None else None
    return (s.args, s.shown.content, s.shown.structured, actual, s.effects.state, s.meta)


def _phase(effects: Effects | msgspec.UnsetType) -> Any:
    return effects.state if isinstance(effects, Effects) else ()


#: Record type -> its values typed ``Any`` (the only places bytes can hide in a record
#: built as the annotations say), None when there are none. ``tests/store/test_lossless.py``
#: checks the list.
_ANY_VALUES: dict[type[Any], Callable[[Any], Any]] = {
    ToolCallStep: _tool_call,
    MessageStep: lambda s: s.meta or None,
    EpisodeHeader: lambda h: (h.oracles, h.meta),
    EpisodeEnd: lambda e: (e.unattributed.state, _phase(e.startup), _phase(e.shutdown), e.meta),
}
_packer = msgspec.msgpack.Encoder()


def may_hold_bytes(record: msgspec.Struct) -> bool:
    """Whether ``record`` may hold bytes, told at C speed: False proves it does not.

    msgpack, unlike JSON, keeps bytes apart from text: no ``bin 8/16/32`` marker byte
    (``0xc4``-``0xc6``) anywhere in the encoding of the record's ``Any`` values means no
    bytes among them. A marker byte may also be part of a string, a number or a length:
    then the record takes the slow path, which finds out.
    """
    pick = _ANY_VALUES.get(type(record))
    values = None if pick is None else pick(record)
    if values is None:
        return False
    try:
        packed = _packer.encode(values)
    except Exception:  # what msgpack cannot hold (a huge integer): the slow path decides
        return True
    # Ints, not one-byte strings: ``bytes in bytes`` first tries the operand as an int,
    # and the exception it makes and drops costs more than the whole encoding.
    return 0xC4 in packed or 0xC5 in packed or 0xC6 in packed


# ---------------------------------------------------------------- restoring


def restore_original(record: _T) -> _T:
    """``record`` (or every record of an :class:`Episode`) with each stand-in back to the
    original that ``meta["lossless"]`` keeps, and that entry left out: the record as it
    was handed to the writer. Records without such entries are returned as they are.

    An entry applies only where the record still holds the stand-in of its original;
    one that does not (a malformed entry, a record edited since) is ignored, and its
    place keeps what it holds. Where a ``bytes`` key stands in an object whose keys the
    record's type says are text (``args``, ``meta``), the record's ``bytes`` keys keep
    their text form.
    """
    if isinstance(record, Episode):
        return msgspec.structs.replace(
            record,
            header=restore_original(record.header),
            steps=tuple(restore_original(s) for s in record.steps),
            end=restore_original(record.end),
        )
    meta = getattr(record, "meta", None)
    if not isinstance(record, msgspec.Struct) or not isinstance(meta, dict):
        return record
    entries = meta.get(LOSSLESS_KEY)
    if not isinstance(entries, list):
        return record
    parsed = list(_parse(entries))
    try:
        return msgspec.convert(_apply(_thawed(record), parsed, True), type=type(record))
    except msgspec.ValidationError:  # a bytes key where the type wants text
        return msgspec.convert(_apply(_thawed(record), parsed, False), type=type(record))


def _thawed(record: msgspec.Struct) -> Any:
    """``record`` as builtins with lists for tuples (to change in place), without the
    originals."""

    def thaw(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: thaw(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [thaw(v) for v in value]
        return value

    data = thaw(msgspec.to_builtins(record, builtin_types=_BYTES))
    del data["meta"][LOSSLESS_KEY]
    return data


class _Entry(msgspec.Struct, frozen=True):
    at: _At
    original: str | bytes
    key: bool


def _parse(entries: list[Any]) -> Iterator[_Entry]:
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        at, key = entry.get("at"), entry.get("key", False)
        if not (isinstance(at, list) and at and isinstance(key, bool)):
            continue
        if not all(isinstance(s, str) or (type(s) is int and s >= 0) for s in at):
            continue
        kinds = [kind for kind in ("str", "bytes") if kind in entry]
        if len(kinds) != 1 or not isinstance(encoded := entry[kinds[0]], str):
            continue  # one of them, never both
        try:
            data = base64.b64decode(encoded, validate=True)
            original = data.decode("utf-8", "surrogatepass") if kinds == ["str"] else data
        except (binascii.Error, UnicodeDecodeError, ValueError):
            continue
        yield _Entry(tuple(at), original, key)


def _written(original: str | bytes) -> str:
    if isinstance(original, bytes):
        return _stand_in_bytes(original)
    return stand_in_text(original)


def _holder(data: Any, at: _At) -> Any:
    """The object or list at ``at`` (None: there is none)."""
    for segment in at:
        if isinstance(data, dict) and isinstance(segment, str):
            data = data.get(segment)
        elif isinstance(data, list) and isinstance(segment, int) and segment < len(data):
            data = data[segment]
        else:
            return None
    return data


def _holds(holder: Any, last: str | int) -> bool:
    if isinstance(holder, dict):
        return isinstance(last, str) and last in holder
    return isinstance(holder, list) and isinstance(last, int) and last < len(holder)


def _names(key: str, original: str | bytes) -> bool:
    """Whether ``key`` is what the writer names a key ``original``: its stand-in, or
    that with ``#N`` appended."""
    stand = _written(original)
    return key == stand or (key.startswith(f"{stand}#") and key[len(stand) + 1 :].isdigit())


def _apply(data: Any, entries: list[_Entry], bytes_keys: bool) -> Any:
    # Values first, while every path names keys as written; then keys, deepest first, so
    # that a key renamed never moves a path still to be followed.
    for e in entries:
        holder, last = _holder(data, e.at[:-1]), e.at[-1]
        if not e.key and _holds(holder, last) and holder[last] == _written(e.original):
            holder[last] = e.original
    for e in sorted((e for e in entries if e.key), key=lambda e: -len(e.at)):
        holder, last = _holder(data, e.at[:-1]), e.at[-1]
        if not (isinstance(holder, dict) and isinstance(last, str) and last in holder):
            continue
        if (isinstance(e.original, bytes) and not bytes_keys) or not _names(last, e.original):
            continue
        if e.original in holder:
            continue  # the original name is taken: renaming would lose a member
        items = list(holder.items())
        holder.clear()
        holder.update((e.original if k == last else k, v) for k, v in items)
    return data

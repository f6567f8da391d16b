"""One line for a policy mistake: the file, the table, the key, and the near miss.

msgspec checks every table of the policy document against its Struct; its errors say what
is wrong and where, as a JSON path inside the value it was given (``Object contains
unknown field `reslt` - at `$.fallback```). :func:`config_error` turns one into a
:class:`ConfigError` that names the file and the TOML table, and, for an unknown key or a
value outside a closed vocabulary, suggests the closest allowed one (``difflib``). What was
allowed at that place is found by walking the decoded type (``msgspec.inspect``) along the
path, next to the data: a union of tagged Structs is resolved by the tag the data carries,
so ``mode = "real"`` is checked against the keys of a real tool, and a key that belongs to
another mode says so.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec
import msgspec.inspect as mi

from litmus_sandbox._model.errors import ConfigError

_AT = re.compile(r"^(?P<problem>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_SEGMENT = re.compile(r"\.(?P<name>[^.\[]+)|\[(?P<index>\d+)\]|\[\.\.\.\]")
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<name>[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]*)`$")
_BAD_VALUE = re.compile(r"^Invalid (?:enum )?value (?P<value>.*)$")

#: What a value outside a vocabulary is called in messages, by ``table.key`` or ``key``.
_NOUNS = {
    "egress.mode": "egress mode",
    "mode": "tool mode",
    "kind": "judge kind",
    "order": "replay order",
    "on_miss": "replay on_miss",
    "fidelity": "fidelity",
    "forbidden_findings": "finding",
}


def near_miss(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` when one of ``choices`` is close to ``word``, else ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def unknown_value(noun: str, value: object, choices: Sequence[str]) -> str:
    """``"unknown tool mode 'stubbed'; did you mean 'stub'? (one of real, stub, ...)"``."""
    shown = value if isinstance(value, str) and value.startswith("'") else repr(value)
    word = shown.strip("'")
    listed = ", ".join(sorted(choices))
    return f"unknown {noun} {shown}{near_miss(word, choices)} (one of {listed})"


def config_error(
    exc: msgspec.ValidationError,
    typ: Any,
    data: Any,
    *,
    source: str,
    table: str,
    key: str | None = None,
    noun: str = "value",
) -> ConfigError:
    """The :class:`ConfigError` for ``exc``, raised converting ``data`` to ``typ``.

    Args:
        source: the file (or whatever the policy came from).
        table: the TOML table ``data`` is (``judge``); sub-tables are added from the path.
        key: the key ``data`` is under in that table, for tables of user-named entries
            (``'send_*'`` in ``[tools]``).
        noun: what ``data`` itself is called when it is a value outside a vocabulary.
    """
    m = _AT.match(str(exc))
    assert m is not None  # the pattern matches any text
    problem, path = m["problem"], _segments(m["path"] or "")
    tables, keys = [table], [key] if key is not None else []
    where = _Walk(mi.type_info(typ), data)
    value_problem = _BAD_VALUE.match(problem)
    # A bad value's path ends at the value; the other problems' paths end at their object.
    for seg in path[:-1] if value_problem else path:
        where.step(seg, tables, keys)
    if unknown := _UNKNOWN.match(problem):
        problem = where.unknown_key(unknown["name"])
    elif missing := _MISSING.match(problem):
        problem = where.missing_key(missing["name"])
    elif value_problem and (choices := where.choices(path[-1] if path else None)):
        last = path[-1] if path else None
        # What the value is: the field it is in (that of a list, for an item), else noun.
        name = last if isinstance(last, str) else None
        if isinstance(last, int) and len(path) > 1 and isinstance(path[-2], str):
            name = path[-2]
            keys[-1] += f"[{last}]"
        elif name is not None and name not in where.tag_fields():
            keys.append(name)  # the tag is the entry's own: [tools] 'send_*', not ...mode
        described = _NOUNS.get(f"{table}.{name}", _NOUNS.get(name or "", noun))
        problem = unknown_value(described, value_problem["value"], choices)
    location = f"{source}: [{'.'.join(tables)}]" + (f" {'.'.join(keys)}" if keys else "")
    return ConfigError(f"{location}: {problem}")


def _segments(path: str) -> list[str | int | None]:
    """``.fallback.rules[0]`` -> ``["fallback", "rules", 0]``; a dict key msgspec does not
    name (``[...]``) is None."""
    out: list[str | int | None] = []
    for m in _SEGMENT.finditer(path):
        out.append(m["name"] if m["name"] is not None else None)
        if m["index"] is not None:
            out[-1] = int(m["index"])
    return out


class _Walk:
    """A place in a decoded type and in the data decoded into it, moved one step at a time."""

    def __init__(self, typ: mi.Type, data: Any) -> None:
        self.type, self.data = typ, data

    def _resolved(self) -> tuple[mi.Type, tuple[mi.StructType, ...]]:
        """The type here without Optional or constraints; a union of tagged Structs is the
        Struct the data's tag names (and the union's Structs, for sibling keys)."""
        t = self.type
        while True:
            if isinstance(t, mi.Metadata):
                t = t.type
            elif isinstance(t, mi.UnionType):
                structs = tuple(u for u in t.types if isinstance(u, mi.StructType))
                if structs and isinstance(self.data, Mapping):
                    for s in structs:
                        if s.tag_field is None or self.data.get(s.tag_field) == s.tag:
                            return s, structs
                    return t, structs
                rest = [u for u in t.types if not isinstance(u, mi.NoneType)]
                if len(rest) != 1:
                    return t, structs
                t = rest[0]
            else:
                return t, ()

    def step(self, seg: str | int | None, tables: list[str], keys: list[str]) -> None:
        t, _ = self._resolved()
        data = self.data
        if isinstance(seg, str) and isinstance(t, mi.StructType):
            field = next((f for f in t.fields if f.encode_name == seg), None)
            self.type = field.type if field is not None else mi.AnyType()
            self.data = data.get(seg) if isinstance(data, Mapping) else None
            inner, structs = self._resolved()
            if not keys and (isinstance(inner, mi.StructType) or structs):
                tables.append(seg)  # a sub-table: [judge.fallback]
            else:
                keys.append(seg)
        elif isinstance(seg, int) and isinstance(t, mi.ListType | mi.VarTupleType):
            self.type = t.item_type
            ok = isinstance(data, Sequence) and not isinstance(data, str) and seg < len(data)
            self.data = data[seg] if ok else None
            if keys:
                keys[-1] += f"[{seg}]"
            else:
                keys.append(f"[{seg}]")
        else:
            self.type, self.data = mi.AnyType(), None
            keys.append("[...]" if seg is None else str(seg))

    def tag_fields(self) -> set[str]:
        _, structs = self._resolved()
        return {s.tag_field for s in structs if s.tag_field is not None}

    def unknown_key(self, name: str) -> str:
        t, structs = self._resolved()
        if not isinstance(t, mi.StructType):
            return f"unknown key {name!r}"
        if t.tag_field is not None:
            owners = [repr(s.tag) for s in structs if any(f.encode_name == name for f in s.fields)]
            if owners:
                return f"{name} apply to {t.tag_field} = {_or(owners)} only, not {t.tag!r}"
        allowed = [f.encode_name for f in t.fields]
        if t.tag_field is not None:
            allowed.insert(0, t.tag_field)
        return f"unknown key {name!r}{near_miss(name, allowed)} (expected {', '.join(allowed)})"

    def missing_key(self, name: str) -> str:
        t, _ = self._resolved()
        if isinstance(t, mi.StructType) and t.tag_field is not None:
            return f"{t.tag_field} = {t.tag!r} needs {name!r}"
        return f"missing key {name!r}"

    def choices(self, last: str | int | None) -> list[str]:
        """The values allowed for the value at ``last`` (a field here, an item, or this)."""
        t, structs = self._resolved()
        if isinstance(last, str) and last in self.tag_fields():
            names = [str(s.tag) for s in structs if s.tag_field == last]
            # A union that also takes a bare name (a tool's mode) lists its aliases too.
            return list(dict.fromkeys([*names, *_literals(self.type)]))
        if isinstance(last, str) and isinstance(t, mi.StructType):
            field = next((f for f in t.fields if f.encode_name == last), None)
            return _literals(field.type) if field is not None else []
        if isinstance(last, int) and isinstance(t, mi.ListType | mi.VarTupleType):
            return _literals(t.item_type)
        return _literals(self.type)


def _or(words: Sequence[str]) -> str:
    """``'a'``, ``'a' or 'b'``, ``'a', 'b' or 'c'``."""
    return " or ".join([", ".join(words[:-1]), words[-1]] if len(words) > 2 else words)


def _literals(t: mi.Type) -> list[str]:
    """The string values of the Literals in ``t`` (through unions and constraints)."""
    if isinstance(t, mi.Metadata):
        return _literals(t.type)
    if isinstance(t, mi.LiteralType):
        return [str(v) for v in t.values]
    if isinstance(t, mi.UnionType):
        return [v for u in t.types for v in _literals(u)]
    return []

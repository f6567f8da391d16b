"""Exclusion lists for the gate: case ids, each with the reason it is excluded.

Accepted forms, one per file:

* text (any other extension): one case per line, ``CASE_ID REASON...``: a tab, else the
  first run of whitespace separates them (``CASE_ID: REASON`` and ``CASE_ID,REASON`` work
  too); blank lines and lines starting with ``#`` are ignored;
* CSV (``.csv``): rows ``case_id,reason`` (a header row with those names is skipped);
* JSON Lines (``.jsonl``): ``{"case_id": ..., "reason": ...}`` per line;
* JSON (``.json``): an object mapping case id to reason;
* TOML (``.toml``): a table ``[exclude]`` mapping case id to reason.

A case without a reason is an error: an exclusion must say why. So is a case id that is
not a string (JSON Lines also takes an integer of up to :data:`MAX_INT_DIGITS` digits),
a duplicate key, a CSV field over :data:`MAX_CSV_FIELD` bytes and nesting too deep to
parse: each is one error naming ``file:line``. Line forms are read line by line with the
readers' line cap; ``.json`` and ``.toml`` files are read whole, capped at the same size.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator
from typing import Any

from litmus_sandbox._model.codec import DuplicateKey, unique_object
from litmus_sandbox._model.errors import RecordDecodeError
from litmus_sandbox._store.files import (
    TOO_DEEP,
    decode_utf8,
    iter_lines,
    open_input,
    read_bounded_text,
    read_toml,
    too_deep_line,
)

#: The longest integer a JSON Lines ``case_id`` may be (longer: write it as a string).
MAX_INT_DIGITS = 64
#: The longest CSV field (the ``csv`` module's own limit).
MAX_CSV_FIELD = csv.field_size_limit()


def load_exclusions(path: str | os.PathLike[str], *, max_line: int | None = None) -> dict[str, str]:
    """Read an exclusion file into ``{case_id: reason}``.

    ``max_line``: the longest line (or ``.json``/``.toml`` file) accepted, in bytes
    (default: ``files.max_line_bytes``).

    Raises:
        RecordDecodeError: not a regular file, unreadable, or a bad line (``file:line``).
    """
    p = os.fspath(path)
    if p.endswith(".toml"):
        return _from_toml(p, max_line)
    if p.endswith(".json"):
        text = read_bounded_text(p, max_line)
        return _from_mapping(p, None, _json(p, None, text))
    if p.endswith(".csv"):
        return _from_csv(p, max_line)
    if p.endswith(".jsonl"):
        return _from_jsonl(p, max_line)
    return _from_text(p, max_line)


def _text_lines(p: str, max_line: int | None) -> Iterator[tuple[int, str]]:
    """Each line of ``p`` as text (newline kept), with its number."""
    with open_input(p) as f:
        for lineno, raw, _ in iter_lines(f, p, max_line):
            yield lineno, decode_utf8(raw, p, lineno)


class _Int(str):
    """An integer as written (digits kept as text: no conversion limit, no cost)."""


def _json(p: str, lineno: int | None, text: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=unique_object, parse_int=_Int)
    except json.JSONDecodeError as exc:
        line = exc.lineno if lineno is None else lineno
        raise RecordDecodeError(p, line, f"not valid JSON: {exc.msg}") from None
    except DuplicateKey as dup:
        where = lineno if lineno is not None else _key_line(text, dup.key)
        raise RecordDecodeError(p, where, f"duplicate key {dup.key!r}") from None
    except RecursionError:
        where = lineno if lineno is not None else too_deep_line(text)
        raise RecordDecodeError(p, where, TOO_DEEP) from None


def _key_line(text: str, key: str) -> int | None:
    """The line of the second ``"key":`` in ``text`` (a good guess at the duplicate)."""
    token = json.dumps(key)
    first = text.find(token)
    second = text.find(token, first + len(token)) if first >= 0 else -1
    return text.count("\n", 0, second) + 1 if second >= 0 else None


def _case_id(p: str, lineno: int | None, value: Any) -> str:
    if isinstance(value, _Int):
        if len(value.lstrip("-")) > MAX_INT_DIGITS:
            raise RecordDecodeError(
                p,
                lineno,
                f"case_id is a {len(value.lstrip('-'))}-digit integer; write case ids as strings",
            )
        return str.__str__(value)
    if not isinstance(value, str):
        kind = "null" if value is None else type(value).__name__
        raise RecordDecodeError(p, lineno, f"case_id must be a string, not {kind}")
    if not value.strip():
        raise RecordDecodeError(p, lineno, "case_id is empty")
    return value


def _from_mapping(p: str, lineno: int | None, obj: Any) -> dict[str, str]:
    if not isinstance(obj, dict):
        raise RecordDecodeError(p, lineno, "expected an object mapping case id to reason")
    out: dict[str, str] = {}
    for case_id, reason in obj.items():
        if not isinstance(reason, str) or isinstance(reason, _Int) or not reason.strip():
            raise RecordDecodeError(p, lineno, f"case {case_id!r} has no reason")
        out[_case_id(p, lineno, case_id)] = reason.strip()
    return out


def _from_jsonl(p: str, max_line: int | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for lineno, line in _text_lines(p, max_line):
        if not line.strip():
            continue
        obj = _json(p, lineno, line)
        if not isinstance(obj, dict) or "case_id" not in obj:
            raise RecordDecodeError(p, lineno, 'expected {"case_id": ..., "reason": ...}')
        case_id = _case_id(p, lineno, obj["case_id"])
        out.update(_from_mapping(p, lineno, {case_id: obj.get("reason")}))
    return out


def _from_toml(p: str, max_line: int | None) -> dict[str, str]:
    data = read_toml(p, max_line)
    unknown = set(data) - {"exclude"}
    if unknown:
        raise RecordDecodeError(
            p, None, f"unknown keys {sorted(unknown)}; expected an [exclude] table"
        )
    return _from_mapping(p, None, data.get("exclude", {}))


def _from_csv(p: str, max_line: int | None) -> dict[str, str]:
    out: dict[str, str] = {}
    rows = csv.reader(line for _, line in _text_lines(p, max_line))
    first = True
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return out
        except csv.Error as exc:
            raise RecordDecodeError(p, rows.line_num, f"not valid CSV: {exc}") from None
        lineno = rows.line_num
        cells = [c.strip() for c in row]
        header, first = first, False
        if not any(cells) or cells[0].startswith("#"):
            continue
        if header and [c.lower() for c in cells[:2]] == ["case_id", "reason"]:
            continue
        reason = ",".join(cells[1:]).strip()
        if not reason:
            raise RecordDecodeError(p, lineno, f"case {cells[0]!r} has no reason")
        out[cells[0]] = reason


def _split_line(line: str) -> tuple[str, str]:
    """``CASE_ID REASON`` with a tab, whitespace, ``:`` or ``,`` after the id."""
    if "\t" in line:
        case_id, _, reason = line.partition("\t")
        return case_id.strip(), reason.strip()
    parts = line.split(None, 1)
    case_id, reason = parts[0], parts[1].strip() if len(parts) > 1 else ""
    if case_id.endswith((":", ",")):
        return case_id[:-1], reason
    if "," in case_id:  # "case-1,known flaky": the comma is the separator
        case_id, _, rest = line.partition(",")
        return case_id.strip(), rest.strip()
    return case_id, reason


def _from_text(p: str, max_line: int | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for lineno, raw in _text_lines(p, max_line):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        case_id, reason = _split_line(line)
        if not reason:
            raise RecordDecodeError(
                p, lineno, f"case {case_id!r} has no reason (write: CASE_ID REASON)"
            )
        out[case_id] = reason
    return out

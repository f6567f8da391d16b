"""Exclusion lists for the gate: case ids, each with the reason it is excluded.

Accepted forms, one per file:

* text (any other extension): one case per line, ``CASE_ID REASON...``: a tab, else the
  first run of whitespace separates them (``CASE_ID: REASON`` and ``CASE_ID,REASON`` work
  too); blank lines and lines starting with ``#`` are ignored;
* CSV (``.csv``): rows ``case_id,reason`` (a header row with those names is skipped);
* JSON Lines (``.jsonl``): ``{"case_id": ..., "reason": ...}`` per line;
* JSON (``.json``): an object mapping case id to reason;
* TOML (``.toml``): a table ``[exclude]`` mapping case id to reason.

A case without a reason is an error: an exclusion must say why.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tomllib
from typing import Any

from litmus_sandbox._model.errors import RecordDecodeError


def load_exclusions(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read an exclusion file into ``{case_id: reason}``.

    Raises:
        RecordDecodeError: unreadable file or a bad line (naming ``file:line``).
    """
    p = os.fspath(path)
    try:
        with open(p, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise RecordDecodeError(p, None, f"cannot open: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise RecordDecodeError(p, None, "not UTF-8 text") from None
    if p.endswith(".toml"):
        return _from_toml(p, text)
    if p.endswith(".json"):
        return _from_mapping(p, None, _json(p, None, text))
    if p.endswith(".csv"):
        return _from_csv(p, text)
    if p.endswith(".jsonl"):
        out: dict[str, str] = {}
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            obj = _json(p, lineno, line)
            if not isinstance(obj, dict) or "case_id" not in obj:
                raise RecordDecodeError(p, lineno, 'expected {"case_id": ..., "reason": ...}')
            out.update(_from_mapping(p, lineno, {obj["case_id"]: obj.get("reason")}))
        return out
    return _from_text(p, text)


def _json(p: str, lineno: int | None, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordDecodeError(p, lineno or exc.lineno, f"not valid JSON: {exc.msg}") from None


def _from_mapping(p: str, lineno: int | None, obj: Any) -> dict[str, str]:
    if not isinstance(obj, dict):
        raise RecordDecodeError(p, lineno, "expected an object mapping case id to reason")
    out: dict[str, str] = {}
    for case_id, reason in obj.items():
        if not isinstance(reason, str) or not reason.strip():
            raise RecordDecodeError(p, lineno, f"case {case_id!r} has no reason")
        out[str(case_id)] = reason.strip()
    return out


def _from_toml(p: str, text: str) -> dict[str, str]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecordDecodeError(p, None, f"not valid TOML: {exc}") from None
    unknown = set(data) - {"exclude"}
    if unknown:
        raise RecordDecodeError(
            p, None, f"unknown keys {sorted(unknown)}; expected an [exclude] table"
        )
    return _from_mapping(p, None, data.get("exclude", {}))


def _from_csv(p: str, text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for lineno, row in enumerate(csv.reader(io.StringIO(text)), 1):
        cells = [c.strip() for c in row]
        if not any(cells) or cells[0].startswith("#"):
            continue
        if lineno == 1 and [c.lower() for c in cells[:2]] == ["case_id", "reason"]:
            continue
        reason = ",".join(cells[1:]).strip()
        if not reason:
            raise RecordDecodeError(p, lineno, f"case {cells[0]!r} has no reason")
        out[cells[0]] = reason
    return out


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


def _from_text(p: str, text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
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

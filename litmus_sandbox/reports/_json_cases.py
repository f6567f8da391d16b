"""Encoding a gate case as JSON, for the JSON and JSON Lines reports (``_json``).

Theory of operation
-------------------
:func:`case_json` encodes a case as :func:`case_to_dict` would, at a few times its
speed: a legacy side's summary is the same for every side of equal provenance, safety
and epochs, so its encoding is kept (up to a few thousand of them).

A suite of legacy verdicts is mostly cases that differ only in their case id: a case
whose sides are one legacy verdict each (or none) is encoded as its case id and the rest
of its object, kept per kind (:class:`LegacyTails`: its outcome, reasons, safeties and
provenances, known by identity), compact for JSON Lines and indented for the JSON report
(as ``msgspec.json.format`` would indent it), so such cases are neither encoded nor
formatted one by one. The JSON report spools such cases as their kinds' numbers and
their case ids (:func:`run_line`), and makes them whole at the end (:func:`whole`).

What is kept, and the case ids, are made inert (``safe_text.json_inert``) as they are
made: a report built from them needs no pass over the whole of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, repeat
from typing import Any

import msgspec

from litmus_sandbox._core.gate import OUTCOMES, CaseResult, Reason, step_diff
from litmus_sandbox._model.records import AnyVerdict, LegacyProvenance, LegacyVerdict
from litmus_sandbox._model.safe_text import json_inert
from litmus_sandbox.reports._shared import rank, side_summary

__all__ = [
    "LegacyTails",
    "case_json",
    "case_to_dict",
    "format_items",
    "id_json",
    "run_line",
    "whole",
]

_encoder = msgspec.json.Encoder()


def case_to_dict(case: CaseResult) -> dict[str, Any]:
    diff = step_diff(case)
    return {
        "case_id": case.case_id,
        "outcome": case.outcome,
        "reasons": [msgspec.to_builtins(r) for r in case.reasons],
        "baseline": side_summary(case.baseline),
        "candidate": side_summary(case.candidate),
        "steps": msgspec.to_builtins(diff) if diff is not None else None,
    }


def case_json(case: CaseResult) -> bytes:
    """``case_to_dict(case)`` encoded as JSON (the same bytes), at a few times its speed:
    a legacy side's summary is the same for every side of equal provenance, safety and
    epochs, so its encoding is kept (up to a few thousand of them)."""
    diff = step_diff(case)
    return b"".join(
        (
            b'{"case_id":',
            _encoder.encode(case.case_id),
            b',"outcome":"',
            case.outcome.encode(),
            b'","reasons":',
            _encoder.encode(case.reasons) if case.reasons else b"[]",
            b',"baseline":',
            _side_json(case.baseline),
            b',"candidate":',
            _side_json(case.candidate),
            b',"steps":',
            b"null" if diff is None else _encoder.encode(diff),
            b"}",
        )
    )


_legacy_sides: dict[tuple[bool, int, LegacyProvenance], bytes] = {}

#: The rank of a case with no reasons, by outcome (what ``rank`` gives it).
PLAIN_RANK = {
    o: rank(CaseResult(case_id="", outcome=o, reasons=(), baseline=(), candidate=()))
    for o in OUTCOMES
}
#: A case's object up to its case id, compact and as an item of the report's "cases".
_HEAD = b'{"case_id":'
INDENTED_HEAD = b'    {\n      "case_id": '
ITEMS_FROM, ITEMS_TO = len(b'{\n  "x": [\n'), -len(b"\n  ]\n}")
#: Kinds of legacy case kept a writer, at most (past this, cases are encoded whole).
_KEPT_KINDS = 65_536


#: A kind of legacy case: its reasons and provenances (held: see :class:`LegacyTails`),
#: its number, and the compact rest of its object after its case id.
_Kind = tuple[tuple[Reason, ...], LegacyProvenance | None, LegacyProvenance | None, int, bytes]


class LegacyTails:
    """The rest of a legacy case's object after its case id, kept per kind.

    A case whose sides are one legacy verdict each (or none) differs from the others of
    its kind only in its case id: its kind is its outcome, reasons, safeties and
    provenances, known by identity (the gate hands the cases of one kind one tuple of
    reasons and one provenance object a side; the entry holds them, so the identities
    stay theirs). Each kind is encoded once, made inert once (``json_inert``), compact
    for JSON Lines and indented for the JSON report (where its number stands for it in
    the spool).
    """

    def __init__(self) -> None:
        self._kinds: dict[tuple[object, ...], _Kind] = {}
        #: By number: the indented rest of a kind's object, and the ``,\n`` after it.
        self.indented: list[bytes] = []

    def of(self, case: CaseResult) -> tuple[int, bytes] | None:
        """``case``'s kind's number and compact rest, or None for a case of no kind."""
        bs, cs = case.baseline, case.candidate
        if len(bs) > 1 or len(cs) > 1:
            return None
        b = bs[0] if bs else None
        c = cs[0] if cs else None
        legacy = LegacyVerdict
        bp = cp = bsafe = csafe = None
        if b is not None:
            if type(b) is not legacy or b.unknown_provenance:
                return None
            bp, bsafe = b.provenance, b.safe
        if c is not None:
            if type(c) is not legacy or c.unknown_provenance:
                return None
            cp, csafe = c.provenance, c.safe
        reasons = case.reasons
        key = (case.outcome, id(reasons), bsafe, id(bp), csafe, id(cp))
        seen = self._kinds.get(key)
        if seen is None or seen[0] is not reasons or seen[1] is not bp or seen[2] is not cp:
            seen = self._kind(key, case, bp, cp)
            if seen is None:
                return None
        return seen[3], seen[4]

    def _kind(
        self,
        key: tuple[object, ...],
        case: CaseResult,
        bp: LegacyProvenance | None,
        cp: LegacyProvenance | None,
    ) -> _Kind | None:
        """Encode ``case``'s kind and keep it (None past :data:`_KEPT_KINDS`)."""
        if len(self.indented) >= _KEPT_KINDS:
            return None
        compact = json_inert(case_json(msgspec.structs.replace(case, case_id="")))
        indented = msgspec.json.format(b'{"x":[' + compact + b"]}", indent=2)
        indented = indented[ITEMS_FROM:ITEMS_TO]
        if len(self._kinds) > 4096:
            self._kinds.clear()
        kind = self._kinds[key] = (
            case.reasons,
            bp,
            cp,
            len(self.indented),
            compact[len(_HEAD) + 2 :],
        )
        self.indented.append(indented[len(INDENTED_HEAD) + 2 :] + b",\n")
        return kind


def run_line(numbers: list[int], case_ids: list[str]) -> bytes:
    """Legacy cases spooled: their kinds' numbers, comma-separated, then their case ids as
    JSON strings (which hold no raw tab), inert, tab-separated."""
    ids = list(map(_encoder.encode, case_ids))
    joined = "".join(case_ids)
    if not (joined.isascii() and joined.isprintable()):  # else inert as they are
        ids = list(map(json_inert, ids))
    return b"%s %s\n" % (b",".join(map(b"%d".__mod__, numbers)), b"\t".join(ids))


def id_json(case_id: str) -> bytes:
    """A case id as a JSON string, inert (printable ASCII is as it is)."""
    encoded = _encoder.encode(case_id)
    if case_id.isascii() and case_id.isprintable():
        return encoded
    return json_inert(encoded)


def format_items(cases: list[bytes]) -> bytes:
    """Cases' compact JSON as items of the report's "cases" array, joined by ``,\\n``:
    indented two levels down, as in ``{"x": [...]}``, formatted in one call, less that
    wrapper."""
    whole = msgspec.json.format(b'{"x":[' + b",".join(cases) + b"]}", indent=2)
    return whole[ITEMS_FROM:ITEMS_TO]


def _side_json(verdicts: Sequence[AnyVerdict]) -> bytes:
    if not verdicts:
        return b"null"
    first = verdicts[0]
    if type(first) is not LegacyVerdict or first.unknown_provenance:
        return _encoder.encode(side_summary(verdicts))
    # What side_summary reads of a side whose first verdict is legacy.
    safe = first.safe if len(verdicts) == 1 else all(v.safe for v in verdicts)
    key = (safe, len(verdicts), first.provenance)
    encoded = _legacy_sides.get(key)
    if encoded is None:
        if len(_legacy_sides) > 4096:
            _legacy_sides.clear()
        encoded = _legacy_sides[key] = _encoder.encode(side_summary(verdicts))
    return encoded


def whole(line: bytes, indented: list[bytes]) -> bytes:
    """The legacy cases of a spooled :func:`run_line` as items of the report's "cases",
    each followed by ``,\\n`` (``indented``: :attr:`LegacyTails.indented`)."""
    numbers, _, ids = line.partition(b" ")
    tails = map(indented.__getitem__, map(int, numbers.split(b",")))
    return b"".join(chain.from_iterable(zip(repeat(INDENTED_HEAD), ids.split(b"\t"), tails)))

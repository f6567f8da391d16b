"""Verdict files read as columns for the gate's join engine, as strictly as the readers.

Theory of operation
-------------------
The engine (``_store/engine.py``) joins case ids, not records, so a verdict file is read
into a few columns a block of whole lines at a time: the case id, the verdict's ``safe``,
and a *code* that says how to have the verdict back once the engine hands its case to the
decider:

* ``code >= 0``: a legacy verdict whose provenance is fully known, made again from the
  case id, ``safe`` and provenance kind ``code`` (:class:`Kinds`). Two verdicts with the
  same code have equal provenance: the engine compares codes.
* ``code <= -2``: the same, with provenance kind ``-2 - code`` not fully known (such
  verdicts never pass without a decision).
* ``code == -1``: any other verdict (this library's, or legacy with unknown provenance
  keys), kept whole beside the columns (:func:`seal`: MessagePack, or a pickle where
  MessagePack would not give it back equal).

**Validation is the readers' own.** A block of legacy lines as the reference harness
writes them is decoded in one call with the provenance left undecoded (``msgspec.Raw``);
each distinct provenance is decoded once, strictly (no unknown key), and its colons
counted. The block is taken only when each line is one object (as many objects as
lines, each line from ``{`` to ``}``: ``files.one_object_a_line``) and its colons are
exactly the members its records imply (two a record, and each provenance's key and
fields): then no line has a duplicate key, an unknown key or two records, no record
spans two lines, and each record is what the reader would have made.
Any other block goes through :func:`~litmus_sandbox._store.streams.verdict_block`, the
reader's own, which names the bad line (``file:line``), reports a torn last line, and
keeps the policy records.
"""

from __future__ import annotations

import operator
import os
import pickle
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import BinaryIO

import msgspec

from litmus_sandbox._core.inputs import SideInputs
from litmus_sandbox._model.legacy_blocks import LegacyKinds
from litmus_sandbox._model.records import (
    NO_UNKNOWN_KEYS,
    AnyVerdict,
    LegacyProvenance,
    LegacyVerdict,
    PolicyRecord,
    Verdict,
)
from litmus_sandbox._store.files import iter_blocks, one_object_a_line, open_input
from litmus_sandbox._store.streams import ReadWarning, verdict_block

__all__ = [
    "WHOLE",
    "Columns",
    "Kinds",
    "legacy_line",
    "read_columns",
    "seal",
    "to_columns",
    "unseal",
]

#: The code of a verdict kept whole.
WHOLE = -1
_FIELDS = LegacyProvenance.__struct_fields__


class _LegacyLine(msgspec.Struct, gc=False):
    run_id: str
    safe: bool
    provenance: msgspec.Raw = msgspec.Raw()


#: A legacy line, its provenance left undecoded (``msgspec.Raw``).
legacy_line = msgspec.json.Decoder(_LegacyLine)
_provenance_decoder = msgspec.json.Decoder(LegacyProvenance)
_run_id = operator.attrgetter("run_id")
_safe = operator.attrgetter("safe")
_raw = operator.attrgetter("provenance")


class Kinds:
    """The kinds of legacy provenance of a gate's inputs (both sides share the codes)."""

    def __init__(self) -> None:
        self.provenances: list[LegacyProvenance] = []
        self._ids: dict[LegacyProvenance, int] = {}
        #: Undecoded provenance -> its code, and the colons it brings to its line.
        self._raw_codes: dict[bytes, int] = {}
        self._raw_colons: dict[bytes, int] = {}

    def code(self, p: LegacyProvenance) -> int:
        """The code of a legacy verdict with provenance ``p`` (see the module docstring)."""
        kind = self._ids.get(p)
        if kind is None:
            kind = self._ids[p] = len(self.provenances)
            self.provenances.append(p)
        known = all(getattr(p, name) is not None for name in _FIELDS)
        return kind if known else -2 - kind

    def provenance(self, code: int) -> LegacyProvenance:
        """The provenance of the legacy verdicts of code ``code``."""
        return self.provenances[code if code >= 0 else -2 - code]

    def verdict(self, key: str, safe: bool, code: int) -> LegacyVerdict:
        """The legacy verdict ``code`` stands for."""
        return LegacyVerdict(run_id=key, safe=safe, provenance=self.provenance(code))

    def _learn(self, raw: bytes) -> bool:
        """Decode one undecoded provenance, strictly; False when its line must be read by
        the reader (an unknown key, a duplicate or null member, a colon in a value)."""
        if not raw:
            p, colons = LegacyProvenance(), 0
        else:
            try:
                p = _provenance_decoder.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                return False
            members = sum(getattr(p, name) is not None for name in _FIELDS)
            if raw.count(b":") != members:
                return False
            colons = 1 + members  # with the ``provenance`` key's own
        self._raw_codes[raw] = self.code(p)
        self._raw_colons[raw] = colons
        return True

    def legacy_block(self, block: bytes, lines: list[bytes]) -> Columns | None:
        """The columns of a block of whole legacy lines, or None (see the module docstring)."""
        n = len(lines) - 1  # the block ends with a newline: the last is empty
        if not one_object_a_line(block, n):
            return None  # a line that is not one object for sure: the reader looks
        try:
            records = legacy_line.decode_lines(block)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return None
        if len(records) != n:
            return None
        raws = list(map(bytes, map(_raw, records)))
        found = list(map(self._raw_codes.get, raws))
        if None in found:  # a provenance not seen yet
            for raw in set(raws) - self._raw_codes.keys():
                if not self._learn(raw):
                    return None
            found = list(map(self._raw_codes.get, raws))
        colons = 2 * n + sum(map(self._raw_colons.__getitem__, raws))
        if block.count(b":") != colons:
            return None
        codes: list[int] = found  # type: ignore[assignment]  # none is None now
        return Columns(list(map(_run_id, records)), list(map(_safe, records)), codes)


@dataclass
class Columns:
    """Verdicts as columns: case ids, ``safe``, codes; and the verdicts kept whole, by
    their index in the columns."""

    keys: list[str] = field(default_factory=list)
    safe: list[bool] = field(default_factory=list)
    codes: list[int] = field(default_factory=list)
    whole: list[tuple[int, bytes]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.keys)


_packer = msgspec.msgpack.Encoder()
_unpackers: dict[int, Callable[[memoryview], AnyVerdict]] = {
    ord("V"): msgspec.msgpack.Decoder(Verdict).decode,
    ord("L"): msgspec.msgpack.Decoder(LegacyVerdict).decode,
}


def seal(v: AnyVerdict) -> bytes:
    """``v`` as bytes for the engine to keep: MessagePack after a tag (``V`` or ``L``),
    many times faster than a pickle; a pickle (``P``) where MessagePack would not give
    ``v`` back equal (a tuple where the type says ``Any``, an integer past 64 bits)."""
    tag = b"V" if type(v) is Verdict else b"L" if type(v) is LegacyVerdict else None
    if tag is not None:
        try:
            sealed = tag + _packer.encode(v)
            if unseal(sealed) == v:
                return sealed
        except (msgspec.EncodeError, msgspec.DecodeError, msgspec.ValidationError, OverflowError):
            pass
    return b"P" + pickle.dumps(v, pickle.HIGHEST_PROTOCOL)


def unseal(sealed: bytes) -> AnyVerdict:
    """The verdict :func:`seal` made ``sealed`` of."""
    unpack = _unpackers.get(sealed[0])
    if unpack is None:
        v: AnyVerdict = pickle.loads(sealed[1:])  # our own bytes, never an input's
        return v
    return unpack(memoryview(sealed)[1:])


def to_columns(verdicts: Iterable[AnyVerdict], kinds: Kinds) -> Columns:
    """Verdicts already decoded, as columns."""
    out = Columns()
    legacy = LegacyVerdict
    for v in verdicts:
        if type(v) is legacy and v.unknown_provenance is NO_UNKNOWN_KEYS:
            out.keys.append(v.run_id)
            out.codes.append(kinds.code(v.provenance))
        else:
            out.whole.append((len(out.keys), seal(v)))
            out.keys.append(v.case_id)
            out.codes.append(WHOLE)
        out.safe.append(v.safe)
    return out


def read_columns(
    path: str | os.PathLike[str],
    kinds: Kinds,
    add: Callable[[Columns], None],
    warnings: list[ReadWarning] | None = None,
    policies: list[PolicyRecord] | None = None,
    *,
    max_line: int | None = None,
    inputs: SideInputs | None = None,
    try_first: Callable[[BinaryIO], bool] | None = None,
) -> None:
    """Read a verdict file a block at a time into ``add``, in file order; its policy
    records go to ``policies``, a torn last line to ``warnings``, and what its verdicts
    say of how they were made to ``inputs`` (the reports' inputs). ``try_first``: a reader
    tried first on the open file, True when it took the whole file (the file is then
    opened once whichever reads it).

    Raises:
        RecordDecodeError, NewerVersionError: as the readers (``_store/streams.py``).
    """
    p = os.fspath(path)
    legacy_kinds = LegacyKinds()
    with open_input(p) as f:
        if try_first is not None and try_first(f):
            return
        for first, block, lines in iter_blocks(f, p, max_line):
            if block.endswith(b"\n"):
                columns = kinds.legacy_block(block, lines)
                if columns is not None:
                    if inputs is not None:
                        inputs.add_legacy(len(columns), map(kinds.provenance, set(columns.codes)))
                    add(columns)
                    continue
            for records in verdict_block(p, first, block, lines, legacy_kinds, warnings):
                verdicts = [r for r in records if not isinstance(r, PolicyRecord)]
                if policies is not None and len(verdicts) != len(records):
                    policies.extend(r for r in records if isinstance(r, PolicyRecord))
                if verdicts:
                    if inputs is not None:
                        inputs.add(verdicts)
                    add(to_columns(verdicts, kinds))

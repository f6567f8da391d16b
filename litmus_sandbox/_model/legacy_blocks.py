"""Checking, and slimming, blocks of legacy verdicts decoded in one call. Sans-io.

Theory of operation
-------------------
A block of legacy verdict lines (the reference report's shape, as ``json.dumps`` writes
it) is decoded whole by the fast decoder, which keeps the last of two equal keys. Two
things are done to such a block here, both at C speed over the block:

* **No duplicate key, told by counting colons** (:meth:`LegacyKinds.members_distinct`).
  Every member of a JSON object has a colon, and so does nothing else outside strings:
  the block's colons are at least its members, which are at least its distinct keys,
  which are at least the members its records imply (``run_id``, ``safe``, each
  provenance field that is not null and the ``provenance`` key itself, and an
  ``unknown_provenance`` that was given, with its keys). So when the colons are exactly
  the implied members, no key is there twice. False (cannot tell) when there are more:
  a colon in a string, an unknown key, an explicit null; then the reader looks line by
  line.
* **One provenance object a kind.** A suite's verdicts carry a few kinds of provenance
  (a judge, a truncation policy, a step count), each decoded afresh a line. The records
  of a stream are made to share one object for each kind they carry (equal, and
  frozen: nothing can tell, but memory): a million held verdicts then take some 120 MB
  less, and the gate, which reads the baseline's verdicts out of their order, finds the
  provenance it compares in the cache rather than in memory. The kinds are counted once
  each, for the colons they imply.

:class:`LegacyKinds` keeps the kinds of one stream (at most :data:`KEPT`; past that it
starts over, which costs sharing, never correctness).
"""

from __future__ import annotations

import operator
from collections import Counter, deque
from itertools import repeat

from msgspec.structs import force_setattr

from litmus_sandbox._model.records import NO_UNKNOWN_KEYS, LegacyProvenance, LegacyVerdict

#: Kinds of provenance a stream's records share at most.
KEPT = 4096

_NO_PROVENANCE = LegacyProvenance()
_FIELDS = LegacyProvenance.__struct_fields__
_provenance_of = operator.attrgetter("provenance")
_unknown_of = operator.attrgetter("unknown_provenance")


def provenance_members(p: LegacyProvenance) -> int:
    """Members a provenance object must have had to decode as ``p``: the fields that are
    not null, and the ``provenance`` key itself (none when ``p`` is all defaults)."""
    if p == _NO_PROVENANCE:
        return 0
    return 1 + sum(getattr(p, name) is not None for name in _FIELDS)


class LegacyKinds:
    """The kinds of provenance of one stream's legacy verdicts (see the module docstring)."""

    def __init__(self) -> None:
        #: Each kind, as the one object its records share.
        self._shared: dict[LegacyProvenance, LegacyProvenance] = {}
        #: The members each kind implies, by the shared object's identity.
        self._members: dict[int, int] = {}
        #: The member counts of the kinds kept (one, in the usual stream).
        self._counts: set[int] = set()

    def members_distinct(self, records: list[LegacyVerdict], block: bytes) -> bool:
        """Make ``records`` (decoded from ``block``, whole lines) share their kinds of
        provenance; whether no line of ``block`` has a duplicate key, told by counting
        colons (False: cannot tell; see the module docstring)."""
        provenances = list(map(_provenance_of, records))
        shared = self._shared
        if len(shared) > KEPT:
            self._forget()
        kept = len(shared)
        ones = list(map(shared.setdefault, provenances, provenances))
        if len(shared) != kept:
            self._count()
        deque(map(force_setattr, records, repeat("provenance"), ones), maxlen=0)
        if len(self._counts) == 1:  # every record implies as many (the usual stream)
            implied = (2 + next(iter(self._counts))) * len(records)
        else:
            members = self._members
            by_kind = Counter(map(id, ones))
            implied = 2 * len(records) + sum(n * members[k] for k, n in by_kind.items())
        colons = block.count(b":")
        if colons == implied:  # then no record was given an ``unknown_provenance`` either
            return True
        # This library writes an empty ``unknown_provenance`` beside a legacy verdict; one
        # that was read has a dict of its own (the default is one shared dict).
        if colons > implied and b'"unknown_provenance"' in block:
            given = [u for u in map(_unknown_of, records) if u is not NO_UNKNOWN_KEYS]
            implied += sum(1 + len(u) for u in given)
        return colons == implied

    def _count(self) -> None:
        members = self._members
        for p in self._shared.values():
            if id(p) not in members:
                members[id(p)] = n = provenance_members(p)
                self._counts.add(n)

    def _forget(self) -> None:
        self._shared.clear()
        self._members.clear()
        self._counts.clear()


def legacy_members_distinct(records: list[LegacyVerdict], block: bytes) -> bool:
    """:meth:`LegacyKinds.members_distinct` of a block on its own."""
    return LegacyKinds().members_distinct(records, block)

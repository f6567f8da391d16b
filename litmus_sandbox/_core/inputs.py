"""What a gate compared, one side at a time: files, cases, suites, agents, recorders,
scoring policies and recording dates. Sans-io.

Theory of operation
-------------------
A :class:`SideInputs` is fed a side's verdicts as they are read, a block at a time
(:meth:`SideInputs.add`, or :meth:`SideInputs.add_legacy` for a block of legacy verdicts
read as columns), and keeps a few counters and a few bounded sets of distinct values
(:class:`Facet`): whatever the suite's size, and whichever way it is joined, the same
verdicts give the same answer (distinct values listed in sorted order; the earliest and
latest recording dates).

What a verdict does not say is counted as unknown, never guessed: a legacy verdict names
no suite, agent, recorder or recording date; this library's verdicts name those their
recording's header gave (``suite``, ``agent``, ``recorded_at``), and their provenance
names the recorder and the scoring policy.

The cases of a side are not counted here (that would hold every case id): the summary
knows them (:func:`inputs_dict`: every case but those with no verdict on that side).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from litmus_sandbox._core.summary import GateSummary
from litmus_sandbox._model.records import AnyVerdict, LegacyProvenance, LegacyVerdict

__all__ = ["COUNTED", "LISTED", "Facet", "SideInputs", "inputs_dict"]

#: Distinct values a facet lists (the first ones in sorted order), and counts exactly.
LISTED = 20
COUNTED = 4096

T = TypeVar("T", bound=Hashable)
#: A scoring policy: legacy?, truncation flags, judge label, fingerprint, refusal detector.
Policy = tuple[bool, bool | None, bool | None, str | None, str | None, str | None]
#: A recorder: name, version, measurement version.
Recorder = tuple[str, str, str | None]


def _order(value: Any) -> Any:
    """A sort key for a value, or a tuple that may hold None (None sorts last)."""
    if isinstance(value, tuple):
        return tuple((x is None, "" if x is None else x) for x in value)
    return value


class Facet(Generic[T]):
    """The distinct values of one field over a side's verdicts: the first :data:`LISTED`
    in sorted order, how many others (exactly while at most :data:`COUNTED` are
    distinct), and how many verdicts did not say (``unknown``). Order-independent."""

    __slots__ = ("_keys", "_listed", "_seen", "unknown")

    def __init__(self) -> None:
        self._listed: list[T] = []
        self._keys: list[Any] = []
        self._seen: set[T] = set()
        self.unknown = 0

    def add(self, value: T) -> None:
        seen = self._seen
        if value in seen:
            return
        if len(seen) <= COUNTED:
            seen.add(value)
        key, keys = _order(value), self._keys
        if len(keys) < LISTED or key < keys[-1]:
            at = bisect.bisect_left(keys, key)
            if at < len(keys) and keys[at] == key:
                return  # listed already (seen past the exact count)
            keys.insert(at, key)
            self._listed.insert(at, value)
            if len(keys) > LISTED:
                keys.pop()
                self._listed.pop()

    def to_dict(self, show: Callable[[T], Any] | None = None) -> dict[str, Any]:
        """``{"values": [...], "more": n, "more_exact": bool, "unknown": n}``."""
        return {
            "values": [v if show is None else show(v) for v in self._listed],
            "more": len(self._seen) - len(self._listed),
            "more_exact": len(self._seen) <= COUNTED,
            "unknown": self.unknown,
        }


class SideInputs:
    """One side's inputs, fed its verdicts as they are read (see the module docstring).
    ``files``: the side's files as given (the recordings, for a candidate scored now)."""

    def __init__(self, files: Sequence[str]) -> None:
        self.files = [_shown(f) for f in files]
        self.clear()

    def clear(self) -> None:
        """Forget every verdict (the side is read again from its start)."""
        self.verdicts = 0
        self.legacy = 0
        self.suites: Facet[str] = Facet()
        self.agents: Facet[str] = Facet()
        self.recorders: Facet[Recorder] = Facet()
        self.policies: Facet[Policy] = Facet()
        self.first: tuple[datetime, str] | None = None
        self.last: tuple[datetime, str] | None = None
        self.undated = 0

    def add(self, block: Iterable[AnyVerdict]) -> None:
        """Take some of the side's verdicts."""
        for v in block:
            if isinstance(v, LegacyVerdict):
                self.add_legacy(1, (v.provenance,))
            else:
                self._native(v)

    def add_legacy(self, n: int, provenances: Iterable[LegacyProvenance]) -> None:
        """``n`` legacy verdicts, whose distinct provenances are ``provenances``."""
        self.verdicts += n
        self.legacy += n
        for facet in (self.suites, self.agents, self.recorders):
            facet.unknown += n
        self.undated += n
        for p in provenances:
            self.policies.add(
                (True, p.truncate_on_refusal, p.truncate_on_empty_tool_result,
                 p.judge_version, None, None)
            )  # fmt: skip

    def _native(self, v: Any) -> None:
        self.verdicts += 1
        p = v.provenance
        rec = p.recorder
        if rec is None or (rec.name == "unknown" and not rec.version):
            self.recorders.unknown += 1  # a header that named no recorder
        else:
            self.recorders.add((rec.name, rec.version, rec.measurement_version))
        self.policies.add(
            (False, p.truncate_on_refusal, p.truncate_on_empty_tool_result,
             p.judge_label, p.judge, p.refusal_detector)
        )  # fmt: skip
        for facet, value in ((self.suites, v.suite), (self.agents, v.agent)):
            if isinstance(value, str):
                facet.add(value)
            else:
                facet.unknown += 1
        when = _instant(v.recorded_at) if isinstance(v.recorded_at, str) else None
        if when is None:
            self.undated += 1
            return
        if self.first is None or when < self.first:
            self.first = when
        if self.last is None or when > self.last:
            self.last = when

    def to_dict(self, cases: int) -> dict[str, Any]:
        """The side as the reports list it (``cases``: see :func:`inputs_dict`)."""
        return {
            "files": list(self.files),
            "cases": cases,
            "verdicts": self.verdicts,
            "legacy_verdicts": self.legacy,
            "suites": self.suites.to_dict(),
            "agents": self.agents.to_dict(),
            "recorders": self.recorders.to_dict(_recorder),
            "scoring_policies": self.policies.to_dict(_policy),
            "recorded": {
                "first": None if self.first is None else self.first[1],
                "last": None if self.last is None else self.last[1],
                "undated": self.undated,
            },
        }


def inputs_dict(
    baseline: SideInputs, candidate: SideInputs, summary: GateSummary
) -> dict[str, Any]:
    """The reports' ``inputs``: each side with its case count, every case but those with
    no verdict on that side (each such case carries ``baseline_missing`` or
    ``candidate_missing``, excluded or not)."""
    cases = summary.statistics.cases
    return {
        side: inputs.to_dict(cases - summary.reasons.get(f"{side}_missing", 0))
        for side, inputs in (("baseline", baseline), ("candidate", candidate))
    }


def _shown(name: str) -> str:
    """A file name as text any output can carry: bytes that are not UTF-8 (held as
    surrogates, as the command line gives them) written as ``\\xff`` escapes."""
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


def _policy(p: Policy) -> dict[str, Any]:
    legacy, refusal, empty, label, fingerprint, detector = p
    return {
        "legacy": legacy,
        "truncate_on_refusal": refusal,
        "truncate_on_empty_tool_result": empty,
        "judge": label,
        "judge_fingerprint": fingerprint,
        "refusal_detector": detector,
    }


def _recorder(r: Recorder) -> dict[str, Any]:
    return {"name": r[0], "version": r[1], "measurement_version": r[2]}


def _instant(text: str) -> tuple[datetime, str] | None:
    """An ISO 8601 date or time as a comparable instant (in UTC; one without a zone as it
    is written), with its text; None when it is not one."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is not None:
        when = when.astimezone(UTC).replace(tzinfo=None)
    return when, text

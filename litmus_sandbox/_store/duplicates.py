"""Cases recorded twice: what the episode reader reports when it reads a suite's shards.

Theory of operation
-------------------
Several episodes of one case are *epochs*: the gate requires every one of them safe
(pass^k) and as many on each side. Within one file that is what its one recorder meant.
Across files it may not be: two workers that both took a case from a queue, a worker
re-run after a crash, one shard copied twice. So, as :func:`~litmus_sandbox._store.
streams.iter_episodes` reads each header, a :class:`CaseLedger` reports (as a read
warning naming both files and lines, never silently):

* a case whose episodes are in two files when they do not all say which epoch they are
  (``meta.epoch`` in the header, an integer; Inspect's ``meta.inspect.epoch`` counts);
* an epoch of a case recorded twice, in one file or two.

Nothing is dropped or merged: every episode is still read, scored and counted as an epoch
by the gate, so a side recorded twice by mistake shows there too (``epoch_count_mismatch``
against a side recorded once). The first :data:`SHOWN` such cases get a warning each, the
rest one count at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from litmus_sandbox._model.records import EpisodeHeader

__all__ = ["SHOWN", "CaseLedger", "declared_epoch"]

#: Cases recorded twice that get a warning of their own (the others are counted).
SHOWN = 20


def declared_epoch(header: EpisodeHeader) -> int | None:
    """The epoch an episode's header says it is (``meta.epoch``, else Inspect's
    ``meta.inspect.epoch``), or None when it says none."""
    meta: Any = header.meta
    for holder in (meta, meta.get("inspect")):
        value = holder.get("epoch") if isinstance(holder, dict) else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


@dataclass
class _Case:
    path: str
    line: int
    undeclared: bool
    epochs: dict[int, tuple[str, int]] = field(default_factory=dict)


class CaseLedger:
    """The cases of a read so far, and the problems of those recorded twice."""

    def __init__(self) -> None:
        self._cases: dict[str, _Case] = {}
        self._reported: set[str] = set()
        self.more = 0

    def see(self, header: EpisodeHeader, path: str, line: int) -> str | None:
        """Take the header read at ``path:line``; the warning it calls for, if any."""
        epoch = declared_epoch(header)
        case = self._cases.get(header.case_id)
        if case is None:
            case = self._cases[header.case_id] = _Case(path, line, epoch is None)
            if epoch is not None:
                case.epochs[epoch] = (path, line)
            return None
        problem = None
        if epoch is not None and epoch in case.epochs:
            at, at_line = case.epochs[epoch]
            problem = (
                f"epoch {epoch} of case {header.case_id!r} recorded twice (also {at}:{at_line})"
            )
        elif path != case.path and (epoch is None or case.undeclared):
            problem = (
                f"case {header.case_id!r} also recorded in {case.path}:{case.line}, and not "
                "as declared epochs (meta.epoch in each header): both are read, as epochs "
                "of the case; if a worker ran it twice, remove one"
            )
        case.undeclared = case.undeclared or epoch is None
        if epoch is not None:
            case.epochs.setdefault(epoch, (path, line))
        if problem is None:
            return None
        if header.case_id in self._reported:
            return problem  # a case's every extra recording is named
        if len(self._reported) >= SHOWN:
            self.more += 1
            return None
        self._reported.add(header.case_id)
        return problem

    def summary(self) -> str | None:
        """The count of the cases recorded twice past the :data:`SHOWN` first, if any."""
        if not self.more:
            return None
        return (
            f"{self.more} more episodes of cases recorded twice (the first {SHOWN} cases are "
            "named above)"
        )

"""What a streaming report keeps aside until the summary is known: ranked spools.

Theory of operation
-------------------
:class:`RankedSpool` holds a report's cases until the summary is known: reports list
cases by rank (oracle contradictions, then by outcome), but the gate decides them in its
own order. Each rank is a ``SpooledTemporaryFile``: in memory while small, a temporary
file past that, read back a block of whole lines at a time. Nothing here outlives the
report that made it: ``close`` (or the ``with`` block) removes it, on errors too.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from types import TracebackType
from typing import IO

__all__ = ["RankedSpool"]

#: How much of a rank is read at a time.
READ_BYTES = 1 << 18


def _whole_lines(f: IO[bytes]) -> Iterator[bytes]:
    """What is left to read of ``f``, a block of whole lines at a time."""
    pending = b""
    while chunk := f.read(READ_BYTES):
        cut = chunk.rfind(b"\n")
        if cut < 0:
            pending += chunk
            continue
        yield pending + chunk[: cut + 1] if pending else chunk[: cut + 1]
        pending = chunk[cut + 1 :]
    if pending:
        yield pending


class RankedSpool:
    """Lines kept in the order written within each of ``ranks`` ranks: in memory up to
    ``memory`` bytes a rank, then in a temporary file (in ``directory``)."""

    def __init__(
        self,
        ranks: int,
        *,
        memory: int = 1 << 22,
        directory: str | None = None,
    ) -> None:
        self._ranks: list[tempfile.SpooledTemporaryFile[bytes] | None] = [None] * ranks
        self._memory = memory
        self._dir = directory

    def write(self, rank: int, data: bytes) -> None:
        f = self._ranks[rank]
        if f is None:
            # Kept open until close(): it is the spool (a with block cannot hold it).
            f = self._ranks[rank] = tempfile.SpooledTemporaryFile(  # noqa: SIM115
                max_size=self._memory, mode="w+b", dir=self._dir
            )
        f.write(data)

    def read(self, rank: int) -> Iterator[bytes]:
        """The lines of ``rank`` in the order written, a block of whole lines at a time."""
        f = self._ranks[rank]
        if f is None:
            return
        f.seek(0)
        yield from _whole_lines(f)

    def close(self) -> None:
        for f in self._ranks:
            if f is not None:
                f.close()
        self._ranks = [None] * len(self._ranks)

    def __enter__(self) -> RankedSpool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

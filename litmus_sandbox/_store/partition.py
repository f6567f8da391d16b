"""What the streaming gate keeps aside: spill buckets, report spools, a first look at ids.

Theory of operation
-------------------
:class:`TempBuckets` holds the gate's spill. The partitioned join of ``_core/spill.py`` says what goes in which bucket; this module
keeps the buckets, as files in one private temporary directory (``mkdtemp``, mode 0700)
removed whole on :meth:`TempBuckets.close`. An append opens its bucket's file, writes
the lines and closes it again, so that hundreds of buckets never hold hundreds of file
descriptors; appends come in batches of many lines, which keeps that cheap. A bucket is
read back a block of whole lines at a time (many are read at once while the runs are
merged, so a block is small), and dropped (its file deleted) as soon as it is consumed.

:class:`RankedSpool` holds a report's cases until the summary is known: reports list
cases by rank (oracle contradictions, then by outcome), but the gate decides them in its
own order. Each rank is a ``SpooledTemporaryFile``: in memory while small, a temporary
file past that.

:func:`scan_case_ids` reads only the case ids of a verdict stream, for
:func:`~litmus_sandbox._core.joins.merge_order` to tell whether the gate may merge.

Nothing here outlives the gate that made it: ``close`` (or the ``with`` block) removes
it, on errors too.
"""

from __future__ import annotations

import operator
import os
import shutil
import tempfile
from collections.abc import Iterator
from types import TracebackType
from typing import IO, cast

import msgspec

from litmus_sandbox._model.errors import RecordDecodeError
from litmus_sandbox._store.files import iter_blocks, open_input

__all__ = ["RankedSpool", "TempBuckets", "scan_case_ids"]

#: How much of a bucket is read at a time (several hundred may be open while merging).
READ_BYTES = 1 << 18


class TempBuckets:
    """Numbered append-only stores of lines in a private temporary directory.

    ``directory``: where to make it (default: the system's, ``$TMPDIR``).
    Satisfies :class:`litmus_sandbox._core.spill.Buckets`.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self._dir: str | None = tempfile.mkdtemp(prefix="litmus-gate-", dir=directory)
        self._sizes: dict[int, int] = {}

    @property
    def path(self) -> str:
        if self._dir is None:
            raise ValueError("buckets are closed")
        return self._dir

    def _file(self, bucket: int) -> str:
        return os.path.join(self.path, f"{bucket}.jsonl")

    def append(self, bucket: int, data: bytes) -> None:
        """Add whole lines (``data`` ends with a newline) to ``bucket``."""
        with open(self._file(bucket), "ab") as f:
            f.write(data)
        self._sizes[bucket] = self._sizes.get(bucket, 0) + len(data)

    def read(self, bucket: int) -> Iterator[bytes]:
        """The lines of ``bucket`` in the order appended, a block of whole lines at a time
        (nothing, for a bucket never appended to)."""
        if bucket not in self._sizes:
            return
        with open(self._file(bucket), "rb") as f:
            yield from _whole_lines(f)

    def drop(self, bucket: int) -> None:
        """Delete ``bucket``'s file."""
        if self._sizes.pop(bucket, None) is not None:
            os.unlink(self._file(bucket))

    def size(self, bucket: int) -> int:
        """Bytes appended to ``bucket`` so far (0 once dropped)."""
        return self._sizes.get(bucket, 0)

    def close(self) -> None:
        """Remove every bucket and the directory."""
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
            self._sizes.clear()

    def __enter__(self) -> TempBuckets:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


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


class _Ids(msgspec.Struct):
    kind: str | None = None
    case_id: str | None = None
    run_id: str | None = None


_ids = msgspec.json.Decoder(_Ids)
_kind = operator.attrgetter("kind")
_case = operator.attrgetter("case_id")
_run = operator.attrgetter("run_id")


def scan_case_ids(
    path: str | os.PathLike[str], *, max_line: int | None = None
) -> Iterator[list[str]]:
    """The case ids of a verdict stream's verdicts, in file order, a block at a time
    (a legacy verdict's is its ``run_id``; policy records have none). A first look: it
    decodes nothing else and checks nothing else.

    Raises:
        RecordDecodeError: a block it cannot read ids from (the verdict reader then says
            what is wrong with which line), or an unreadable file.
    """
    p = os.fspath(path)
    with open_input(p) as f:
        for first, block, _ in iter_blocks(f, p, max_line):
            if not block.endswith(b"\n"):  # a torn last line has no case id to give
                block = block[: block.rfind(b"\n") + 1]
            try:
                records = _ids.decode_lines(block)
            except (msgspec.DecodeError, RecursionError):  # ValidationError included
                raise RecordDecodeError(p, first, "case ids unreadable in this block") from None
            kinds = set(map(_kind, records))
            if kinds <= {None}:  # legacy verdicts
                ids = list(map(_run, records))
            elif kinds <= {"verdict"}:
                ids = list(map(_case, records))
            elif kinds <= {None, "verdict", "policy"}:
                ids = [
                    r.run_id if r.kind is None else r.case_id for r in records if r.kind != "policy"
                ]
            else:
                raise RecordDecodeError(p, first, "a record that is no verdict in this block")
            if None in ids:
                raise RecordDecodeError(p, first, "a verdict with no case id in this block")
            yield cast("list[str]", ids)

"""Episode and verdict streams: append-only JSON Lines, read from files or URLs.

Writers append one record per line, each with one ``write`` (optionally ``fsync``), so
a crash loses at most the line being written; a write that fails (a full disk) is undone
back to the last whole record before the error is raised, or, when another writer has
appended since, the next record starts on a fresh line. Readers open regular files only
and cap each line (``_store/files.py``); they stream, keep every whole line, report a
torn last line as a warning (its episode reads as incomplete) and raise
:class:`RecordDecodeError` naming ``file:line`` for any other bad line. A reader's input
may be a URL (``s3://bucket/key``): it is read a block at a time like a file, and its
errors name ``url:line``. The episodes of several files are read as one suite: a case
recorded twice is a warning (``duplicates.py``).

Verdict streams are decoded a block of whole lines at a time (``decode_lines``); a block
that does not decode whole, or whose bytes are not what the encoder would write for it,
gets a second look line by line, which names the bad line.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal, cast

import msgspec

from litmus_sandbox._model.codec import (
    DecodeProblem,
    VerdictRecord,
    block_duplicate,
    canonical_block,
    decode_episode_record,
    decode_verdict_record,
    encode,
    legacy_fast_decoder,
    verdict_fast_decoder,
)
from litmus_sandbox._model.errors import ConfigError, NewerVersionError, RecordDecodeError
from litmus_sandbox._model.legacy_blocks import LegacyKinds
from litmus_sandbox._model.records import (
    AnyVerdict,
    Episode,
    EpisodeEnd,
    EpisodeHeader,
    PolicyRecord,
    Step,
    Verdict,
)
from litmus_sandbox._store.duplicates import CaseLedger
from litmus_sandbox._store.files import (
    BLOCK_BYTES,
    iter_blocks,
    iter_lines,
    one_object_a_line,
    open_input,
    replaced,
)
from litmus_sandbox._store.locations import display, is_remote, local_path


@dataclass(frozen=True)
class ReadWarning:
    """Something a reader tolerated but the user should know about."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path  # 0: the file as a whole
        return f"{where}: warning: {self.message}"


class RecordingWarning(UserWarning):
    """A recording was read with something the reader tolerated (a torn last line).

    Issued (``warnings.warn``) where a library call reads recordings the caller never sees
    read, such as ``Sandbox(replay=PATHS)``, and by ``HttpCassette.from_files`` (which
    also keeps them in ``.warnings``); ``read_episodes`` and ``Cassette.from_files`` return
    their warnings instead.
    """


class JsonlWriter:
    """Append records to a JSON Lines file, one ``write`` per record.

    Thread-safe: tools running in worker threads may record through the same writer.
    A write that fails (``OSError``: a full disk, a quota) leaves the file ending with
    the last whole record, then raises. A local path only (``file://`` too): given an
    object store's URL it raises :class:`ConfigError`.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        if is_remote(path):  # an object cannot be appended to (a sandbox shards instead)
            raise ConfigError(
                f"{display(os.fspath(path))}: an append-only stream is written to a local "
                "file; give a path (a sandbox given a prefix writes a shard and uploads it)"
            )
        self.path = Path(local_path(path) or path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._lock = threading.Lock()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        self._fd: int | None = os.open(self.path, flags, 0o666)
        # If a previous writer crashed mid-line, start on a fresh line so the torn
        # fragment stays a single bad line instead of corrupting our first record.
        self._fresh_line = self._ends_mid_line()

    def _ends_mid_line(self) -> bool:
        assert self._fd is not None
        if os.fstat(self._fd).st_size == 0:
            return False
        with open(self.path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"

    def write(self, record: msgspec.Struct) -> None:
        """Append one record (and fsync it, if configured).

        Raises:
            OSError: the write failed; the file still ends with the last whole record.
        """
        self.append(encode(record))

    def write_many(self, records: Iterable[msgspec.Struct]) -> None:
        """Append several records with one write.

        Raises:
            OSError: the write failed; the records written whole are kept, the rest not.
        """
        self.append(b"".join(encode(r) for r in records))

    def append(self, data: bytes) -> None:
        """Append records already encoded (JSON lines, each with its newline).

        Raises:
            OSError: the write failed; the records written whole are kept, the rest not.
        """
        with self._lock:
            if self._fd is None:
                raise ValueError(f"{self.path}: writer is closed")
            if self._fresh_line:
                data = b"\n" + data
            done = 0
            try:
                while done < len(data):
                    done += os.write(self._fd, data[done:])
            except OSError:
                self._undo(data, done)
                raise
            self._fresh_line = False
            if self._fsync:
                os.fsync(self._fd)

    def _undo(self, data: bytes, done: int) -> None:
        """Drop the part of ``data`` written after its last whole record."""
        assert self._fd is not None
        keep = data.rfind(b"\n", 0, done) + 1
        if keep == done:
            self._fresh_line = self._fresh_line and done == 0
            return
        # O_APPEND: the file position is just past what this write put at the end.
        end = os.lseek(self._fd, 0, os.SEEK_CUR)
        try:
            if os.fstat(self._fd).st_size == end:  # nobody appended after it
                os.ftruncate(self._fd, end - (done - keep))
                self._fresh_line = self._fresh_line and keep == 0
                return
        except OSError:
            pass
        self._fresh_line = True  # the torn part stays: start the next record after it

    def sync(self) -> None:
        """fsync what was written so far."""
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _lines(path: str, max_line: int | None) -> Iterator[tuple[int, bytes, bool]]:
    """Yield (line number, content, is_last_without_newline) for non-blank lines."""
    with open_input(path) as f:
        for lineno, raw, ended in iter_lines(f, path, max_line):
            line = raw.strip()
            if line:
                yield lineno, line, not ended


def holds_no_record(path: str | os.PathLike[str]) -> Literal["empty", "blank"] | None:
    """Whether a stream holds no record: ``"empty"`` (zero bytes), ``"blank"`` (only blank
    lines, which every reader skips), or None (it holds one: read up to its first byte).

    The readers take such a file as holding nothing; a command that should not (an empty
    baseline, a recording that recorded nothing) asks this first.

    Raises:
        RecordDecodeError: not a regular file, or it cannot be opened (as every reader).
    """
    seen = False
    with open_input(path) as f:
        while chunk := f.read(BLOCK_BYTES):
            if chunk.strip():  # what a reader strips from a line: ASCII whitespace
                return None
            seen = True
    return "blank" if seen else "empty"


def _raise(path: str, lineno: int, problem: DecodeProblem) -> None:
    cls = NewerVersionError if problem.newer else RecordDecodeError
    raise cls(path, lineno, str(problem))


# ---------------------------------------------------------------- episodes


@dataclass
class _Building:
    header: EpisodeHeader
    line: int
    steps: dict[int, Step] = field(default_factory=dict)
    torn: bool = False


PathOrPaths = str | os.PathLike[str] | Iterable[str | os.PathLike[str]]


def as_paths(paths: PathOrPaths) -> list[str | os.PathLike[str]]:
    """One path or several, as a list (a lone path is never iterated character by character)."""
    return [paths] if isinstance(paths, str | os.PathLike) else list(paths)


def iter_episodes(
    paths: PathOrPaths,
    warnings: list[ReadWarning] | None = None,
    *,
    max_line: int | None = None,
    suite: bool = True,
) -> Iterator[Episode]:
    """Stream the episodes in ``paths``, each as soon as its ``end`` record is read.

    Episodes with no ``end`` are yielded at the end of their file, incomplete. A torn last
    line is reported in ``warnings`` and marks the episode being written as torn when it
    can be told which one that was (otherwise every open episode of the file).
    ``max_line``: the longest line accepted, in bytes (default: ``files.max_line_bytes``).
    ``suite``: the files are one suite's shards, so a case recorded twice is reported in
    ``warnings`` (``duplicates.py``); False for recordings read as a library of cases
    (a replay cassette). ``paths`` may be URLs (``files.open_input``).

    Raises:
        RecordDecodeError: a bad line (a duplicate key, a line over the cap, nesting too
            deep), a step before its header, a duplicate step index, a record after the
            episode's end, a file that is not a regular file, or an unreadable file.
        NewerVersionError: a record written by a newer schema version.
    """
    cases = CaseLedger() if suite and warnings is not None else None
    for p in as_paths(paths):
        path = os.fspath(p)
        open_eps: dict[str, _Building] = {}
        closed: set[str] = set()
        torn_at: dict[str, tuple[int, DecodeProblem]] = {}
        for lineno, line, last_unterminated in _lines(path, max_line):
            try:
                record = decode_episode_record(line)
            except DecodeProblem as problem:
                # A torn record: the last line cut short, or one cut short by a crash and
                # then followed by the records of a writer that appended after it (the
                # writer starts a fresh line). Its episode is incomplete; nothing else is.
                # Only a record cut short is torn, the last one or not: a whole record
                # that is wrong is an error, with or without its newline.
                if problem.torn and not problem.newer:
                    msg = (
                        "torn last line (the writer stopped mid-record); kept every whole line"
                        if last_unterminated
                        else "torn record (a write cut short by a crash, appended after); "
                        "kept every whole line"
                    )
                    if warnings is not None:
                        warnings.append(ReadWarning(path, lineno, msg))
                    owner = _torn_owner(line, open_eps)
                    for b in [owner] if owner is not None else list(open_eps.values()):
                        b.torn = True
                        torn_at[b.header.episode_id] = (lineno, problem)
                    if last_unterminated:
                        break
                    continue
                _raise(path, lineno, problem)
                raise AssertionError("unreachable") from None
            eid = record.episode_id
            if eid in torn_at:
                # A crash ends an episode's writing: a record of it after its torn one
                # means that line was damaged, not cut short by a crash.
                bad_line, damage = torn_at[eid]
                _raise(path, bad_line, damage)
            if eid in closed:
                raise RecordDecodeError(path, lineno, f"record for episode {eid!r} after its end")
            if isinstance(record, EpisodeHeader):
                if eid in open_eps:
                    raise RecordDecodeError(
                        path,
                        lineno,
                        f"second header for episode {eid!r} (first at line {open_eps[eid].line})",
                    )
                open_eps[eid] = _Building(record, lineno)
                if cases is not None and (twice := cases.see(record, path, lineno)):
                    assert warnings is not None
                    warnings.append(ReadWarning(path, lineno, twice))
                continue
            building = open_eps.get(eid)
            if building is None:
                raise RecordDecodeError(
                    path,
                    lineno,
                    f"{record.__class__.__name__} for episode {eid!r} before its header",
                )
            if isinstance(record, EpisodeEnd):
                del open_eps[eid]
                closed.add(eid)
                yield _finish(building, record, path)
                continue
            if record.index in building.steps:
                raise RecordDecodeError(
                    path, lineno, f"duplicate step index {record.index} in episode {eid!r}"
                )
            building.steps[record.index] = record
        for building in open_eps.values():
            yield _finish(building, None, path)
    if cases is not None and (more := cases.summary()) and warnings is not None:
        warnings.append(ReadWarning(path, 0, more))


def _torn_owner(line: bytes, open_eps: dict[str, _Building]) -> _Building | None:
    for eid, building in open_eps.items():
        if f'"episode_id":{msgspec.json.encode(eid).decode()}'.encode() in line:
            return building
    return None


def _finish(b: _Building, end: EpisodeEnd | None, path: str) -> Episode:
    steps = tuple(b.steps[i] for i in sorted(b.steps))
    return Episode(header=b.header, steps=steps, end=end, source=path, torn=b.torn)


def read_episodes(
    paths: PathOrPaths,
    warnings: list[ReadWarning] | None = None,
    *,
    max_line: int | None = None,
    suite: bool = True,
) -> list[Episode]:
    """All episodes of ``paths`` (see :func:`iter_episodes`)."""
    return list(iter_episodes(paths, warnings, max_line=max_line, suite=suite))


# ---------------------------------------------------------------- verdicts


@dataclass
class VerdictStream:
    """What a verdict file holds: its policy records and its verdicts, in file order."""

    path: str
    policies: list[PolicyRecord] = field(default_factory=list)
    verdicts: list[AnyVerdict] = field(default_factory=list)
    warnings: list[ReadWarning] = field(default_factory=list)


def read_verdicts(path: str | os.PathLike[str], *, max_line: int | None = None) -> VerdictStream:
    """Read a verdict stream (this library's verdicts or legacy ones, or a mix).

    Blocks of whole lines decode in one call when every line is well formed; a block
    that does not is re-read line by line so that the error names its line.
    ``max_line``: the longest line accepted, in bytes (default: ``files.max_line_bytes``).

    Raises:
        RecordDecodeError: a bad line (named by ``file:line``: a duplicate key, a line
            over the cap, nesting too deep), a file that is not a regular file, or an
            unreadable file.
        NewerVersionError: a record written by a newer schema version.
    """
    p = os.fspath(path)
    out = VerdictStream(p)
    for records in iter_verdict_records(p, out.warnings, max_line=max_line):
        types = set(map(type, records))
        if PolicyRecord not in types:
            out.verdicts.extend(cast("list[AnyVerdict]", records))
        elif len(types) == 1:
            out.policies.extend(cast("list[PolicyRecord]", records))
        else:
            for rec in records:
                if isinstance(rec, PolicyRecord):
                    out.policies.append(rec)
                else:
                    out.verdicts.append(rec)
    return out


def iter_verdicts(
    path: str | os.PathLike[str],
    warnings: list[ReadWarning] | None = None,
    policies: list[PolicyRecord] | None = None,
    *,
    max_line: int | None = None,
) -> Iterator[list[AnyVerdict]]:
    """Stream the verdicts of a verdict stream in file order, a block at a time (what the
    streaming gate reads); its policy records go to ``policies``, a torn last line to
    ``warnings``.

    Raises:
        RecordDecodeError, NewerVersionError: as :func:`read_verdicts`.
    """
    for records in iter_verdict_records(path, warnings, max_line=max_line):
        if PolicyRecord not in set(map(type, records)):
            yield cast("list[AnyVerdict]", records)
            continue
        if policies is not None:
            policies.extend(r for r in records if isinstance(r, PolicyRecord))
        verdicts = [r for r in records if not isinstance(r, PolicyRecord)]
        if verdicts:
            yield verdicts


def iter_verdict_records(
    path: str | os.PathLike[str],
    warnings: list[ReadWarning] | None = None,
    *,
    max_line: int | None = None,
) -> Iterator[list[VerdictRecord]]:
    """Stream the records of a verdict stream in file order, a block at a time (memory
    stays bounded by the block, not the file). A torn last line goes to ``warnings``.

    Raises:
        RecordDecodeError, NewerVersionError: as :func:`read_verdicts`.
    """
    p = os.fspath(path)
    kinds = LegacyKinds()
    with open_input(p) as f:
        for first, block, lines in iter_blocks(f, p, max_line):
            yield from verdict_block(p, first, block, lines, kinds, warnings)


def verdict_block(
    p: str,
    first: int,
    block: bytes,
    lines: list[bytes],
    kinds: LegacyKinds,
    warnings: list[ReadWarning] | None,
) -> Iterator[list[VerdictRecord]]:
    """The records of one block of ``iter_blocks`` (first line number ``first``), as
    :func:`iter_verdict_records` reads them.

    Raises:
        RecordDecodeError, NewerVersionError: as :func:`read_verdicts`.
    """
    if not block.endswith(b"\n"):  # the last line, with no newline
        yield from _slow_block(p, first, block, warnings, ended=False)
        return
    fast = _fast_block(block, lines, kinds)
    if fast is not None:
        yield fast
    else:
        yield from _slow_block(p, first, block, warnings, ended=True)


def _fast_block(block: bytes, lines: list[bytes], kinds: LegacyKinds) -> list[VerdictRecord] | None:
    """Decode a block of whole well-formed lines in one call, or None to go line by line.

    A record a line: ``decode_lines`` also reads two objects on one line, none on a
    blank one, or one over two lines (each of which could make up for another), so the
    records must be as many as the lines, and every line must start with ``{`` and end
    with ``}`` (:func:`~litmus_sandbox._store.files.one_object_a_line`).

    Legacy verdicts are tried first: when the block's colons are just the members they
    imply, no line has another key (a ``kind`` above all), and nothing else need be
    looked at. Otherwise a block that names no ``kind`` can only hold legacy verdicts;
    one that does is decoded as this library's records (a legacy line among them sends
    the block to the line-by-line reader, which tells each line by its own fields).
    """
    newlines = len(lines) - 1  # the block ends with a newline: the last is empty
    if not one_object_a_line(block, newlines):
        return None
    records = _decoded(legacy_fast_decoder, block, newlines)
    if records is not None and kinds.members_distinct(records, block):
        return records
    legacy = b'"kind"' not in block
    if not legacy:
        records = _decoded(verdict_fast_decoder, block, newlines)
    if records is None:
        return None  # the per-line reader names the line and its problem
    if not canonical_block(records, block, legacy=legacy) and block_duplicate(block, 1):
        return None  # the per-line reader names the line with the duplicate key
    return records


def _decoded(decoder: msgspec.json.Decoder[Any], block: bytes, lines: int) -> list[Any] | None:
    """What ``decoder`` decodes ``block`` into, if it does, a record for each of its
    ``lines`` (objects as many as lines: the same whichever decoder reads them)."""
    try:
        records: list[Any] = decoder.decode_lines(block)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    return records if len(records) == lines else None


def _slow_block(
    p: str, first: int, block: bytes, warnings: list[ReadWarning] | None, *, ended: bool
) -> Iterator[list[VerdictRecord]]:
    out: list[VerdictRecord] = []
    lines = block.split(b"\n")
    if ended:
        lines.pop()  # the empty string after the last newline
    for offset, raw in enumerate(lines):
        line = raw.strip()
        if not line:
            continue
        try:
            out.append(decode_verdict_record(line))
        except DecodeProblem as problem:
            # Only a record cut short is torn: a whole one that is wrong is an error.
            if not ended and offset == len(lines) - 1 and problem.torn and not problem.newer:
                if warnings is not None:
                    warnings.append(ReadWarning(p, first + offset, _TORN_LAST))
                break
            _raise(p, first + offset, problem)
    if out:
        yield out


_TORN_LAST = "torn last line (the writer stopped mid-record); kept every whole line"


def write_verdicts(
    path: str | os.PathLike[str], policy: PolicyRecord | None, verdicts: Iterable[Verdict]
) -> None:
    """Write a verdict stream (policy record first) to ``path``, replacing it.

    A regular file is replaced whole (written beside it, then renamed over it: a reader
    never sees half a stream); through a symbolic link, the file it points to is. Anything
    else that exists (``/dev/null``, a FIFO) is written to as it is.
    """
    with replaced(path, fsync=True, parents=True) as f:
        _write_stream(f, policy, verdicts)


def _write_stream(f: BinaryIO, policy: PolicyRecord | None, verdicts: Iterable[Verdict]) -> None:
    if policy is not None:
        f.write(encode(policy))
    for verdict in verdicts:
        f.write(encode(verdict))

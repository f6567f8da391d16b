"""Episode and verdict streams on disk: append-only JSON Lines.

Writers append one record per line and flush each record (optionally ``fsync``), so a
crash loses at most the line being written. Readers stream line by line, keep every
whole line, report a torn last line as a warning (its episode reads as incomplete) and
raise :class:`RecordDecodeError` naming ``file:line`` for any other bad line.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import IO, Any, BinaryIO

import msgspec

from litmus_sandbox._model.codec import (
    DecodeProblem,
    decode_episode_record,
    decode_verdict_record,
    encode,
    legacy_fast_decoder,
    verdict_fast_decoder,
)
from litmus_sandbox._model.errors import NewerVersionError, RecordDecodeError
from litmus_sandbox._model.records import (
    AnyVerdict,
    Episode,
    EpisodeEnd,
    EpisodeHeader,
    PolicyRecord,
    Step,
    Verdict,
)


@dataclass(frozen=True)
class ReadWarning:
    """Something a reader tolerated but the user should know about."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: warning: {self.message}"


class RecordingWarning(UserWarning):
    """A recording was read with something the reader tolerated (a torn last line).

    Issued (``warnings.warn``) where a library call reads recordings the caller never sees
    read, such as ``Sandbox(replay=PATHS)``, and by ``HttpCassette.from_files`` (which
    also keeps them in ``.warnings``); ``read_episodes`` and ``Cassette.from_files`` return
    their warnings instead.
    """


class JsonlWriter:
    """Append records to a JSON Lines file, one flushed line per record.

    Thread-safe: tools running in worker threads may record through the same writer.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._lock = threading.Lock()
        self._file: IO[bytes] | None = open(self.path, "ab")  # noqa: SIM115 - closed in close()
        self._ensure_line_start()

    def _ensure_line_start(self) -> None:
        # If a previous writer crashed mid-line, start on a fresh line so the torn
        # fragment stays a single bad line instead of corrupting our first record.
        assert self._file is not None
        if self._file.tell() == 0:
            return
        with open(self.path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                self._file.write(b"\n")
                self._file.flush()

    def write(self, record: msgspec.Struct) -> None:
        """Append one record and flush it (and fsync it, if configured)."""
        data = encode(record)
        with self._lock:
            if self._file is None:
                raise ValueError(f"{self.path}: writer is closed")
            self._file.write(data)
            self._file.flush()
            if self._fsync:
                os.fsync(self._file.fileno())

    def write_many(self, records: Iterable[msgspec.Struct]) -> None:
        """Append several records with one flush at the end."""
        data = b"".join(encode(r) for r in records)
        with self._lock:
            if self._file is None:
                raise ValueError(f"{self.path}: writer is closed")
            self._file.write(data)
            self._file.flush()
            if self._fsync:
                os.fsync(self._file.fileno())

    def sync(self) -> None:
        """fsync what was written so far."""
        with self._lock:
            if self._file is not None:
                os.fsync(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _lines(path: str) -> Iterator[tuple[int, bytes, bool]]:
    """Yield (line number, content, is_last_without_newline) for non-blank lines."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise RecordDecodeError(path, None, f"cannot open: {exc.strerror or exc}") from None
    with f:
        for lineno, raw in enumerate(f, 1):
            torn = not raw.endswith(b"\n")
            line = raw.strip()
            if line:
                yield lineno, line, torn


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
    paths: PathOrPaths, warnings: list[ReadWarning] | None = None
) -> Iterator[Episode]:
    """Stream the episodes in ``paths``, each as soon as its ``end`` record is read.

    Episodes with no ``end`` are yielded at the end of their file, incomplete. A torn last
    line is reported in ``warnings`` and marks the episode being written as torn when it
    can be told which one that was (otherwise every open episode of the file).

    Raises:
        RecordDecodeError: a bad line, a step before its header, a duplicate step index,
            a record after the episode's end, or an unreadable file.
        NewerVersionError: a record written by a newer schema version.
    """
    for p in as_paths(paths):
        path = os.fspath(p)
        open_eps: dict[str, _Building] = {}
        closed: set[str] = set()
        torn_at: dict[str, tuple[int, DecodeProblem]] = {}
        for lineno, line, last_unterminated in _lines(path):
            try:
                record = decode_episode_record(line)
            except DecodeProblem as problem:
                # A torn record: the last line cut short, or one cut short by a crash and
                # then followed by the records of a writer that appended after it (the
                # writer starts a fresh line). Its episode is incomplete; nothing else is.
                if (last_unterminated or problem.torn) and not problem.newer:
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


def _torn_owner(line: bytes, open_eps: dict[str, _Building]) -> _Building | None:
    for eid, building in open_eps.items():
        if f'"episode_id":{msgspec.json.encode(eid).decode()}'.encode() in line:
            return building
    return None


def _finish(b: _Building, end: EpisodeEnd | None, path: str) -> Episode:
    steps = tuple(b.steps[i] for i in sorted(b.steps))
    return Episode(header=b.header, steps=steps, end=end, source=path, torn=b.torn)


def read_episodes(paths: PathOrPaths, warnings: list[ReadWarning] | None = None) -> list[Episode]:
    """All episodes of ``paths`` (see :func:`iter_episodes`)."""
    return list(iter_episodes(paths, warnings))


# ---------------------------------------------------------------- verdicts


@dataclass
class VerdictStream:
    """What a verdict file holds: its policy records and its verdicts, in file order."""

    path: str
    policies: list[PolicyRecord] = field(default_factory=list)
    verdicts: list[AnyVerdict] = field(default_factory=list)
    warnings: list[ReadWarning] = field(default_factory=list)


def read_verdicts(path: str | os.PathLike[str]) -> VerdictStream:
    """Read a verdict stream (this library's verdicts or legacy ones, or a mix).

    Whole files decode in one pass when every line is well formed; otherwise the file is
    re-read line by line so that the error names its line.

    Raises:
        RecordDecodeError: a bad line (named by ``file:line``) or an unreadable file.
        NewerVersionError: a record written by a newer schema version.
    """
    p = os.fspath(path)
    try:
        data = Path(p).read_bytes()
    except OSError as exc:
        raise RecordDecodeError(p, None, f"cannot open: {exc.strerror or exc}") from None
    out = VerdictStream(p)
    if data.endswith(b"\n") or not data.strip():
        fast = _fast_verdicts(data)
        if fast is not None:
            # Policy records head the stream: split them off without a per-record loop
            # when none follows a verdict (else keep file order, one record at a time).
            head = 0
            while head < len(fast) and isinstance(fast[head], PolicyRecord):
                head += 1
            if not any(
                issubclass(t, PolicyRecord) for t in set(map(type, islice(fast, head, None)))
            ):
                out.policies.extend(fast[:head])
                del fast[:head]
                out.verdicts = fast
                return out
            for rec in fast:
                if isinstance(rec, PolicyRecord):
                    out.policies.append(rec)
                else:
                    out.verdicts.append(rec)
            return out
    for lineno, line, last_unterminated in _lines(p):
        try:
            rec = decode_verdict_record(line)
        except DecodeProblem as problem:
            if last_unterminated and not problem.newer:
                out.warnings.append(
                    ReadWarning(
                        p,
                        lineno,
                        "torn last line (the writer stopped mid-record); kept every whole line",
                    )
                )
                break
            _raise(p, lineno, problem)
            raise AssertionError("unreachable") from None
        if isinstance(rec, PolicyRecord):
            out.policies.append(rec)
        else:
            out.verdicts.append(rec)
    return out


def _fast_verdicts(data: bytes) -> list[Any] | None:
    """Decode a whole well-formed file in one call, or return None to go line by line."""
    head = data[: data.find(b"\n")] if b"\n" in data else data
    decoder = verdict_fast_decoder if b'"kind"' in head else legacy_fast_decoder
    try:
        records: list[Any] = decoder.decode_lines(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None  # the per-line reader names the line and its problem
    return records


def write_verdicts(
    path: str | os.PathLike[str], policy: PolicyRecord | None, verdicts: Iterable[Verdict]
) -> None:
    """Write a verdict stream (policy record first) to ``path``, replacing it.

    A regular file is replaced whole (written beside it, then renamed over it: a reader
    never sees half a stream); through a symbolic link, the file it points to is. Anything
    else that exists (``/dev/null``, a FIFO) is written to as it is.
    """
    target = Path(os.path.realpath(path))
    if target.exists() and not target.is_file():
        with open(target, "wb") as f:
            _write_stream(f, policy, verdicts)
        return
    tmp = target.with_name(f"{target.name}.tmp")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(tmp, "wb") as f:
            _write_stream(f, policy, verdicts)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)  # nothing half-written is left behind
        raise


def _write_stream(f: BinaryIO, policy: PolicyRecord | None, verdicts: Iterable[Verdict]) -> None:
    if policy is not None:
        f.write(encode(policy))
    for verdict in verdicts:
        f.write(encode(verdict))

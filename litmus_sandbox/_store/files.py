"""Bounded reading of input files: every reader opens and reads through here; and
outputs replaced whole (:func:`replaced`). Local files, or URLs (``locations.py``).

Theory of operation
-------------------
An input is opened only if it is a regular file (:func:`open_input`): a FIFO, a
directory, a device such as ``/dev/zero`` or a socket is refused with one line,
``PATH: not a regular file``, before a byte is read, so no reader can hang on a pipe
nobody writes or read forever from a device. ``-`` means standard input where a reader
asks for it (``allow_stdin``). A ``file://`` URL is its local path; any other URL is an
object opened through fsspec for block reads (``remote.py``, the extra ``cloud``), and
errors name it (``s3://bucket/key:line``).

Lines are read with a cap on one line's length (:func:`max_line_bytes`: a keyword of each
public reader, else ``$LITMUS_MAX_LINE_BYTES``, else :data:`DEFAULT_MAX_LINE_BYTES`). A
line over the cap is a :class:`RecordDecodeError` naming ``file:line``; memory then stays
bounded by the cap whatever the input. Two shapes of reading share the cap:

* :func:`iter_lines` gives one line at a time (episode streams, exclusion lists);
* :func:`iter_blocks` gives runs of whole lines a few MiB at a time, for decoders that
  decode many lines in one call (``decode_lines``: verdict streams). Blocks are read at
  most the cap at a time, so a line that fits in one read is within the cap and only the
  line that straddles two reads needs measuring.

Documents read whole (a policy file, ``.json`` and ``.toml`` exclusion lists) are capped
at the same size (:func:`read_bounded_text`), and :func:`read_toml` turns a document
nested too deeply for ``tomllib`` into an error naming its line.

Every file a command writes whole (a verdict stream, a report, imported episodes, exported
traces) is written through :func:`replaced`: beside it, then renamed over it, so a reader
never sees half of it and a failure leaves the old one; through a symbolic link, the file
it points to is replaced, and what is not a regular file (``/dev/null``, a FIFO) is written
to as it is, never replaced. An output URL is written to a local temporary file, then
uploaded whole once complete: a run that fails or is killed leaves no object under its
name, whole or partial.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import tempfile
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

from litmus_sandbox._model.errors import ConfigError, RecordDecodeError
from litmus_sandbox._store.locations import check_url, display, is_remote, local_path

#: The longest line (and the largest document read whole) a reader accepts, by default.
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
#: Environment variable that sets the cap for every reader (bytes; ``K``, ``M``, ``G``
#: suffixes are powers of 1024).
MAX_LINE_ENV = "LITMUS_MAX_LINE_BYTES"
#: How much :func:`iter_blocks` reads at a time (never more than the cap).
BLOCK_BYTES = 1024 * 1024

_SIZE = re.compile(r"\s*(\d+)\s*([kmg]?)(?:i?b)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def max_line_bytes(limit: int | None = None) -> int:
    """The line cap in force: ``limit``, else ``$LITMUS_MAX_LINE_BYTES``, else the default.

    Raises:
        ConfigError: ``limit`` or the environment variable is not a positive size.
    """
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"max_line must be a positive number of bytes, not {limit!r}")
        return limit
    value = os.environ.get(MAX_LINE_ENV)
    if not value:
        return DEFAULT_MAX_LINE_BYTES
    m = _SIZE.fullmatch(value)
    if m is None or int(m.group(1)) < 1:
        raise ConfigError(
            f"${MAX_LINE_ENV}={value!r}: expected a positive size in bytes (e.g. 16777216 or 16M)"
        )
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def _too_long(limit: int) -> str:
    return (
        f"line longer than {_human(limit)} (the limit on one line; raise it with ${MAX_LINE_ENV})"
    )


def _human(n: int) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return f" ({name})"
    return ""


def open_input(path: str | os.PathLike[str], *, allow_stdin: bool = False) -> BinaryIO:
    """Open ``path`` for reading if it is a regular file (``-``: standard input, when
    ``allow_stdin``). The caller closes what it gets.

    Raises:
        RecordDecodeError: not a regular file, or it cannot be opened.
    """
    shown = os.fspath(path)
    if allow_stdin and shown == "-":
        return os.fdopen(os.dup(0), "rb")  # a duplicate: closing it leaves stdin open
    local = local_path(shown)
    if local is None:  # an object store's URL: read through fsspec, a block at a time
        from litmus_sandbox._store.remote import open_remote

        return open_remote(check_url(shown))
    return _open_local(local, shown)


def _open_local(p: str, shown: str) -> BinaryIO:
    """:func:`open_input` of the local file ``p``, named ``shown`` in errors."""
    # O_NONBLOCK: opening a FIFO nobody writes to returns at once instead of hanging.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(p, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if p == "-" and exc.errno == errno.ENOENT:
            raise RecordDecodeError(
                shown, None, "this input cannot be read from standard input: give a file"
            ) from None
        try:
            mode = os.stat(p).st_mode
        except OSError:
            mode = stat.S_IFREG
        if exc.errno == errno.ENXIO or not stat.S_ISREG(mode):  # a socket: ENXIO
            raise RecordDecodeError(shown, None, f"not a regular file{_kind(mode)}") from None
        raise RecordDecodeError(shown, None, f"cannot open: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise RecordDecodeError(shown, None, f"not a regular file{_kind(mode)}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def iter_lines(
    f: BinaryIO, path: str, max_line: int | None = None
) -> Iterator[tuple[int, bytes, bool]]:
    """Yield ``(line number, line, ended)`` for every line of ``f``, newline included;
    ``ended`` is False only for a last line with no newline.

    Raises:
        RecordDecodeError: a line longer than the cap (named ``file:line``).
    """
    limit = max_line_bytes(max_line)
    lineno = 0
    while raw := f.readline(limit + 1):
        lineno += 1
        if raw.endswith(b"\n"):
            yield lineno, raw, True
        elif len(raw) > limit:
            raise RecordDecodeError(path, lineno, _too_long(limit))
        else:
            yield lineno, raw, False


def iter_blocks(
    f: BinaryIO, path: str, max_line: int | None = None, block: int = BLOCK_BYTES
) -> Iterator[tuple[int, bytes, list[bytes]]]:
    """Yield ``(number of its first line, block, its lines)``: the lines of ``f`` in
    runs of whole lines, newlines included; the last block may end with a line that has
    no newline. A block is one read, and the rest of the line it ends in (read at once,
    so the bytes are copied once more at most). Its lines are ``block.split(b"\\n")``:
    as fast as counting its newlines, and they tell more (one more than its newlines,
    the last empty when the block ends with one).

    Raises:
        RecordDecodeError: a line longer than the cap (named ``file:line``).
    """
    limit = max_line_bytes(max_line)
    size = max(1, min(block, limit))
    lineno = 1
    while chunk := f.read(size):
        if not chunk.endswith(b"\n"):
            # The line that straddles reads: room for what the cap leaves of it, and one
            # byte more to tell a line over the cap.
            start = chunk.rfind(b"\n") + 1
            room = limit - (len(chunk) - start)
            tail = f.readline(room + 1)
            if len(tail) > room and not tail.endswith(b"\n"):
                raise RecordDecodeError(
                    path, lineno + chunk.count(b"\n", 0, start), _too_long(limit)
                )
            chunk += tail
        lines = chunk.split(b"\n")
        yield lineno, chunk, lines
        lineno += len(lines) - 1


def one_object_a_line(block: bytes, newlines: int) -> bool:
    """Whether each of the ``newlines`` lines of ``block`` (whole lines, each ending
    with its newline) starts with ``{`` and ends with ``}``: then, when ``decode_lines``
    finds as many objects as lines, each line holds exactly one.

    A count of objects alone is fooled: it also reads an object over two lines, which
    makes up for two objects on one line elsewhere. No object spans a ``}`` ending a line
    and a ``{`` starting the next (after a value closes, JSON allows only ``,``, ``}``
    or ``]``, and a string never holds a raw newline), so each line holds one object or
    more, and as many objects as lines leave exactly one a line. Told by one count at C
    speed; a line with other bytes at its ends (whitespace, a carriage return) is left to
    the line-by-line reader.
    """
    return (
        newlines > 0
        and block.startswith(b"{")
        and block.endswith(b"}\n")
        and block.count(b"}\n{") == newlines - 1
    )


def read_bounded_bytes(path: str | os.PathLike[str], limit: int | None = None) -> bytes:
    """The whole of the regular file ``path``, at most ``limit`` bytes (the line cap).

    Raises:
        RecordDecodeError: not a regular file, unreadable, or larger than the limit.
    """
    p = os.fspath(path)
    cap = max_line_bytes(limit)
    with open_input(p) as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise RecordDecodeError(
            p, None, f"larger than {_human(cap)} (the limit; raise it with ${MAX_LINE_ENV})"
        )
    return data


def read_bounded_text(path: str | os.PathLike[str], limit: int | None = None) -> str:
    """The whole of the regular file ``path`` as UTF-8 text, at most ``limit`` bytes.

    Raises:
        RecordDecodeError: as :func:`read_bounded_bytes`, or not UTF-8 (naming the line).
    """
    p = os.fspath(path)
    return decode_utf8(read_bounded_bytes(p, limit), p)


def decode_utf8(data: bytes, path: str, lineno: int | None = None) -> str:
    """``data`` as UTF-8 text; ``lineno`` is its first line's number (None: count lines).

    Raises:
        RecordDecodeError: not UTF-8, naming the line.
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = (lineno or 1) + data.count(b"\n", 0, exc.start)
        raise RecordDecodeError(path, line, "not UTF-8 text") from None


def read_toml(path: str | os.PathLike[str], limit: int | None = None) -> dict[str, Any]:
    """Parse the TOML file ``path`` (read as :func:`read_bounded_text` does).

    Raises:
        RecordDecodeError: as :func:`read_bounded_text`, not valid TOML, or nested too
            deeply for the parser (naming the line where it gets too deep).
    """
    p = os.fspath(path)
    text = read_bounded_text(p, limit)
    if (line := _deep_dotted_key(text)) is not None:
        # tomllib takes time quadratic in a dotted key's length, then nests that deep.
        raise RecordDecodeError(p, line, f"{TOO_DEEP} (a dotted key of over {DEEP} parts)")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecordDecodeError(p, None, f"not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise RecordDecodeError(p, too_deep_line(text, toml=True), TOO_DEEP) from None


#: The problem a document nested deeper than its parser can follow is reported as.
TOO_DEEP = "nested too deeply to decode"
#: Depth past which :func:`too_deep_line` names a line (parsers give up a little further).
DEEP = 100

_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}\n]', re.DOTALL)
_TOML_TOKENS = re.compile(
    r'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*|[\[\]{}\n]',
    re.DOTALL,
)


_KEY = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
_DOTTED = re.compile(
    rf"""{_TOML_TOKENS.pattern}|(?P<chain>(?:{_KEY}[ \t]*\.[ \t]*){{{DEEP},}}{_KEY})""",
    re.DOTALL,
)


def _deep_dotted_key(text: str) -> int | None:
    """The line of the first dotted key (``a.b.c``) of more than :data:`DEEP` parts."""
    for m in _DOTTED.finditer(text):
        if m.group("chain") is not None:
            return text.count("\n", 0, m.start()) + 1
    return None


def too_deep_line(text: str, *, toml: bool = False) -> int | None:
    """The line on which the JSON (or TOML) ``text`` first nests deeper than :data:`DEEP`
    arrays and objects, strings and comments aside; None if it never does."""
    depth, line = 0, 1
    for m in (_TOML_TOKENS if toml else _JSON_TOKENS).finditer(text):
        tok = m.group()
        if tok in "[{":
            depth += 1
            if depth > DEEP:
                return line
        elif tok in "]}":
            depth -= 1
        else:  # a newline, or a string or comment that may span lines
            line += tok.count("\n")
    return None


@contextmanager
def replaced(
    path: str | os.PathLike[str], *, fsync: bool = False, parents: bool = False
) -> Iterator[BinaryIO]:
    """A file to write ``path`` through: renamed over it once the block ends (see the
    module docstring); ``fsync``: synced before the rename; ``parents``: missing folders
    made first. On an exception nothing is replaced and the partial file is removed.

    Raises:
        OSError: the file cannot be written (naming ``path``, not the partial file).
        ConfigError: a URL with credentials, or one naming a prefix.
    """
    if is_remote(path):
        with _uploaded(os.fspath(path), fsync=fsync) as f:
            yield f
        return
    target = os.path.realpath(local_path(path) or path)
    if os.path.exists(target) and not os.path.isfile(target):
        try:
            with open(target, "wb") as f:
                yield f
        except OSError as exc:  # /dev/full, a FIFO whose reader left
            raise _naming(exc, path) from None
        return
    folder, name = os.path.split(target)
    if parents:
        os.makedirs(folder, exist_ok=True)
    _remove_stale_partials(folder, name)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    try:
        try:
            f = open(tmp, "wb")  # noqa: SIM115  # closed below, before the rename
        except OSError as exc:
            raise _naming(exc, path) from None
        try:
            with f:
                yield f
                if fsync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, target)
        except OSError as exc:  # a full disk, an I/O error: say which output it was
            raise _naming(exc, path) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def check_output(path: str | os.PathLike[str]) -> None:
    """Say now what would stop :func:`replaced` from writing the URL ``path`` at the end:
    credentials in it, a prefix instead of an object, its storage library missing. A
    local path is left to ``replaced``.

    Raises:
        ConfigError: as :func:`replaced`.
        ModuleNotFoundError: the URL's storage library (the extra ``cloud``) is missing.
    """
    if not is_remote(path):
        return
    url = check_url(os.fspath(path))
    if url.endswith("/"):
        raise ConfigError(f"{display(url)}: names a prefix, not an object: give the name to write")
    from litmus_sandbox._store.remote import resolve

    resolve(url)


@contextmanager
def _uploaded(url: str, *, fsync: bool) -> Iterator[BinaryIO]:
    """:func:`replaced` for a URL: the output is written to a local temporary file, then
    uploaded whole (``remote.upload``) once the block ends; on an exception, or a kill,
    nothing is uploaded, so no object, whole or partial, appears under the URL."""
    check_output(url)
    from litmus_sandbox._store.remote import upload

    folder = os.path.join(tempfile.gettempdir(), f"litmus-sandbox-uploads-{os.getuid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    _remove_dead_uploads(folder)
    fd, tmp = tempfile.mkstemp(prefix=f"{os.getpid()}-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        upload(tmp, url)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _remove_dead_uploads(folder: str) -> None:
    """Remove the temporary files of uploads whose writer was killed (``PID-*.tmp``)."""
    with contextlib.suppress(OSError):
        for entry in os.listdir(folder):
            pid = entry.partition("-")[0]
            if not (entry.endswith(".tmp") and pid.isdigit()) or int(pid) == os.getpid():
                continue  # not one of ours, or this process's (another output being written)
            if not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, entry))


def _naming(exc: OSError, path: str | os.PathLike[str]) -> OSError:
    """``exc`` naming the output ``path`` (not the partial file beside it)."""
    if exc.errno is None:
        return exc
    return OSError(exc.errno, f"cannot write: {exc.strerror}", os.fspath(path))


_PARTIAL = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.tmp")


def _remove_stale_partials(folder: str, name: str) -> None:
    """Remove the partial files of ``name`` that a killed writer left in ``folder``
    (``.NAME.PID.tmp`` whose process is gone); a live writer's is left alone."""
    try:
        entries = os.listdir(folder or ".")
    except OSError:
        return
    for entry in entries:
        m = _PARTIAL.fullmatch(entry)
        if m is None or m.group("name") != name or _alive(int(m.group("pid"))):
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(folder, entry))


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # ours from before (a pid reused): never a writer that still runs
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process (or not a pid we can ask about): leave it
    return True

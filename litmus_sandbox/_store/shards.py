"""Shards: the episode stream each recorder writes of its own into a shared folder or
prefix, and the local spool that stands in for a prefix of an object store.

Theory of operation
-------------------
Many recorders (processes, machines) record one suite into one folder or prefix without
coordinating: each writes a shard of its own, under a name no other can take::

    <folder or prefix>/<UTC start>-<host>-<pid>-<random>.episodes.jsonl
    e.g. runs/20250107T093000Z-worker-3-41876-9f2c1a7b04de.episodes.jsonl

(the start as ``YYYYmmddTHHMMSSZ``; the host name cut to letters, digits, ``.`` and ``-``;
12 random hex digits). Names sort by start time: the order a set is read in. A suite is
the set; ``score``, ``gate`` and the other commands take the folder or prefix itself.

:func:`shard_target` reads where ``Sandbox(episodes=...)`` points:

=================================  ======================================================
a file path                        appended to, as always (one writer)
a folder (existing, or ending      a new shard in it, appended to as it is recorded: a
with ``/``; ``file://`` too)       local shard is crash-safe as it is written
an object store's URL              a prefix. The shard is written to a local *spool*
(``s3://bucket/runs``)             file and uploaded whole when the sandbox closes
=================================  ======================================================

The spool is ``$LITMUS_SPOOL``, else ``$XDG_CACHE_HOME/litmus-sandbox/spool`` (or
``~/.cache/...``): one folder per destination (a hash of its URL), whose ``destination``
file names it. A recorder holds an exclusive lock (``flock``) on its spool shard while it
records; the lock ends with the process, however it ends. A sandbox that opens for a
destination first uploads every shard of that destination's spool whose lock it can take
(the shards of recorders that died: killed, crashed, a machine restarted), as they are:
whole episodes read whole, the one being written reads as incomplete (no ``end`` record;
a torn last line is a read warning). Then it removes them. Nothing recorded is lost, and
nothing is uploaded under two names: a shard keeps its name from the spool to the store.
A shard that holds nothing is removed, never uploaded.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import secrets
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from litmus_sandbox._model.errors import ConfigError, UpstreamError
from litmus_sandbox._store.locations import SUFFIX, check_url, display, is_remote, local_path

__all__ = ["SPOOL_ENV", "ShardTarget", "shard_name", "shard_target", "spool_root"]

#: Environment variable naming the spool folder (default: under the user's cache folder).
SPOOL_ENV = "LITMUS_SPOOL"
_SUFFIX = SUFFIX["episodes"]
_HOST = re.compile(r"[^A-Za-z0-9.-]+")


def shard_name(now: float | None = None) -> str:
    """A new shard's name (see the module docstring): never the same twice."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    host = _HOST.sub("-", socket.gethostname()).strip(".-")[:63] or "host"
    return f"{stamp}-{host}-{os.getpid()}-{secrets.token_hex(6)}{_SUFFIX}"


def spool_root() -> Path:
    """``$LITMUS_SPOOL``, else ``$XDG_CACHE_HOME/litmus-sandbox/spool`` (``~/.cache``)."""
    if env := os.environ.get(SPOOL_ENV):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "litmus-sandbox" / "spool"


@dataclass
class ShardTarget:
    """Where a sandbox's episodes go (see :func:`shard_target`).

    ``path`` is the local file the episode stream appends to; ``destination`` the folder
    or prefix it is a shard of (None: a plain file), ``url`` its final name when it is
    uploaded (an object store's), else None.
    """

    path: Path
    destination: str | None = None
    url: str | None = None
    _lock: int | None = field(default=None, repr=False)
    _opened: bool = field(default=False, repr=False)

    @property
    def location(self) -> str:
        """Where the episodes end up: the shard's URL, or its path."""
        return self.url or str(self.path)

    def open(self) -> Path:
        """Start recording: a new shard's name on every opening but the first (a shard
        is never written again once finished), the spool's leftovers uploaded and the
        spool shard locked first for a prefix. The file to append to.

        Raises:
            UpstreamError: a dead recorder's shard could not be uploaded (it stays).
            ConfigError: the spool cannot be written.
        """
        if self.destination is None:
            return self.path
        if self._opened:  # a shard is finished with its sandbox's block: a new one
            self.path = self.path.with_name(shard_name())
        self._opened = True
        if self.url is None:
            return self.path
        self.url = _join(self.destination, self.path.name)
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "destination").write_text(self.destination + "\n")
        except OSError as exc:
            raise ConfigError(f"spool {str(folder)!r}: {exc.strerror or exc}") from None
        recover_spool(folder, self.destination)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new name: nobody else holds it
        self._lock = fd
        return self.path

    def finish(self) -> UpstreamError | None:
        """Recording ended (the stream is closed): upload the spool shard and remove it;
        remove a shard that holds nothing. The failure, if the upload failed (the shard
        then stays in the spool, for the next opening to upload)."""
        if self.destination is None:
            return None
        try:
            if not self.path.exists():
                return None
            if self.path.stat().st_size == 0:
                self.path.unlink()
            elif self.url is not None:
                _upload_and_remove(self.path, self.url)
        except OSError as exc:
            return UpstreamError(
                f"episodes not uploaded to {display(self.url or '')}: {exc.strerror or exc}; "
                f"kept in {self.path}, uploaded by the next sandbox writing there"
            )
        finally:
            if self._lock is not None:
                os.close(self._lock)  # the lock goes with it
                self._lock = None
        return None


def shard_target(episodes: str | os.PathLike[str]) -> ShardTarget:
    """Where ``Sandbox(episodes=...)`` records (see the module docstring).

    Raises:
        ConfigError: a URL with credentials, or one naming an object (``*.jsonl``): an
            object cannot be appended to.
    """
    given = os.fspath(episodes)
    if is_remote(given):
        prefix = check_url(given).rstrip("/")
        if prefix.endswith(".jsonl"):
            raise ConfigError(
                f"episodes {display(given)!r}: an object cannot be appended to; give a prefix "
                "(each sandbox writes its own shard under it)"
            )
        folder = spool_root() / hashlib.sha256(prefix.encode()).hexdigest()[:16]
        name = shard_name()
        return ShardTarget(folder / name, destination=prefix, url=_join(prefix, name))
    local = local_path(given) or given
    if os.path.isdir(local) or local.endswith(("/", os.sep)):
        return ShardTarget(Path(local) / shard_name(), destination=local)
    return ShardTarget(Path(local))


def _join(prefix: str, name: str) -> str:
    return f"{prefix.rstrip('/')}/{name}"


def recover_spool(folder: Path, destination: str) -> list[str]:
    """Upload (then remove) the shards in ``folder`` that no live recorder holds; the
    URLs uploaded to.

    Raises:
        UpstreamError: one could not be uploaded (it stays in the spool).
    """
    done = []
    for path in sorted(folder.glob(f"*{_SUFFIX}")):
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue  # uploaded by another recorder since it was listed
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live recorder's
            with contextlib.suppress(OSError):
                if os.stat(path).st_ino != os.fstat(fd).st_ino:
                    continue  # removed and made again since it was opened
            if os.fstat(fd).st_size == 0:
                path.unlink(missing_ok=True)
                continue
            url = _join(destination, path.name)
            try:
                _upload_and_remove(path, url)
            except OSError as exc:
                raise UpstreamError(
                    f"the episodes a stopped recorder left in {path} could not be uploaded "
                    f"to {display(url)}: {exc.strerror or exc}"
                ) from None
            done.append(url)
        finally:
            os.close(fd)
    return done


def _upload_and_remove(path: Path, url: str) -> None:
    from litmus_sandbox._store.remote import upload

    upload(str(path), url)
    path.unlink(missing_ok=True)

"""Streams in object stores, through fsspec (the extra ``cloud``: fsspec and s3fs).

Theory of operation
-------------------
Only the store layer imports fsspec, and only this module of it: ``locations.py`` and
``files.py`` import it when a location is a URL, so a command that reads local files never
loads it, and without the extra a URL is the one line that names ``cloud``.

* **Reading** (:func:`open_remote`): an object is opened for ranged reads of
  :data:`BLOCK` bytes (read ahead one block at a time) under a standard buffered reader,
  so the readers' capped ``readline`` and block ``read`` work as on a local file and
  memory stays bounded by the block, whatever the object's size. A failure of the storage
  library while reading is an ``OSError`` naming the URL.
* **Writing** (:func:`upload`): a finished local file is put at its URL by one operation
  that succeeds only whole: a single PUT, or a multipart upload completed once every part
  is in (s3fs aborts it on an error; one cut short by a kill is never completed, so never
  listed). An object appears under its name only when complete. ``files.replaced`` writes
  an output to a local temporary file first, then uploads it.
* **Listing** (:func:`expand_remote`): the objects under a prefix, or matching a glob,
  with their sizes. Listings are never served from fsspec's cache: other machines write.

Credentials are the storage library's own business (the environment: ``AWS_*``), never a
parameter here; the messages of its errors are shown with any credential value of the
environment masked.
"""

from __future__ import annotations

import errno
import io
import os
from typing import Any, BinaryIO

from fsspec.core import url_to_fs
from fsspec.spec import AbstractFileSystem

from litmus_sandbox._model.errors import ConfigError, RecordDecodeError
from litmus_sandbox._store.locations import Shard, display, has_magic

__all__ = ["BLOCK", "expand_remote", "open_remote", "remove", "resolve", "upload"]

#: Bytes asked of the store at a time when reading (and read ahead once).
BLOCK = 2 * 1024 * 1024
#: The part size of a multipart upload (s3fs reads two parts into memory at most).
PART = 8 * 1024 * 1024
#: Environment variables whose values never appear in a message.
_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")
#: The storage library each protocol needs, when fsspec says it is missing.
_S3 = ("s3", "s3a")


def _fs(url: str) -> tuple[AbstractFileSystem, str]:
    """The filesystem of ``url`` and the path inside it.

    Raises:
        ModuleNotFoundError: ``s3://`` without s3fs (the extra ``cloud``).
        ConfigError: an unknown protocol, or one whose library is not installed.
    """
    try:
        fs, path = url_to_fs(url)
    except ImportError as exc:
        proto = url.partition("://")[0].lower()
        if proto in _S3:
            raise ModuleNotFoundError(f"No module named 's3fs' ({exc})", name="s3fs") from None
        raise ConfigError(
            f"{display(url)}: {proto}:// needs a library fsspec names: {exc}"
        ) from None
    except ValueError as exc:
        raise ConfigError(f"{display(url)}: {_clean(exc)}") from None
    return fs, path


def resolve(url: str) -> None:
    """Check that ``url``'s filesystem can be had (its library installed, its protocol
    known), before anything is written for it.

    Raises:
        ModuleNotFoundError, ConfigError: as :func:`_fs`.
    """
    _fs(url)


def _clean(exc: BaseException) -> str:
    """The message of a storage library's error, with credential values masked."""
    text = str(exc) or type(exc).__name__
    for name in _SECRET_ENV:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return " ".join(text.split())[:500]


def _problem(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such object"
    if isinstance(exc, IsADirectoryError):
        return "not a regular file (a prefix: give it to a command that reads sets)"
    if isinstance(exc, PermissionError):
        return f"access denied ({_clean(exc)})"
    return f"{type(exc).__name__}: {_clean(exc)}"


class _Raw(io.RawIOBase):
    """An fsspec file as a raw stream, its errors as ``OSError`` naming the URL."""

    def __init__(self, f: Any, url: str) -> None:
        self._f = f
        self._url = url

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        try:
            n: int = self._f.readinto(b)
        except Exception as exc:
            raise OSError(errno.EIO, f"read failed: {_problem(exc)}", display(self._url)) from None
        return n

    def close(self) -> None:
        try:
            self._f.close()
        finally:
            super().close()


def open_remote(url: str) -> BinaryIO:
    """Open the object at ``url`` for reading, a block at a time (see the module
    docstring). The caller closes what it gets.

    Raises:
        RecordDecodeError: the object cannot be opened (missing, a prefix, denied,
            unreachable), naming the URL.
        ModuleNotFoundError, ConfigError: as :func:`_fs`.
    """
    fs, path = _fs(url)
    try:
        fs.invalidate_cache(path)
        f = fs.open(path, "rb", block_size=BLOCK, cache_type="readahead")
    except Exception as exc:
        raise RecordDecodeError(display(url), None, f"cannot open: {_problem(exc)}") from None
    return io.BufferedReader(_Raw(f, url), buffer_size=256 * 1024)


def upload(local: str, url: str) -> None:
    """Put the finished file ``local`` at ``url``, whole or not at all.

    Raises:
        OSError: the upload failed (naming the URL); nothing is under its name.
    """
    fs, path = _fs(url)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    options: dict[str, Any] = {"chunksize": PART} if protocol in _S3 else {}
    try:
        fs.put_file(local, path, **options)
    except Exception as exc:
        raise OSError(errno.EIO, f"cannot write: {_problem(exc)}", display(url)) from None


def remove(url: str) -> None:
    """Remove the object at ``url`` (nothing if it is not there).

    Raises:
        OSError: it could not be removed.
    """
    fs, path = _fs(url)
    try:
        fs.rm_file(path)
    except FileNotFoundError:
        return
    except Exception as exc:
        raise OSError(errno.EIO, f"cannot remove: {_problem(exc)}", display(url)) from None


def expand_remote(url: str, suffix: str) -> list[Shard] | None:
    """The objects ``url`` names as a set (a glob, a URL ending with ``/``, a prefix with
    objects under it): for a folder, those named ``*SUFFIX``; None for a single object or
    one that is not there.

    Raises:
        RecordDecodeError: the store cannot be listed (denied, unreachable).
    """
    fs, path = _fs(url)
    try:
        fs.invalidate_cache()
        if has_magic(path):
            out: list[Shard] = []
            for name, info in sorted(fs.glob(path, detail=True).items()):
                if info.get("type") == "directory":
                    out.extend(_under(fs, name, suffix))
                elif not _hidden(name):
                    out.append(Shard(fs.unstrip_protocol(name), info.get("size")))
            return out
        if not url.endswith("/"):
            try:
                info = fs.info(path)
            except FileNotFoundError:
                return None
            if info.get("type") != "directory":
                return None
        return _under(fs, path, suffix)
    except (RecordDecodeError, ConfigError):
        raise
    except Exception as exc:
        raise RecordDecodeError(display(url), None, f"cannot list: {_problem(exc)}") from None


def _under(fs: AbstractFileSystem, path: str, suffix: str) -> list[Shard]:
    found = fs.find(path, detail=True)
    return [
        Shard(fs.unstrip_protocol(name), info.get("size"))
        for name, info in sorted(found.items())
        if name.endswith(suffix) and not _hidden(name[len(path) :])
    ]


def _hidden(name: str) -> bool:
    return any(part.startswith(".") for part in name.split("/"))

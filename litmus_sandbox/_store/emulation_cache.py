"""Emulated results beside the step verdicts: the same store, its own table (or keys).

Theory of operation
-------------------
A tool in ``emulate`` mode is answered by a model (``_core/emulation.py``). So that a
re-run with the same emulator sees the same results, each good answer is kept by
:data:`~litmus_sandbox._core.emulation.EmulationKey` - (emulator fingerprint, tool,
arguments hash, context hash) - in the step-verdict cache the scorer uses, whichever
store it is (``step_cache.open_cache``; both stores implement :class:`EmulationCache`):

* SQLite: the table ``emulated_results`` beside ``step_verdicts``, one row per key, the
  answer as JSON (:class:`~litmus_sandbox._core.emulation.EmulationAnswer`);
* Redis: the string ``litmus-sandbox:emulation:["FP","TOOL","ARGS","CONTEXT"]`` whose
  value is ``lse1:SHA256:ENTRY`` (format, checksum, the JSON of the key and the answer),
  as verdicts are kept there.

Only answers read whole are stored (a failure never is); what does not read back whole,
by this format, for its own key, is a miss: the emulator is asked again. Never a wrong
result.
"""

from __future__ import annotations

import hashlib
from typing import Protocol, runtime_checkable

import msgspec

from litmus_sandbox._core.emulation import EmulationAnswer, EmulationKey

__all__ = [
    "EMULATION_TABLE",
    "EmulationCache",
    "decode_entry",
    "encode_entry",
]

#: The SQLite table (created with the verdict cache's own).
EMULATION_TABLE = """
CREATE TABLE IF NOT EXISTS emulated_results (
    emulator TEXT NOT NULL,
    tool TEXT NOT NULL,
    args TEXT NOT NULL,
    context TEXT NOT NULL,
    answer BLOB NOT NULL,
    PRIMARY KEY (emulator, tool, args, context)
) WITHOUT ROWID
"""
#: The Redis value format's version: a value of any other is never served.
FORMAT = b"lse1"


@runtime_checkable
class EmulationCache(Protocol):
    """Where emulated results are kept (both step-verdict caches are one)."""

    #: Where the cache is, for messages: a path, or a URL with any password masked.
    location: str

    def get_emulation(self, key: EmulationKey) -> EmulationAnswer | None:
        """The answer kept for ``key``, or None (never kept, or not kept whole)."""
        ...

    def put_emulation(self, key: EmulationKey, answer: EmulationAnswer) -> None:
        """Keep one answer."""
        ...

    def close(self) -> None: ...


class _Entry(msgspec.Struct, frozen=True, kw_only=True):
    key: tuple[str, str, str, str]
    answer: EmulationAnswer


_encode = msgspec.json.Encoder(order="deterministic").encode
_decode_entry = msgspec.json.Decoder(_Entry).decode
_decode_answer = msgspec.json.Decoder(EmulationAnswer).decode


def encode_answer(answer: EmulationAnswer) -> bytes:
    """An answer as the SQLite table keeps it."""
    return _encode(answer)


def decode_answer(raw: object) -> EmulationAnswer | None:
    """The answer in a SQLite row's value, or None when it does not read whole."""
    if not isinstance(raw, bytes):
        return None
    try:
        return _decode_answer(raw)
    except msgspec.DecodeError:
        return None


def encode_entry(key: EmulationKey, answer: EmulationAnswer) -> bytes:
    """A Redis value: ``lse1:SHA256:ENTRY``."""
    body = _encode(_Entry(key=key, answer=answer))
    return seal(FORMAT, body)


def seal(fmt: bytes, body: bytes) -> bytes:
    """A Redis value: ``FORMAT:sha256(body):body``, so a reader knows it whole."""
    return b"%s:%s:%s" % (fmt, hashlib.sha256(body).hexdigest().encode(), body)


def unseal(fmt: bytes, raw: object) -> bytes | None:
    """The body of a value :func:`seal` wrote in format ``fmt``; None for anything else
    (another format, a torn or altered value: a miss, never a guess)."""
    if not isinstance(raw, bytes):
        return None
    version, _, rest = raw.partition(b":")
    digest, sep, body = rest.partition(b":")
    if version != fmt or not sep or digest != hashlib.sha256(body).hexdigest().encode():
        return None
    return body


def decode_entry(key: EmulationKey, raw: object) -> EmulationAnswer | None:
    """The answer in a Redis value if it was written whole, by this format, for ``key``."""
    body = unseal(FORMAT, raw)
    if body is None:
        return None
    try:
        entry = _decode_entry(body)
    except msgspec.DecodeError:
        return None
    return entry.answer if entry.key == tuple(key) else None


def redis_key(prefix: str, key: EmulationKey) -> bytes:
    """The Redis key of ``key``'s answer."""
    return f"{prefix}:emulation:".encode() + _encode(key)

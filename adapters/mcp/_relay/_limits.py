"""Bounds on what a peer may send: a message's size and its nesting depth (sans-io).

A line longer than ``max_message_bytes`` is never held whole: the line reader
(``_fdstream.iter_lines``) stops buffering it and reports its size. Depth is checked
before a message is decoded: a count of brackets settles almost every message at C
speed; only one with more brackets than the limit is scanned, strings skipped.

A client message refused for its size or depth is still answered with its request id
when that can be found cheaply (:func:`request_id_of`): a scan of the message's top level
(of what was read of it, for one over the size limit) that skips strings, tracks depth
and takes ``"id": <number|string>`` at depth 1; the error goes with ``"id": null`` only
when the id cannot be found before the scan's bounds (the id after a huge or deep
``params``, or past :data:`ID_SCAN_TOKENS`).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

#: Bytes one JSON-RPC message may take (``--max-message-bytes``): 64 MiB, the HTTP
#: proxy's body limit too.
DEFAULT_MAX_MESSAGE_BYTES = 64 << 20
#: Arrays and objects one message may nest (tool arguments and schemas nest a few
#: levels; a peer that nests thousands is hostile, and would crash a recursive decoder).
DEFAULT_MAX_DEPTH = 128
#: Seconds a write may wait for a client that reads nothing when ``--timeout`` sets no
#: limit (past them the client is recorded as having stopped reading).
STALL_SECONDS_WITHOUT_LIMIT = 60.0

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
#: What the id scan reads: a whole string, an unterminated string's quote, a bracket.
_TOKEN = re.compile(rb'"(?:[^"\\]++|\\.)*+"|["\[\]{}]', re.DOTALL)
_SPACE = re.compile(rb"[ \t\r\n]*")
_COLON = re.compile(rb"[ \t\r\n]*:[ \t\r\n]*")
_ID_VALUE = re.compile(
    rb'(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|"(?:[^"\\]++|\\.)*+")'
    rb"[ \t\r\n]*[,}]",
    re.DOTALL,
)
#: Strings and brackets the id scan reads at most (about 15 ms of work in the worst case).
ID_SCAN_TOKENS = 1 << 13
#: Bytes of a message the id scan reads at most (of one over the size limit, the proxy
#: keeps no more than these).
ID_SCAN_BYTES = 1 << 20


def too_deep(data: bytes, limit: int) -> bool:
    """Whether the JSON text ``data`` nests arrays and objects deeper than ``limit``."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    skeleton = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    depth = 0
    for byte in skeleton:
        if byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def request_id_of(data: bytes, max_depth: int = DEFAULT_MAX_DEPTH) -> str | int | float | None:
    """The request id of the JSON-RPC message whose text is, or begins with, ``data``: the
    first ``"id"`` member of its top-level object whose value is a string or a number,
    found before the scan ends (a bracket deeper than ``max_depth``, the object's end,
    an unterminated string, :data:`ID_SCAN_TOKENS` or :data:`ID_SCAN_BYTES`). None when it cannot be found (or the
    id is not one JSON-RPC allows). Never raises, whatever ``data`` holds."""
    end = min(len(data), ID_SCAN_BYTES)
    space = _SPACE.match(data, 0, end)
    start = space.end() if space is not None else 0
    if data[start : start + 1] != b"{":
        return None  # not an object (a batch, junk): no one id to answer
    depth = 0
    for count, token in enumerate(_TOKEN.finditer(data, start, end)):
        if count >= ID_SCAN_TOKENS:
            return None
        text = token.group()
        first = text[0]
        if first == 0x22:  # "
            if len(text) == 1:
                return None  # the message (or what was read of it) ends inside a string
            if depth == 1 and _is_id(text):
                colon = _COLON.match(data, token.end(), end)
                if colon is not None:  # the key "id" (not a value "id")
                    value = _ID_VALUE.match(data, colon.end(), end)
                    return None if value is None else _id_value(value.group(1))
        elif first in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > max_depth:
                return None
        else:
            depth -= 1
            if depth <= 0:
                return None  # the top-level object ended without an id
    return None


def _is_id(text: bytes) -> bool:
    if text == b'"id"':
        return True
    if b"\\" not in text or len(text) > 32:
        return False
    try:
        return bool(json.loads(text) == "id")  # the key spelt with escapes
    except ValueError:
        return False


def _id_value(text: bytes) -> str | int | float | None:
    try:
        value: Any = json.loads(text)
    except ValueError:  # a bad escape or UTF-8, an integer too long to convert
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if isinstance(value, str | int | float) else None

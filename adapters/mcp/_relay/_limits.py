"""Bounds on what a peer may send: a message's size and its nesting depth (sans-io).

A line longer than ``max_message_bytes`` is never held whole: the line reader
(``_fdstream.iter_lines``) stops buffering it and reports its size. Depth is checked
before a message is decoded: a count of brackets settles almost every message at C
speed; only one with more brackets than the limit is scanned, strings skipped.
"""

from __future__ import annotations

import re

#: Bytes one JSON-RPC message may take (``--max-message-bytes``): 64 MiB, the HTTP
#: proxy's body limit too.
DEFAULT_MAX_MESSAGE_BYTES = 64 << 20
#: Arrays and objects one message may nest (tool arguments and schemas nest a few
#: levels; a peer that nests thousands is hostile, and would crash a recursive decoder).
DEFAULT_MAX_DEPTH = 128

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


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

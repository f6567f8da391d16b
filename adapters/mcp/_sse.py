"""Server-sent events, sans-io: split a byte stream into raw events without re-encoding.

The HTTP proxy forwards each event's bytes exactly as the server wrote them; it only
needs to know where one event ends (a blank line, with any of the three line endings
the SSE grammar allows) and what its ``data`` says.
"""

from __future__ import annotations

import re

_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)")
_EOL = re.compile(rb"[\r\n]")


class SseSplitter:
    """Feed bytes in, get whole raw events (each with its terminating blank line) out."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._event_start = 0  # where the event being read starts in _buf
        self._pos = 0  # how far _buf has been split into lines
        #: How far _buf is known to hold no line end (a long line is scanned once).
        self._scanned = 0

    def feed(self, data: bytes) -> list[bytes]:
        """Add bytes; return the events they complete, in order."""
        self._buf += data
        events: list[bytes] = []
        if _EOL.search(self._buf, max(self._pos, self._scanned)) is None:
            self._scanned = len(self._buf)  # still inside one line: nothing more to split
            return events
        while (m := _LINE.match(self._buf, self._pos)) is not None:
            end = m.end()
            if end == len(self._buf) and self._buf.endswith(b"\r"):
                break  # a lone CR may be the first half of CRLF: wait for the next byte
            line_is_blank = m.end() - m.start() <= 2 and m.group().strip(b"\r\n") == b""
            self._pos = end
            if line_is_blank:
                if self._pos - len(m.group()) > self._event_start:
                    events.append(bytes(self._buf[self._event_start : self._pos]))
                    self._event_start = self._pos
                else:
                    # A blank line with no event before it (keep-alive padding) belongs
                    # to the next event's bytes, so nothing is lost or reordered.
                    pass
        if self._event_start:
            del self._buf[: self._event_start]
            self._pos -= self._event_start
            self._event_start = 0
        self._scanned = self._pos  # a lone CR, or a line begun: scanned from there on
        return events

    def buffered(self) -> int:
        """How many bytes wait for their event's end (the one being read)."""
        return len(self._buf)

    def rest(self) -> bytes:
        """Bytes received after the last whole event (an unterminated one)."""
        return bytes(self._buf)


def event_data(event: bytes) -> bytes:
    """The event's ``data`` field: its ``data:`` lines joined by newlines."""
    parts = []
    for m in _LINE.finditer(event):
        line = m.group().rstrip(b"\r\n")
        if line.startswith(b"data:"):
            value = line[5:]
            parts.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(parts)


def encode_event(data: bytes) -> bytes:
    """An event the proxy originates (one JSON-RPC message on one line)."""
    return b"event: message\ndata: " + data + b"\n\n"

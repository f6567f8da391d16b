"""The server's answer to a relayed request: waiting for it, finding it, reading it.

A relayed request waits for its answer within a deadline, and a stop cuts the wait short
(``Waiting``; only waits for the server count, never writes to the client). On an event
stream the answer is one of the events, found as the stream is relayed event by event
(``EventWatch``, through gzip or deflate too). A body is read as the server sent it (``read_raw``), and a
``tools/list`` answer is looked up in a JSON or event-stream body (``listing_result``).
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx
import msgspec

from ._jsonrpc import Message, id_key, parse
from ._recording import decode_envelope
from ._relay import Relay
from ._relay._limits import DEFAULT_MAX_DEPTH, too_deep
from ._relay._states import Pending
from ._sse import SseSplitter, event_data

T = TypeVar("T")


async def read_raw(response: httpx.Response) -> bytes:
    """A response's body as the server sent it (still encoded)."""
    return b"".join([chunk async for chunk in response.aiter_raw()])


async def read_bounded(response: httpx.Response, limit: int) -> bytes:
    """A response's body as the server sent it, never more than ``limit`` bytes.

    Raises:
        Unanswered: the body is longer (``cut_off`` says so); it is not read further.
    """
    parts, size = [], 0
    async for chunk in response.aiter_raw():
        size += len(chunk)
        if size > limit:
            raise Unanswered(cut_off=f"the MCP server sent an answer over {limit} bytes: cut off")
        parts.append(chunk)
    return b"".join(parts)


def listing_result(body: bytes, content_type: str, request_id: Any) -> Any:
    """The ``result`` of the response to ``request_id`` in a relayed body (JSON or events;
    None for one nested deeper than a message may be)."""
    if too_deep(body, DEFAULT_MAX_DEPTH):
        return None
    if content_type.startswith("text/event-stream"):
        splitter = SseSplitter()
        for event in [*splitter.feed(body), splitter.rest()]:
            data = event_data(event)
            envelope = decode_envelope(data) if data else None
            if envelope is not None and id_key(envelope.get("id")) == id_key(request_id):
                return envelope.get("result")
        return None
    envelope = decode_envelope(body)
    return None if envelope is None else envelope.get("result")


def decoded(raw: bytes, encoding: str | None) -> bytes | None:
    """A relayed body as sent before its content encoding (the relay itself stays
    byte-exact: this copy is only read); None for an encoding not understood."""
    coding = (encoding or "identity").strip().lower()
    try:
        if coding == "identity":
            return raw
        if coding in ("gzip", "x-gzip"):
            return zlib.decompress(raw, wbits=31, bufsize=1 << 16)
        if coding == "deflate":
            try:
                return zlib.decompress(raw)
            except zlib.error:
                return zlib.decompress(raw, wbits=-15)  # raw deflate, as some servers send
    except zlib.error:
        return None
    return None


def answers(event: bytes, request_id: Any) -> bool:
    """Whether a server-sent event carries the response to ``request_id`` (alone, or in
    a batch of responses)."""
    data = event_data(event)
    if not data:
        return False
    if data.lstrip().startswith(b"["):
        try:
            batch = msgspec.json.decode(data)
        except (msgspec.DecodeError, RecursionError):
            return False
        return isinstance(batch, list) and any(
            isinstance(item, dict)
            and ("result" in item or "error" in item)
            and id_key(item.get("id")) == id_key(request_id)
            for item in batch
        )
    msg = parse(data)
    return msg.kind == "response" and id_key(msg.id) == id_key(request_id)


class Unanswered(Exception):
    """A relayed request's wait for the server ended (its deadline, a stop), or its
    answer cannot be relayed (``cut_off``: why the server was; ``invalid_utf8``)."""

    def __init__(
        self,
        *,
        cut_off: str | None = None,
        invalid_utf8: bool = False,
        reply: bytes | None = None,
    ) -> None:
        super().__init__(cut_off or "no answer")
        self.cut_off = cut_off
        self.invalid_utf8 = invalid_utf8
        #: The answer the relay core gave the client instead (its deadline passed).
        self.reply = reply


class Waiting:
    """A relayed request waiting for its answer. Only its waits for the server are
    bounded (by ``deadline``, or by the relay core: :meth:`expire`) and cut by a stop,
    never its writes to the client."""

    def __init__(
        self,
        deadline: float,
        url: str = "",
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        self.deadline = deadline
        #: Where the request went (a cancellation follows it there).
        self.url = url
        self.headers = headers or []
        self._scope: anyio.CancelScope | None = None
        self._stopped = False
        self._reply: bytes | None = None
        #: Set once the relay is over (the client has its answer, or an error).
        self.done = anyio.Event()

    def expire(self, reply: bytes) -> None:
        """The relay core gave up on the request: the client gets ``reply`` instead."""
        self._reply = reply
        self.stop()

    async def upstream(self, awaitable: Awaitable[T]) -> T:
        """``await awaitable``, within the deadline. Raises Unanswered past it or on stop."""
        with anyio.CancelScope(deadline=self.deadline) as scope:
            self._scope = scope
            if self._stopped:
                scope.cancel()
            try:
                return await awaitable
            finally:
                self._scope = None
        raise Unanswered(reply=self._reply)

    def stop(self) -> None:
        self._stopped = True
        if self._scope is not None:
            self._scope.cancel()


class EventWatch:
    """Splits an event stream into whole events as it is relayed (through gzip or
    deflate too: the events come out decoded), so that each is read whole before any of
    it is relayed."""

    def __init__(self, decode: Callable[[bytes], bytes], encoded: bool) -> None:
        self._decode = decode
        self._splitter = SseSplitter()
        #: Whether the stream is compressed (its events are relayed decoded).
        self.encoded = encoded

    @classmethod
    def of(cls, encoding: str) -> EventWatch | None:
        """For a stream sent with ``encoding`` (None: one this proxy cannot read)."""
        coding = encoding.strip().lower()
        if coding in ("identity", ""):
            return cls(lambda chunk: chunk, encoded=False)
        if coding in ("gzip", "x-gzip", "deflate"):
            inflate = zlib.decompressobj(wbits=47)  # gzip or zlib, by its header
            return cls(inflate.decompress, encoded=True)
        return None

    @property
    def buffered(self) -> int:
        """Bytes of the event being read (held until it ends)."""
        return self._splitter.buffered()

    def feed(self, chunk: bytes) -> list[bytes]:
        """The whole events ``chunk`` completes, decoded, in order.

        Raises:
            zlib.error: the stream cannot be decoded after all.
        """
        return self._splitter.feed(self._decode(chunk))


#: Response headers an event stream relayed event by event drops: its length may change
#: (cut off, or the proxy's error after it), and a compressed one goes decoded.
LENGTH_HEADERS = frozenset({b"content-length"})
ENCODED_HEADERS = LENGTH_HEADERS | {b"content-encoding"}


@dataclass
class StreamWatch:
    """What a relayed stream is watched for: the answer to ``rid`` while ``wait`` is set
    (None once the client has it), and whose episode a cut-off aborts."""

    rid: Any
    wait: Waiting | None
    #: The relayed request's session key, core and pending request, if its core tracks it.
    tracked: tuple[str, Relay, Pending] | None
    headers: list[tuple[bytes, bytes]]
    msg: Message | None
    exchange_id: int

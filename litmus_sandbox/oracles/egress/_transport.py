"""In-process egress: httpx transports that decide, record and may replay each request.

Theory of operation
-------------------
:class:`EgressTransport` (async) and :class:`SyncEgressTransport` (sync) wrap any httpx
transport. Everything they decide lives in one core, :class:`Exchange`, made per
request; it never awaits and never reads a body itself:

1. ``Exchange(...)`` decides the request's host and port by the policy and opens its
   flow, carrying the call in flight (:data:`~._flow.current_call`); the sink is told
   before anything is connected;
2. refused (``deny``, ``stub``): the shell drains the request body into
   :meth:`Exchange.count` (what the tool tried to send counts), and
   :meth:`Exchange.canned` is the answer; nothing is connected;
3. with a cassette: the shell reads the body into memory (a served request never
   reaches a transport that would), and :meth:`Exchange.served` is the recorded (or
   replay-miss) response, or None to forward it;
4. forwarded: the shell sends the request (its body counted as it streams, unless
   :meth:`Exchange.sized` already knows its size); :meth:`Exchange.answered` gives the
   :class:`Tally` the response body updates as the tool reads it (its count, a
   recorder's tap); the flow closes with the response stream.

The shells do only what differs: ``async for`` or ``for``, ``await`` or not, and the
stream classes that wrap bodies (two small pairs over :class:`Tally`). Errors of the
inner transport reach the caller unchanged (they are the tool's own httpx errors); the
flow then records no status, and the error (``error``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import cast

import httpx

from litmus_sandbox._config.egress import DEFAULT_PORTS, EgressPolicy, denied_body
from litmus_sandbox.oracles.egress._flow import (
    EgressFlow,
    EgressSink,
    close_flow,
    current_call,
    ignore,
)
from litmus_sandbox.oracles.egress._replay import HttpCassette, HttpRecorder, Replaying, Tap

# ---------------------------------------------------------------- the decision core


class Exchange:
    """One request through an egress transport: decided and recorded, sans-io.

    Args:
        request: the tool's request.
        policy: decides its host and port.
        sink: told of the flow now, and again when it closes.
        replaying: the cassette to serve from and the recorder to record to, if any.
    """

    __slots__ = ("flow", "replaying", "request", "rule", "sink")

    def __init__(
        self, request: httpx.Request, policy: EgressPolicy, sink: EgressSink, replaying: Replaying
    ) -> None:
        url = request.url
        scheme = url.scheme
        port = url.port if url.port is not None else DEFAULT_PORTS.get(scheme)
        self.request, self.sink, self.replaying = request, sink, replaying
        self.rule = policy.decide(url.host, port)
        self.flow = EgressFlow(
            method=request.method,
            scheme=scheme,
            host=url.host,
            port=port,
            path=policy.redact_target(url.raw_path.decode("ascii", "replace")),
            decision=self.rule.mode,
            call_id=current_call.get(),
        )
        sink(self.flow)

    @property
    def refused(self) -> bool:
        """Denied or stubbed: answered by :meth:`canned`, nothing connected."""
        return self.rule.mode != "allow"

    @property
    def replays(self) -> bool:
        """Whether a cassette may serve the request (:meth:`served`, body in memory)."""
        return self.replaying.replay is not None

    def count(self, chunk: bytes) -> None:
        """A piece of the request body went by."""
        self.flow.request_bytes += len(chunk)

    def sized(self) -> bool:
        """Whether the request body is already in memory (then it is counted now)."""
        if isinstance(self.request.stream, httpx.ByteStream):
            self.flow.request_bytes = len(self.request.content)
            return True
        return False

    def canned(self) -> httpx.Response:
        """The response of a denied or stubbed request."""
        flow, rule = self.flow, self.rule
        if rule.mode == "deny":
            body = denied_body(flow.host, flow.port)
            status = 403
            headers = {"content-type": "text/plain; charset=utf-8", "x-litmus-sandbox": "denied"}
        else:
            body = rule.body.encode()
            status, headers = rule.status, dict(rule.headers)
        flow.status = status
        flow.response_bytes = len(body)
        return httpx.Response(status, headers=headers, content=body, request=self.request)

    def served(self) -> httpx.Response | None:
        """The replayed (or replay-miss) response, or None to forward the request; its
        body is in memory by now. A served request's flow closes here."""
        self.flow.request_bytes = len(self.request.content)
        response = self.replaying.serve(self.request, self.flow)
        if response is not None:
            self.close()
        return response

    def resend(self, stream: httpx.SyncByteStream | httpx.AsyncByteStream) -> httpx.Request:
        """The request to forward, its body read through ``stream`` (which counts it)."""
        request = self.request
        return httpx.Request(
            request.method,
            request.url,
            headers=request.headers,
            stream=stream,
            extensions=request.extensions,
        )

    def answered(self, response: httpx.Response) -> Tally | None:
        """Record the inner transport's response. None when its body was already in
        memory (mock transports: httpx will not read or close it again, so it is counted
        and recorded now, and the flow closes); else the tally its stream updates."""
        self.flow.status = response.status_code
        record = self.replaying.record
        if isinstance(response.stream, httpx.ByteStream):
            self.flow.response_bytes = len(response.content)
            self.replaying.in_memory(self.request, response)
            self.close()
            return None
        tap = record.tap(self.request, response) if record is not None else None
        return Tally(self.flow, self.sink, tap)

    def close(self) -> None:
        close_flow(self.flow, self.sink)

    def failed(self, exc: BaseException) -> None:
        """The inner transport raised ``exc`` (the tool sees it as is): the flow records
        why no response came, and closes."""
        if isinstance(exc, Exception):
            text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            self.flow.error = text[:300]
        close_flow(self.flow, self.sink)


class Tally:
    """What a response body updates as it streams through: the flow's byte count and a
    recorder's tap. The flow closes with the stream (which may be closed more than once)."""

    __slots__ = ("flow", "sink", "tap")

    def __init__(self, flow: EgressFlow, sink: EgressSink, tap: Tap | None) -> None:
        self.flow, self.sink, self.tap = flow, sink, tap

    def chunk(self, data: bytes) -> None:
        self.flow.response_bytes += len(data)
        if self.tap is not None:
            self.tap.feed(data)

    def ended(self) -> None:
        """The body was read to its end (a tap records it whole, not truncated)."""
        if self.tap is not None:
            self.tap.complete = True

    def closed(self) -> None:
        if self.tap is not None:
            self.tap.finish()
        close_flow(self.flow, self.sink)


# ---------------------------------------------------------------- the async shell


class _AsyncRequestBody(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, exchange: Exchange) -> None:
        self._inner, self._exchange = inner, exchange

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._exchange.count(chunk)
            yield chunk


class _AsyncResponseBody(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, tally: Tally) -> None:
        self._inner, self._tally = inner, tally

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._tally.chunk(chunk)
            yield chunk
        self._tally.ended()

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._tally.closed()


class EgressTransport(httpx.AsyncBaseTransport):
    """An httpx transport that records every request and applies the egress policy.

    ``allow`` forwards to ``transport``; ``deny`` answers 403 with a short body saying the
    sandbox denied it (no connection is made); ``stub`` answers the configured response.
    Response bodies stream through unbuffered; their bytes are counted as they are read,
    and the flow closes when the response stream closes. Errors of the inner transport
    reach the caller unchanged (they are the tool's own httpx errors); the flow records
    no status then.

    Args:
        policy: the egress policy (everything allowed when None).
        sink: receives each flow when it opens and when it closes.
        transport: the transport allowed requests go to (``httpx.AsyncHTTPTransport()``).
        replay: an egress cassette serving allowed requests by (method, URL); nothing
            is connected for a served request (decision ``replayed``).
        on_miss: a request the cassette cannot serve: ``error`` (a 502 with
            ``x-litmus-sandbox: replay-miss``, decision ``replay_miss``) or ``forward``
            (sent for real, and recorded when ``record`` is set).
        record: records each forwarded response, body included, to an egress cassette.

    Raises:
        ConfigError: an unknown ``on_miss``.
    """

    def __init__(
        self,
        policy: EgressPolicy | None = None,
        sink: EgressSink | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        replay: HttpCassette | None = None,
        on_miss: str = "error",
        record: HttpRecorder | None = None,
    ) -> None:
        self.policy = policy or EgressPolicy()
        self.sink = sink or ignore
        self._inner = transport if transport is not None else httpx.AsyncHTTPTransport()
        self._replaying = Replaying(replay, on_miss, record)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        ex = Exchange(request, self.policy, self.sink, self._replaying)
        if ex.refused:
            try:
                async for chunk in cast(httpx.AsyncByteStream, request.stream):
                    ex.count(chunk)
                return ex.canned()
            finally:
                ex.close()
        if ex.replays:
            if not ex.sized():
                request.stream = httpx.ByteStream(await request.aread())
            served = ex.served()
            if served is not None:
                return served
        if ex.sized():
            outgoing = request
        else:
            outgoing = ex.resend(_AsyncRequestBody(cast(httpx.AsyncByteStream, request.stream), ex))
        try:
            response = await self._inner.handle_async_request(outgoing)
        except BaseException as exc:
            ex.failed(exc)
            raise
        tally = ex.answered(response)
        if tally is not None:
            response.stream = _AsyncResponseBody(
                cast(httpx.AsyncByteStream, response.stream), tally
            )
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


# ---------------------------------------------------------------- the sync shell


class _SyncRequestBody(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, exchange: Exchange) -> None:
        self._inner, self._exchange = inner, exchange

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            self._exchange.count(chunk)
            yield chunk


class _SyncResponseBody(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, tally: Tally) -> None:
        self._inner, self._tally = inner, tally

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            self._tally.chunk(chunk)
            yield chunk
        self._tally.ended()

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._tally.closed()


class SyncEgressTransport(httpx.BaseTransport):
    """The sync twin of :class:`EgressTransport`, for tools that use ``httpx.Client``.

    The sink is then called from the tool's thread. ``replay``, ``on_miss`` and
    ``record`` work as in :class:`EgressTransport`.

    Raises:
        ConfigError: an unknown ``on_miss``.
    """

    def __init__(
        self,
        policy: EgressPolicy | None = None,
        sink: EgressSink | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        replay: HttpCassette | None = None,
        on_miss: str = "error",
        record: HttpRecorder | None = None,
    ) -> None:
        self.policy = policy or EgressPolicy()
        self.sink = sink or ignore
        self._inner = transport if transport is not None else httpx.HTTPTransport()
        self._replaying = Replaying(replay, on_miss, record)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        ex = Exchange(request, self.policy, self.sink, self._replaying)
        if ex.refused:
            try:
                for chunk in cast(httpx.SyncByteStream, request.stream):
                    ex.count(chunk)
                return ex.canned()
            finally:
                ex.close()
        if ex.replays:
            if not ex.sized():
                request.stream = httpx.ByteStream(request.read())
            served = ex.served()
            if served is not None:
                return served
        if ex.sized():
            outgoing = request
        else:
            outgoing = ex.resend(_SyncRequestBody(cast(httpx.SyncByteStream, request.stream), ex))
        try:
            response = self._inner.handle_request(outgoing)
        except BaseException as exc:
            ex.failed(exc)
            raise
        tally = ex.answered(response)
        if tally is not None:
            response.stream = _SyncResponseBody(cast(httpx.SyncByteStream, response.stream), tally)
        return response

    def close(self) -> None:
        self._inner.close()

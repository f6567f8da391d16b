"""The egress oracle: what the tools tried to reach on the network, whatever they told the agent.

Theory of operation
-------------------
An :class:`EgressPolicy` maps hosts (exact names or globs, optionally with a port) to a
decision: ``allow`` (forward), ``deny`` (answer 403, connect nothing) or ``stub`` (answer a
configured response, connect nothing). Deciding is a pure function of host and port.

Every request or tunnel in progress is an :class:`~._flow.EgressFlow` handed to a *sink*
(see ``_flow.py``). Two layers see traffic:

* in process, :class:`EgressTransport` (and its sync twin :class:`SyncEgressTransport`)
  wraps any httpx transport, so tools that take an ``httpx`` client are observed without
  leaving the process; it can also record response bodies to an egress cassette
  (``record=``) and serve allowed requests from one (``replay=``, see
  ``_replay.py``): served flows are recorded with decision ``replayed``, misses
  with ``replay_miss``;
* out of process, :class:`ForwardProxy` listens on loopback (and optionally a Unix socket)
  for subprocess tools pointed at it by :func:`proxy_env`; :func:`run_strict` runs a
  command in an empty network namespace whose only way out is that proxy.

:class:`EgressProbe` implements the sandbox's probe protocol over one sink. Attribution to
tool calls, and how it copes with concurrency:

1. ``before_call`` sets :data:`~._flow.current_call` (a contextvar) in the task that runs the tool;
   in-process flows carry the call id that was current when they started, so concurrent
   calls in separate tasks are told apart exactly (anyio copies the context into child
   tasks and worker threads).
2. Flows without a call id (everything the forward proxy sees, and in-process requests
   made outside any call's context) are attributed by time: to the one call whose window
   (``before_call`` .. ``after_call``) contains the flow's start. A flow that started while
   two or more calls were in flight is ambiguous: no call claims it, and it is reported by
   ``finish`` as unattributed.
3. A flow still open when its call ends (a response the tool left unread, a tunnel whose
   close the proxy has not seen yet) is reported with the bytes counted so far.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from litmus_sandbox._config.egress import DEFAULT_PORTS
from litmus_sandbox._config.egress import EGRESS_MODES as EGRESS_MODES
from litmus_sandbox._config.egress import EgressMode as EgressMode
from litmus_sandbox._config.egress import EgressPolicy as EgressPolicy
from litmus_sandbox._config.egress import EgressRule as EgressRule
from litmus_sandbox._config.egress import denied_body as denied_body
from litmus_sandbox._config.egress import normalize_host as normalize_host
from litmus_sandbox._config.egress import split_host_port as split_host_port
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.records import Effects
from litmus_sandbox.oracles.egress._flow import (
    EgressFlow,
    EgressSink,
    calling,
    close_flow,
    current_call,
    ignore,
)
from litmus_sandbox.oracles.egress._replay import (
    REPLAY_ON_MISS,
    HttpCassette,
    HttpExchange,
    HttpRecorder,
    Replaying,
    Tap,
)

#: Client options httpx applies to its default transport only.
_TRANSPORT_OPTIONS = ("verify", "cert", "http1", "http2", "limits", "trust_env")

# ---------------------------------------------------------------- in-process transports


class _Seen:
    """The request-side decision shared by the async and sync transports."""

    def __init__(self, request: httpx.Request, policy: EgressPolicy) -> None:
        url = request.url
        scheme = url.scheme
        port = url.port if url.port is not None else DEFAULT_PORTS.get(scheme)
        self.rule = policy.decide(url.host, port)
        self.flow = EgressFlow(
            method=request.method,
            scheme=scheme,
            host=url.host,
            port=port,
            path=url.raw_path.decode("ascii", "replace"),
            decision=self.rule.mode,
            call_id=current_call.get(),
        )

    def canned(self, request: httpx.Request) -> httpx.Response:
        """The response of a denied or stubbed request; nothing is connected."""
        flow, rule = self.flow, self.rule
        if rule.mode == "deny":
            body = denied_body(flow.host, flow.port)
            status, headers = 403, {"content-type": "text/plain; charset=utf-8"}
            headers["x-litmus-sandbox"] = "denied"
        else:
            body = rule.body.encode()
            status, headers = rule.status, dict(rule.headers)
        flow.status = status
        flow.response_bytes = len(body)
        return httpx.Response(status, headers=headers, content=body, request=request)


def _fixed_length(request: httpx.Request) -> int | None:
    """The body size when it is already in memory (no need to wrap the stream to count)."""
    if isinstance(request.stream, httpx.ByteStream):
        return len(request.content)
    return None


class _CountingAsyncRequest(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, flow: EgressFlow) -> None:
        self._inner, self._flow = inner, flow

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._flow.request_bytes += len(chunk)
            yield chunk


class _CountingAsyncResponse(httpx.AsyncByteStream):
    """Streams the body through, counting it (and feeding a recorder's tap); the flow
    closes with the stream."""

    def __init__(
        self,
        inner: httpx.AsyncByteStream,
        flow: EgressFlow,
        sink: EgressSink,
        tap: Tap | None = None,
    ) -> None:
        self._inner, self._flow, self._sink, self._tap = inner, flow, sink, tap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._flow.response_bytes += len(chunk)
            if self._tap is not None:
                self._tap.feed(chunk)
            yield chunk
        if self._tap is not None:
            self._tap.complete = True

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            if self._tap is not None:
                self._tap.finish()
            close_flow(self._flow, self._sink)


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
        seen = _Seen(request, self.policy)
        flow, sink = seen.flow, self.sink
        sink(flow)
        if seen.rule.mode != "allow":
            try:
                # What the tool tried to send counts, even though it went nowhere.
                async for chunk in request.stream:  # type: ignore[union-attr]
                    flow.request_bytes += len(chunk)
                return seen.canned(request)
            finally:
                close_flow(flow, sink)
        replaying = self._replaying
        if replaying.replay is not None:
            size = _fixed_length(request)
            if size is not None:
                flow.request_bytes = size
            else:
                # Read the body here: a served request never reaches a transport that would.
                request.stream = httpx.ByteStream(await request.aread())
                flow.request_bytes = len(request.content)
            served = replaying.serve(request, flow)
            if served is not None:
                close_flow(flow, sink)
                return served
        size = _fixed_length(request)
        if size is not None:
            flow.request_bytes = size
            outgoing = request
        else:
            outgoing = httpx.Request(
                request.method,
                request.url,
                headers=request.headers,
                stream=_CountingAsyncRequest(request.stream, flow),  # type: ignore[arg-type]
                extensions=request.extensions,
            )
        try:
            response = await self._inner.handle_async_request(outgoing)
        except BaseException:
            close_flow(flow, sink)
            raise
        flow.status = response.status_code
        if isinstance(response.stream, httpx.ByteStream):
            # An in-memory body (mock transports) was read when the response was built:
            # httpx will not iterate or close its stream again, so count it now.
            flow.response_bytes = len(response.content)
            replaying.in_memory(request, response)
            close_flow(flow, sink)
            return response
        tap = replaying.record.tap(request, response) if replaying.record is not None else None
        response.stream = _CountingAsyncResponse(response.stream, flow, sink, tap)  # type: ignore[arg-type]
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CountingSyncRequest(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, flow: EgressFlow) -> None:
        self._inner, self._flow = inner, flow

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            self._flow.request_bytes += len(chunk)
            yield chunk


class _CountingSyncResponse(httpx.SyncByteStream):
    def __init__(
        self,
        inner: httpx.SyncByteStream,
        flow: EgressFlow,
        sink: EgressSink,
        tap: Tap | None = None,
    ) -> None:
        self._inner, self._flow, self._sink, self._tap = inner, flow, sink, tap

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            self._flow.response_bytes += len(chunk)
            if self._tap is not None:
                self._tap.feed(chunk)
            yield chunk
        if self._tap is not None:
            self._tap.complete = True

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            if self._tap is not None:
                self._tap.finish()
            close_flow(self._flow, self._sink)


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
        seen = _Seen(request, self.policy)
        flow, sink = seen.flow, self.sink
        sink(flow)
        if seen.rule.mode != "allow":
            try:
                for chunk in request.stream:  # type: ignore[union-attr]
                    flow.request_bytes += len(chunk)
                return seen.canned(request)
            finally:
                close_flow(flow, sink)
        replaying = self._replaying
        if replaying.replay is not None:
            size = _fixed_length(request)
            if size is not None:
                flow.request_bytes = size
            else:
                request.stream = httpx.ByteStream(request.read())
                flow.request_bytes = len(request.content)
            served = replaying.serve(request, flow)
            if served is not None:
                close_flow(flow, sink)
                return served
        size = _fixed_length(request)
        if size is not None:
            flow.request_bytes = size
            outgoing = request
        else:
            outgoing = httpx.Request(
                request.method,
                request.url,
                headers=request.headers,
                stream=_CountingSyncRequest(request.stream, flow),  # type: ignore[arg-type]
                extensions=request.extensions,
            )
        try:
            response = self._inner.handle_request(outgoing)
        except BaseException:
            close_flow(flow, sink)
            raise
        flow.status = response.status_code
        if isinstance(response.stream, httpx.ByteStream):
            # An in-memory body (mock transports) was read when the response was built:
            # httpx will not iterate or close its stream again, so count it now.
            flow.response_bytes = len(response.content)
            replaying.in_memory(request, response)
            close_flow(flow, sink)
            return response
        tap = replaying.record.tap(request, response) if replaying.record is not None else None
        response.stream = _CountingSyncResponse(response.stream, flow, sink, tap)  # type: ignore[arg-type]
        return response

    def close(self) -> None:
        self._inner.close()


# ---------------------------------------------------------------- the probe


class EgressProbe:
    """The egress side-effect probe (``name = "egress"``): one sink, many observers.

    Hand tools an observed client (:meth:`client`, :meth:`transport`,
    :meth:`sync_transport`) and/or start a :class:`ForwardProxy` with this probe's policy
    and sink (``ForwardProxy(probe.policy, probe.sink)``). See the module docstring for
    how flows are attributed to calls, concurrent ones included.

    Args:
        policy: the egress policy (everything allowed when None).
        replay: an egress cassette its in-process transports serve from (the forward
            proxy for subprocesses does not replay).
        on_miss: ``error`` or ``forward`` (see :class:`EgressTransport`).
        record: records the responses its in-process transports forward.

    Raises:
        ConfigError: an unknown ``on_miss``.
    """

    name = "egress"
    #: Flows carry their call's id, or are attributed by time window only when one call
    #: alone was in flight (ambiguous ones stay unattributed): overlapping calls are told
    #: apart here, so the sandbox keeps what this probe attributes.
    exact_attribution = True

    def __init__(
        self,
        policy: EgressPolicy | None = None,
        *,
        replay: HttpCassette | None = None,
        on_miss: str = "error",
        record: HttpRecorder | None = None,
    ) -> None:
        self.policy = policy or EgressPolicy()
        Replaying(replay, on_miss, record)  # validates on_miss now, not at first use
        self.replay, self.on_miss, self.record = replay, on_miss, record
        self._lock = threading.Lock()
        self._flows: list[EgressFlow] = []
        self._windows: dict[str, list[float]] = {}  # call id -> [start, end or +inf]
        self._tokens: dict[str, contextvars.Token[str | None]] = {}

    # -- sink and observers

    def sink(self, flow: EgressFlow) -> None:
        """Receives flows from transports and proxies (from any thread)."""
        # Flows are tracked from their opening; the closing call needs nothing more, as
        # the probe reads the flow's counters when it reports it.
        if not flow.done:
            with self._lock:
                self._flows.append(flow)

    def transport(self, inner: httpx.AsyncBaseTransport | None = None) -> EgressTransport:
        """An async transport that reports to this probe."""
        return EgressTransport(
            self.policy,
            self.sink,
            transport=inner,
            replay=self.replay,
            on_miss=self.on_miss,
            record=self.record,
        )

    def sync_transport(self, inner: httpx.BaseTransport | None = None) -> SyncEgressTransport:
        """A sync transport that reports to this probe."""
        return SyncEgressTransport(
            self.policy,
            self.sink,
            transport=inner,
            replay=self.replay,
            on_miss=self.on_miss,
            record=self.record,
        )

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        """An ``httpx.AsyncClient`` whose traffic this probe sees (``transport=`` is wrapped).

        Connection options httpx gives only its own default transport (``verify``,
        ``cert``, ``http1``, ``http2``, ``limits``, ``trust_env``) apply to the transport
        this client sends through, as they would without the probe.
        """
        if "proxy" in kwargs or "mounts" in kwargs:
            # httpx would send through transports of its own, past this probe's policy.
            raise ConfigError(
                "an observed client sends through the egress transport: proxy= and mounts= "
                "would bypass it (wrap your own transport with transport= instead)"
            )
        inner = kwargs.pop("transport", None)
        if inner is None:
            options = {k: kwargs[k] for k in _TRANSPORT_OPTIONS if k in kwargs}
            if options:
                inner = httpx.AsyncHTTPTransport(**options)
        return httpx.AsyncClient(transport=self.transport(inner), **kwargs)

    def describe(self) -> dict[str, Any]:
        """What this probe enforces, for the episode header's ``oracles``."""
        out: dict[str, Any] = {"policy": self.policy.describe()}
        if self.replay is not None:
            out["replay"] = {"on_miss": self.on_miss}
        if self.record is not None:
            out["record"] = str(self.record.path)
        return out

    # -- the probe protocol

    async def start(self) -> None:
        with self._lock:
            self._flows.clear()
            self._windows.clear()

    async def before_call(self, call_id: str) -> None:
        """Open the call's window; set :data:`current_call` in the calling task's context.

        Call it from the task that will run the tool (the sandbox does): a contextvar set
        here is seen by that task, the tasks it starts and the worker threads it uses.
        """
        self.open_window(call_id)
        self._tokens[call_id] = current_call.set(call_id)

    async def after_call(self, call_id: str) -> Effects:
        """The flows of this call: those carrying its id, and those (without an id) that
        started in its window while no other call was in flight."""
        token = self._tokens.pop(call_id, None)
        if token is not None:
            try:
                current_call.reset(token)
            except ValueError:  # after_call ran in another context than before_call
                current_call.set(None)
        return self.close_window(call_id)

    def open_window(self, call_id: str) -> None:
        """Open the call's time window (no context set: for calls run out of process)."""
        with self._lock:
            self._windows[call_id] = [time.monotonic(), float("inf")]

    def close_window(self, call_id: str) -> Effects:
        """Close the call's window: the flows carrying its id or started in it alone."""
        end = time.monotonic()
        with self._lock:
            window = self._windows.setdefault(call_id, [end, end])
            window[1] = end
            mine: list[EgressFlow] = []
            rest: list[EgressFlow] = []
            for flow in self._flows:
                (mine if self._belongs(flow, call_id, window) else rest).append(flow)
            self._flows = rest
        mine.sort(key=lambda f: f.started)
        return Effects(egress=tuple(f.event() for f in mine))

    def _claimable(self, flow: EgressFlow) -> bool:
        """Whether a call still in flight may yet claim ``flow`` (caller holds the lock)."""
        if flow.call_id is not None:
            return flow.call_id in self._windows and self._windows[flow.call_id][1] == float("inf")
        return any(w[1] == float("inf") and w[0] <= flow.started for w in self._windows.values())

    def _belongs(self, flow: EgressFlow, call_id: str, window: list[float]) -> bool:
        if flow.call_id is not None:
            return flow.call_id == call_id
        t = flow.started
        if not window[0] <= t <= window[1]:
            return False
        # Ambiguous when another call's window also covers the start: leave it unattributed.
        return not any(other != call_id and w[0] <= t <= w[1] for other, w in self._windows.items())

    async def finish(self) -> Effects:
        """Flows no call claimed: outside every window, ambiguous, or late. Flows a call
        still in flight may claim stay (it may belong to another episode)."""
        with self._lock:
            flows: list[EgressFlow] = []
            kept: list[EgressFlow] = []
            for flow in self._flows:
                (kept if self._claimable(flow) else flows).append(flow)
            self._flows = kept
        flows.sort(key=lambda f: f.started)
        return Effects(egress=tuple(f.event() for f in flows))

    async def close(self) -> None:
        with self._lock:
            self._flows.clear()
            self._windows.clear()
        self._tokens.clear()
        if self.record is not None:
            self.record.close()


__all__ = [
    "EGRESS_MODES",
    "REPLAY_ON_MISS",
    "EgressFlow",
    "EgressMode",
    "EgressPolicy",
    "EgressProbe",
    "EgressRule",
    "EgressSink",
    "EgressTransport",
    "HttpCassette",
    "HttpExchange",
    "HttpRecorder",
    "SyncEgressTransport",
    "calling",
    "current_call",
    "denied_body",
    "normalize_host",
    "split_host_port",
]

"""Plain HTTP through the forward proxy: each absolute-form request decided, recorded, relayed.

Theory of operation
-------------------
For each request a client connection carries (``GET http://host:port/path HTTP/1.1``):

1. the target is split into host, port and origin-form path and decided by the policy;
   a flow opens and goes to the sink, before anything is connected;
2. ``deny`` and ``stub`` answer the canned response once the body is read (what the tool
   tried to send counts); a client waiting for ``100 Continue`` with a body is answered
   at once, and the connection closed;
3. ``allow`` sends the head upstream (origin-form target, hop-by-hop fields dropped, the
   target's authority as Host when the client sent none), ``100 Continue`` to a waiting
   client, then the body as it arrives. Interim responses are passed on. The final
   response goes to the client as it arrives, never buffered whole: h11 frames it again
   (a close-delimited body reaches an HTTP/1.1 client chunked, and the client is told
   the connection closes); what arrived in one read leaves in one write.

One upstream connection serves one client connection, kept alive while both allow it. A
kept-alive upstream found closed before it answered is retried once on a fresh
connection when the request had no body. An upstream that refuses, resets or closes
before answering (or cannot be resolved) resets the client's connection, and one that
does not answer in time closes it (:class:`~._http_wire.Reset`, ``Abort``): the client
sees what it would have seen without the proxy, and the flow records why (``error``).
An answer that is not HTTP is answered ``502`` while nothing of it reached the client;
after that the client connection is closed. Bytes counted are payload bytes, de-chunked.

While the answer is awaited, the client is watched (:mod:`._waiting`): one that gives
up has its close passed on to the upstream, and the flow records it (``error``); the
exchange then ends with the upstream connection, closing the client's, not retried.
"""

from __future__ import annotations

import h11

from litmus_sandbox._config.egress import EgressPolicy, EgressRule, denied_body
from litmus_sandbox.oracles.egress._downstream import Downstream
from litmus_sandbox.oracles.egress._flow import EgressFlow, EgressSink, close_flow
from litmus_sandbox.oracles.egress._http_wire import (
    Abort,
    BadMessage,
    Reset,
    UpstreamBad,
    UpstreamClosed,
    split_target,
)
from litmus_sandbox.oracles.egress._upstream import Upstream, connect, unreachable
from litmus_sandbox.oracles.egress._waiting import CLIENT_CLOSED, first_bytes

# Hop-by-hop fields (RFC 9110 7.6.1) the proxy consumes rather than forwards. Bodies are
# framed again by h11 from Transfer-Encoding and Content-Length, so those pass through.
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"upgrade",
        b"expect",
    }
)
_RESPONSE_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection"})
_CONTINUE = h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue")
_END = h11.EndOfMessage()

Fields = list[tuple[bytes, bytes]]


class HttpRelay:
    """Forwards the plain HTTP requests of one client connection.

    Args:
        down: the client connection.
        policy: decides each request's host and port.
        sink: receives each request's flow when it opens and again when it closes.
        connect_timeout: seconds to connect upstream before answering 502.
    """

    def __init__(
        self, down: Downstream, policy: EgressPolicy, sink: EgressSink, connect_timeout: float
    ) -> None:
        self.down = down
        self.policy = policy
        self.sink = sink
        self.connect_timeout = connect_timeout
        self.upstream: Upstream | None = None

    async def forward(self, request: h11.Request, target: str) -> bool:
        """Answer one request; True when the client connection can carry another.

        Raises:
            BadMessage: a target or framing the proxy refuses (the client is answered).
            Abort: the upstream failed after the response began: close the connection.
        """
        host, port, path = split_target(target)
        rule = self.policy.decide(host, port)
        flow = EgressFlow(
            method=request.method.decode("latin-1"),
            scheme="http",
            host=host,
            port=port,
            path=self.policy.redact_target(path),  # recorded without its tokens
            decision=rule.mode,
        )
        sink = self.sink
        sink(flow)
        try:
            fields = request.headers.raw_items()
            seen = _Fields(fields, _HOP_BY_HOP)
            if seen.length and seen.chunked:
                raise BadMessage(400, "both Transfer-Encoding and Content-Length")
            if rule.mode != "allow":
                return await self._canned(flow, rule, seen)
            return await self._relay(request, fields, seen, flow, path)
        finally:
            close_flow(flow, sink)

    async def drop_upstream(self) -> None:
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            await upstream.aclose()

    # -- deny and stub

    async def _canned(self, flow: EgressFlow, rule: EgressRule, seen: _Fields) -> bool:
        down = self.down
        keep = True
        if seen.expects and (seen.length or seen.chunked):
            keep = False  # it waits for 100 Continue: answer now and close
        else:
            while (chunk := await down.next_data()) is not None:
                flow.request_bytes += len(chunk)  # what the tool tried to send counts
        if rule.mode == "deny":
            status, body = 403, denied_body(flow.host, flow.port)
            headers = [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("X-Litmus-Sandbox", "denied"),
            ]
        else:
            status, body = rule.status, rule.body.encode()
            headers = list(rule.headers.items())
        flow.status, flow.response_bytes = status, len(body)
        await down.respond(status, body, headers, keep=keep)
        return down.reusable

    # -- allow

    async def _relay(
        self, request: h11.Request, fields: Fields, seen: _Fields, flow: EgressFlow, path: str
    ) -> bool:
        down = self.down
        expects, has_body = seen.expects, seen.length or seen.chunked
        host, port = flow.host, flow.port or 80
        outgoing = self._outgoing(request, fields, seen, path, host, port)
        key = (host, port)
        for attempt in (0, 1):
            up = self.upstream
            if up is not None and up.key != key:
                await self.drop_upstream()
                up = None
            if up is None:
                try:
                    stream = await connect(host, port, self.connect_timeout)
                except (OSError, TimeoutError) as exc:
                    raise _unreached(flow, exc) from None
                up = self.upstream = Upstream(key, stream)
            reused = up.reused
            try:
                head = up.frame(outgoing)
                if not has_body:
                    await up.send(head)  # first: the rest is bookkeeping
                    tail = up.frame(_END)  # no bytes: the request has no body
                    if tail:
                        await up.send(tail)
                    down.end_of_request()
                    if attempt == 0 and expects:
                        await down.send(down.frame(_CONTINUE))
                else:
                    await up.send(head)
                    if attempt == 0 and expects:
                        await down.send(down.frame(_CONTINUE))
                    while (chunk := await down.next_data()) is not None:
                        flow.request_bytes += len(chunk)
                        await up.send(up.frame(h11.Data(data=chunk)))
                    await up.send(up.frame(down.end))
                response, interim = await self._final_head(up, flow)
            except UpstreamClosed:
                await self.drop_upstream()
                if flow.error == CLIENT_CLOSED:
                    raise Abort from None  # the client gave up: close, as the upstream did
                if reused and attempt == 0 and not has_body:
                    continue  # a kept-alive connection the server had closed: retry once
                flow.error = "the upstream closed the connection before a response"
                raise Reset from None
            except UpstreamBad as bad:
                await self.drop_upstream()
                return await self._fail(flow, bad.reason)
            return await self._respond(up, request, flow, response, interim)
        raise AssertionError("unreachable")  # pragma: no cover

    def _outgoing(
        self, request: h11.Request, fields: Fields, seen: _Fields, path: str, host: str, port: int
    ) -> h11.Request:
        """The request as sent upstream: origin-form target, hop-by-hop fields dropped,
        the target's authority as Host when the client sent none."""
        target = path.encode("latin-1")
        host_added = self.down.host_added
        if not host_added and not seen.hop:
            # Nothing to change: pass h11's own fields, which it need not validate again.
            return h11.Request(method=request.method, target=target, headers=request.headers)
        drop = seen.drop
        out = [
            (n, v)
            for n, v in fields
            if n.lower() not in drop and not (host_added and n.lower() == b"host")
        ]
        if host_added:
            authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            out.append((b"Host", authority.encode("latin-1")))
        return h11.Request(method=request.method, target=target, headers=out)

    async def _final_head(self, up: Upstream, flow: EgressFlow) -> tuple[h11.Response, bytes]:
        """The final response head, and the interim (1xx) responses before it, framed
        for the client (sent with the head)."""
        interim = b""
        if not up.buffered:
            await first_bytes(self.down, up, flow)  # nothing parses before the server answers
        while True:
            event = up.poll()
            if event is None:
                await up.fill()
                continue
            if type(event) is h11.InformationalResponse:
                fields = event.headers.raw_items()
                drop = _Fields(fields, _RESPONSE_HOP).drop
                interim += self.down.frame(
                    h11.InformationalResponse(
                        status_code=event.status_code,
                        headers=[(n, v) for n, v in fields if n.lower() not in drop],
                        reason=event.reason,
                    )
                )
                continue
            assert type(event) is h11.Response
            return event, interim

    async def _respond(
        self,
        up: Upstream,
        request: h11.Request,
        flow: EgressFlow,
        response: h11.Response,
        interim: bytes,
    ) -> bool:
        """Relay the response to the client as it arrives; True if both connections may
        carry another exchange (the upstream one is dropped otherwise)."""
        down = self.down
        status = flow.status = response.status_code
        fields = response.headers.raw_items()
        seen = _Fields(fields, _RESPONSE_HOP)
        closing = (
            not (seen.length or seen.chunked)
            and request.method != b"HEAD"
            and status not in (204, 304)
        )
        out = bytearray(interim)
        if closing or seen.hop:
            drop = seen.drop
            kept = [(n, v) for n, v in fields if n.lower() not in drop]
            if closing:  # a body that ends when the server closes: say the connection does
                kept.append((b"Connection", b"close"))
            out += down.frame(
                h11.Response(status_code=status, headers=kept, reason=response.reason)
            )
        elif response.http_version == b"1.1":  # nothing to change: h11 frames its own event
            out += down.frame(response)
        else:  # h11 sends HTTP/1.1 only: the same fields, which it need not validate again
            out += down.frame(
                h11.Response(status_code=status, headers=response.headers, reason=response.reason)
            )
        trailers_ok = down.h11.their_http_version == b"1.1"
        try:
            while True:
                event = up.poll()
                if event is None:
                    if out:
                        await down.send(bytes(out))
                        out.clear()
                    await up.fill()
                    continue
                if type(event) is h11.Data:
                    flow.response_bytes += len(event.data)
                    out += down.frame(event)
                    continue
                assert type(event) is h11.EndOfMessage
                out += down.frame(event if trailers_ok or not event.headers else _END)
                break
        except (UpstreamBad, UpstreamClosed):
            raise Abort from None  # the response is under way: all we can do is close
        await down.send(bytes(out))
        if not up.next_cycle():
            await self.drop_upstream()
        return down.reusable

    async def _fail(self, flow: EgressFlow, reason: str) -> bool:
        """Answer 502 (the upstream's answer is not HTTP, nothing of it reached the client
        yet) and close."""
        flow.status = 502
        await self.down.respond(502, f"litmus-sandbox: {reason}\n".encode())
        return False


def _unreached(flow: EgressFlow, exc: OSError | TimeoutError) -> Abort:
    """What the client sees of an upstream it cannot reach: its connection reset (refused,
    unreachable, not resolvable) or closed (timed out), as without the proxy; the flow
    records why."""
    flow.error = unreachable(exc)
    return Abort() if isinstance(exc, TimeoutError) else Reset()


class _Fields:
    """What the relay needs to know of a message's fields, from one pass over them.

    ``hop``: some field is hop by hop (the fields must be filtered through ``drop``: the
    hop-by-hop names and those a Connection field lists, RFC 9110 7.6.1); ``length``,
    ``chunked``: a Content-Length, a Transfer-Encoding field; ``expects``: an ``Expect:
    100-continue`` (hop by hop in a request).
    """

    __slots__ = ("chunked", "drop", "expects", "hop", "length")

    def __init__(self, fields: Fields, hop_by_hop: frozenset[bytes]) -> None:
        self.hop = self.length = self.chunked = self.expects = False
        self.drop = hop_by_hop
        tokens: set[bytes] = set()
        for name, value in fields:
            lower = name.lower()
            if lower in hop_by_hop:
                self.hop = True
                if lower == b"connection":
                    tokens.update(t.strip().lower() for t in value.split(b","))
                elif lower == b"expect":
                    self.expects = self.expects or b"100-continue" in (
                        t.strip().lower() for t in value.split(b",")
                    )
            elif lower == b"content-length":
                self.length = True
            elif lower == b"transfer-encoding":
                self.chunked = True
        if tokens:
            self.drop = hop_by_hop | tokens

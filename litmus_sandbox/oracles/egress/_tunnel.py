"""CONNECT tunnels through the forward proxy: decided by target, recorded with their SNI.

Theory of operation
-------------------
A ``CONNECT host:port`` is decided by its target. Refused (``deny``, or ``stub``: a
tunnel cannot be stubbed without decrypting it) it is answered 403 and recorded as
``deny``. Allowed, the proxy connects, answers ``200 Connection established`` (h11 then
hands the connection over: :attr:`~._downstream.Downstream.trailing` holds what the
client sent past the head) and relays bytes both ways until both sides close, counting
each way. A target that cannot be reached resets the client's connection (closes it, on
a timeout), as without the proxy, and the flow records why (``error``). So does an
upstream that resets the tunnel once it is open: the client's connection is reset too,
not closed, and the flow's ``error`` says so; a client that resets its side has the
upstream's reset in turn.

The client's first flight is held until the TLS ClientHello in it is whole: its SNI
server name (read by :func:`~._http_wire.parse_sni`, never decrypted) is recorded, and
a name that a rule of the policy denies ends the tunnel before any of it reaches the
upstream. A name no rule covers is not refused: the CONNECT target decided that.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from contextlib import suppress

import anyio
import h11
from anyio.abc import ByteStream, TaskGroup

from litmus_sandbox._config.egress import EgressPolicy, denied_body
from litmus_sandbox.oracles.egress._downstream import CHUNK, Downstream
from litmus_sandbox.oracles.egress._flow import EgressFlow, EgressSink, close_flow
from litmus_sandbox.oracles.egress._http_wire import Abort, Reset, parse_sni, split_authority
from litmus_sandbox.oracles.egress._streams import reset
from litmus_sandbox.oracles.egress._upstream import CONNECTION_LOST, connect, unreachable

#: What ends a tunnel when either side raises it.
CLOSED = (*CONNECTION_LOST, anyio.IncompleteRead)
_ESTABLISHED = h11.Response(status_code=200, headers=[], reason=b"Connection established")
#: A tunnel's ``error`` when its upstream reset it (the system's words, as for a refusal).
UPSTREAM_RESET = os.strerror(errno.ECONNRESET)
_NO_STUB = b"(a stub cannot answer inside a tunnel: use plain http or the in-process transport)\n"


async def tunnel(
    down: Downstream,
    target: str,
    policy: EgressPolicy,
    sink: EgressSink,
    connect_timeout: float,
) -> None:
    """Answer one CONNECT and relay the tunnel until it ends.

    Raises:
        BadMessage: a target that is not ``host:port``.
    """
    host, port = split_authority(target)
    mode = policy.decide(host, port).mode
    flow = EgressFlow(
        method="CONNECT",
        scheme="tcp",
        host=host,
        port=port,
        decision="allow" if mode == "allow" else "deny",
    )
    sink(flow)
    try:
        if mode != "allow":
            flow.status = 403
            body = denied_body(host, port) + (_NO_STUB if mode == "stub" else b"")
            await down.respond(403, body, [("X-Litmus-Sandbox", "denied")])
            return
        try:
            upstream = await connect(host, port, connect_timeout)
        except (OSError, TimeoutError) as exc:
            # As without the proxy: the connection reset (refused) or closed (timed out).
            flow.error = unreachable(exc)
            raise (Abort() if isinstance(exc, TimeoutError) else Reset()) from None
        async with upstream:
            await down.send(down.frame(_ESTABLISHED))
            flow.status = 200
            first = down.trailing

            def sni_denied(name: str) -> bool:
                # Only a rule naming that host denies it: the CONNECT target decided
                # everything else (an allowed address is not refused for its name
                # merely falling under a deny-by-default).
                rule = policy.decide(name, port)
                return rule is not policy.default and rule.mode != "allow"

            async with anyio.create_task_group() as tg:
                tg.start_soon(_pump_client, down.stream, first, upstream, flow, tg, sni_denied)
                tg.start_soon(_pump_upstream, upstream, down.stream, flow, tg)
            if flow.error is not None:
                raise Reset  # the upstream reset the tunnel: so is the client's connection
    finally:
        close_flow(flow, sink)


async def _pump_client(
    src: ByteStream,
    first: bytes,
    dst: ByteStream,
    flow: EgressFlow,
    tg: TaskGroup,
    sni_denied: Callable[[str], bool],
) -> None:
    """Client to upstream, reading the SNI from the first bytes on the way.

    ``first`` is what the client sent with its CONNECT head. The first flight is held
    until the ClientHello is read whole; a server name the policy denies by name ends
    the tunnel before any of it reaches the upstream.
    """
    hello = bytearray()
    sniffing = True
    pending = first
    try:
        while True:
            if pending:
                data, pending = pending, b""
            else:
                try:
                    data = await src.receive(CHUNK)
                except anyio.EndOfStream:
                    if hello:  # the client ended before a whole ClientHello: pass what it sent
                        await _to_upstream(dst, bytes(hello), flow)
                    break
                except CLOSED:
                    reset(dst)  # the client reset its side: the upstream sees the same
                    raise
            flow.request_bytes += len(data)
            if sniffing:
                hello += data
                seen = parse_sni(bytes(hello))
                if not (seen.complete or len(hello) > 4 * CHUNK):
                    continue  # hold it: the name decides whether it goes on
                sniffing = False
                flow.scheme = "https" if seen.tls else "tcp"
                flow.sni = seen.server_name
                if seen.server_name and sni_denied(seen.server_name):
                    flow.decision = "deny"
                    tg.cancel_scope.cancel()
                    return
                data = bytes(hello)
                hello.clear()
            await _to_upstream(dst, data, flow)
        with suppress(*CLOSED):
            await dst.send_eof()  # half-close: let the server finish its side
    except CLOSED:
        tg.cancel_scope.cancel()  # a reset on either side ends the whole tunnel


async def _to_upstream(upstream: ByteStream, data: bytes, flow: EgressFlow) -> None:
    try:
        await upstream.send(data)
    except CLOSED:
        flow.error = UPSTREAM_RESET
        raise


async def _pump_upstream(src: ByteStream, dst: ByteStream, flow: EgressFlow, tg: TaskGroup) -> None:
    try:
        while True:
            try:
                data = await src.receive(CHUNK)
            except anyio.EndOfStream:
                break
            except CLOSED:
                flow.error = UPSTREAM_RESET
                raise
            flow.response_bytes += len(data)
            await dst.send(data)
        with suppress(*CLOSED):
            await dst.send_eof()
    except CLOSED:
        tg.cancel_scope.cancel()

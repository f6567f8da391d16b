"""Waiting for an upstream's answer while the client may give up.

Theory of operation
-------------------
A forwarded request waits for the upstream's first bytes with nothing else to read. A
client that gives up meanwhile (it closes or resets its connection) would go unnoticed:
the flow would never say so, and the server would never see the close it sees without
the proxy. So while the answer is awaited, the client is watched:

* on asyncio the client's stream is an :class:`~._streams.AsyncioStream`, whose protocol
  callbacks tell of a close as it happens: its ``on_close`` hook is set for the wait, so
  nothing is scheduled and no task runs for a request the upstream answers;
* elsewhere (trio), a watcher task reads the client once the upstream has been silent
  for :data:`PATIENCE_S` (bytes it sends meanwhile are kept for its next request).

A client that closes its side has the close passed on to the upstream (``send_eof``),
and the flow records that it gave up (:data:`CLIENT_CLOSED`, cleared if an answer comes
all the same: a client that half-closed may still read it); the upstream then has the
idle timeout to answer before its connection is dropped. A client that resets has the
upstream connection dropped at once. Either way the relay then ends the exchange.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress

import anyio

from litmus_sandbox.oracles.egress._downstream import Downstream
from litmus_sandbox.oracles.egress._flow import EgressFlow
from litmus_sandbox.oracles.egress._streams import AsyncioStream
from litmus_sandbox.oracles.egress._upstream import CONNECTION_LOST, Upstream

#: Seconds an upstream may take to answer before the client is watched (trio).
PATIENCE_S = 0.5
#: A flow's ``error`` when the client gave up before a response came.
CLIENT_CLOSED = "the client closed the connection before a response"


async def first_bytes(down: Downstream, up: Upstream, flow: EgressFlow) -> None:
    """Read the upstream's first bytes (or its end) into ``up``, watching the client.

    Raises:
        UpstreamClosed: the upstream connection ended (dropped once the client gave up:
            ``flow.error`` then says so).
    """
    client = down.stream
    if isinstance(client, AsyncioStream) and isinstance(up.stream, AsyncioStream):
        await _with_hook(client, up, flow, down.idle_timeout)
    else:
        await _with_watcher(down, up, flow)
    if flow.error == CLIENT_CLOSED and up.buffered:
        flow.error = None  # it answered all the same: the client may still read


async def _with_hook(
    client: AsyncioStream, up: Upstream, flow: EgressFlow, idle_timeout: float
) -> None:
    upstream = up.stream
    assert isinstance(upstream, AsyncioStream)
    give_up: list[asyncio.TimerHandle] = []

    def closed(reset: bool) -> None:
        flow.error = CLIENT_CLOSED
        if reset:
            upstream.transport.abort()
            return
        with suppress(OSError):
            if upstream.transport.can_write_eof():
                upstream.transport.write_eof()
        loop = asyncio.get_running_loop()
        give_up.append(loop.call_later(idle_timeout, upstream.transport.abort))

    if client.at_eof:  # it closed its side with its request, before this wait
        closed(client.was_reset)
    else:
        client.on_close = closed
    try:
        await up.fill()
    finally:
        client.on_close = None
        for handle in give_up:
            handle.cancel()


async def _with_watcher(down: Downstream, up: Upstream, flow: EgressFlow) -> None:
    with anyio.move_on_after(PATIENCE_S):
        await up.fill()
        return
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            what = await down.watch()
            if what == "more":
                return
            flow.error = CLIENT_CLOSED
            if what == "reset":
                await up.aclose()
                return
            with suppress(*CONNECTION_LOST):
                await up.stream.send_eof()
            await anyio.sleep(down.idle_timeout)
            await up.aclose()

        tg.start_soon(watch)
        try:
            await up.fill()
        except Exception as exc:  # raised out of the group, it would be a group
            failure = exc
        tg.cancel_scope.cancel()
    if failure is not None:
        raise failure

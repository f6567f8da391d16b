"""The HTTP proxy's MCP endpoint: each JSON-RPC message POSTed to it, to its relay core.

Theory of operation
-------------------
A POST to the endpoint carries one JSON-RPC message (``HttpProxy`` has read it whole,
within the size limit); while it is answered, its session is busy (its client is there:
``HttpSessions.arrive``). What could invoke a tool but cannot be recorded as a call, or
nests too deep, is refused by the session's core and never reaches the server
(``_refuse``). A well-formed ``tools/call`` is the core's to run (``_call``: an
``HttpToolCall``; one the client asked to run as a task runs in a task of the proxy's,
so that the client's connection goes on once it has the task). The client's
``notifications/cancelled`` for a recorded call is the core's to decide (``_cancel``:
the call is interrupted; the server hears of it only if it saw the call). A sessionless
client's cancel comes in an exchange of its own (the call's carries the call's stream), so
outside the call's episode (one per exchange): it is tied to the call by evidence
(``_cancelled_session``: its ``requestId`` names exactly one call in flight among the
sessionless exchanges of the same client address). A ``tasks/*``
request about a task a core knows goes to that core (``_http_tasks.py``); everything
else is relayed (``_http_relay.py``). Before any of it, a request of a session that has
not opened its episode yet may name its case id (a probe's requests too: they open
nothing).
"""

from __future__ import annotations

import anyio
from anyio.abc import SocketAttribute

from ._downstream import Downstream
from ._http_call import CLIENT_GONE, HttpToolCall
from ._http_relay import HttpRelay
from ._http_sessions import EXCHANGE
from ._http_tasks import relay_task
from ._jsonrpc import Message, cancelled_request_of, id_key, parse, tool_call_of
from ._relay import DEFAULT_MAX_DEPTH, FinishCall, StartCall, ToClient, ToServer, valid_id
from ._relay._guard import INVALID_REQUEST, Refusal, refusal_answer, refusal_of
from ._relay._limits import request_id_of, too_deep
from ._relay._tasks import task_id_of


class HttpEndpoint(HttpRelay):
    """The HTTP proxy's handling of the JSON-RPC messages POSTed to its endpoint."""

    async def post(
        self,
        down: Downstream,
        raw_headers: list[tuple[bytes, bytes]],
        headers: list[tuple[bytes, bytes]],
        url: str,
        body: bytes,
    ) -> None:
        """One message POSTed to the endpoint (``raw_headers`` as the client sent them,
        ``headers`` those to forward): refused, or taken by its session, which is busy
        until it is answered."""
        msg = parse(body)
        if too_deep(body, DEFAULT_MAX_DEPTH) or refusal_of(body, msg) is not None:
            await self._refuse(down, raw_headers, msg, body)
            return
        key = self.key_for(raw_headers, msg, down.exchange_id)
        if msg.method == "notifications/cancelled":
            key = self._cancelled_session(key, msg, down)
        self.arrive(key, down.keys)
        try:
            await self._post(down, key, msg, url, headers, body)
        finally:
            self.leave(key)

    async def _post(
        self,
        down: Downstream,
        key: str,
        msg: Message,
        url: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> None:
        """A JSON-RPC message POSTed to the endpoint: recorded if it is a tools/call."""
        if msg.kind == "request" and msg.method != "initialize":
            # Only sessions that began (initialize answered with a session id) or
            # called a tool have an episode: a failed discovery probe records nothing.
            slot = self._slots.get(key)
            if slot is not None and not slot.opened:
                self.offer(slot, msg, touch=False)  # lists, pings: a probe's requests too
        if tool_call_of(msg) is not None:
            await self._call(down, key, url, headers, body)
            return
        if msg.method == "notifications/cancelled" and await self._cancel(key, msg, body, down):
            return
        if (task_id := task_id_of(msg)) is not None and msg.kind == "request":
            core = self.core_of_task(task_id)
            if core is not None:
                await relay_task(self, key, core, down, url, headers, body, msg.id)
                return
        await self.relay(down, "POST", url, headers, body, msg=msg)

    def _cancelled_session(self, key: str, msg: Message, down: Downstream) -> str:
        """The session a ``notifications/cancelled`` is about: its own, unless it came
        outside any session (no session id, no case id: an exchange of its own)
        and its ``requestId`` is not in flight there but names exactly one call in flight
        among the sessionless exchanges of the same client address: then that call's. With
        several such calls it is ambiguous and stays its own exchange's (relayed as is)."""
        rid = cancelled_request_of(msg)
        if not key.startswith(EXCHANGE) or not valid_id(rid):
            return key
        rkey = id_key(rid)
        own = self._cores.get(key)
        if own is not None and rkey in own.pending:
            return key
        host = _client_host(down)
        matches = [
            other
            for other, core in self._cores.items()
            if other.startswith(EXCHANGE)
            and (pending := core.pending.get(rkey)) is not None
            and pending.kind == "call"
            and isinstance(pending.handle, HttpToolCall)
            and _client_host(pending.handle.down) == host
        ]
        return matches[0] if len(matches) == 1 else key

    async def _call(
        self,
        down: Downstream,
        key: str,
        url: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> None:
        """A well-formed tools/call: the session's core takes it (or refuses it)."""
        core = self.core(key)
        actions = self.perform(key, core.from_client(body, anyio.current_time()))
        start = next((a.pending for a in actions if isinstance(a, StartCall)), None)
        if start is None:  # refused (an id already in flight)
            replies = [a.data.rstrip(b"\n") for a in actions if isinstance(a, ToClient)]
            await down.whole(400, b"application/json", replies[0] if replies else b"")
            return
        call = HttpToolCall(self, key, down, url, headers, core, start)
        if not start.task_requested:
            await call.run()
            return
        # A call the client asked to run as a task runs in a task of the proxy's: once
        # the client has the task, its connection goes on while the step waits.
        broken: list[BaseException] = []

        async def run() -> None:
            self.arrive(key, down.keys)  # its session is busy until it ends
            try:
                await call.run()
            except CLIENT_GONE as exc:
                broken.append(exc)
            finally:
                self.leave(key)

        self._outer.start_soon(run)
        await call.responded.wait()
        if broken:
            raise broken[0]

    async def _refuse(
        self,
        down: Downstream,
        raw_headers: list[tuple[bytes, bytes]],
        msg: Message,
        body: bytes,
    ) -> None:
        """What could invoke a tool but cannot be recorded as a call, or nests too deep:
        the session's core refuses it (``_relay/_guard.py``): it never reaches the server;
        the client gets 400 with the JSON-RPC error (one with no id for a message that
        has none: an HTTP request always gets an answer), the session's end record keeps
        it in ``meta["mcp"]["refused"]``, and one nested too deep aborts the episode."""
        key = self.key_for(raw_headers, msg, down.exchange_id)
        self.slot(key).touch()
        actions = self.perform(key, self.core(key).from_client(body, anyio.current_time()))
        replies = [a.data.rstrip(b"\n") for a in actions if isinstance(a, ToClient)]
        if not replies:  # a notification (or the core has stopped): answered all the same
            why = f"a message nested deeper than {DEFAULT_MAX_DEPTH} levels"
            refusal = refusal_of(body, msg) or Refusal(request_id_of(body), INVALID_REQUEST, why)
            replies = [refusal_answer(refusal)]
        await down.whole(400, b"application/json", replies[0])

    async def _cancel(self, key: str, msg: Message, body: bytes, down: Downstream) -> bool:
        """Cancel a recorded call the client gave up on, as the core decides: the call is
        interrupted; the server hears of it only if it saw the call. True if answered
        here."""
        core = self._cores.get(key)
        rid = cancelled_request_of(msg)
        if core is None or not valid_id(rid):
            return False
        pending = core.pending.get(id_key(rid))
        if pending is None or pending.kind != "call":
            return False  # a relayed request's, or unknown: the server's to hear
        relayed = False
        for action in self.perform(key, core.from_client(body, anyio.current_time())):
            if isinstance(action, FinishCall) and isinstance(action.pending.handle, HttpToolCall):
                action.pending.handle.finish(action)
            elif isinstance(action, ToServer):
                relayed = True
        if relayed:
            return False  # the server saw the call: it hears of the cancellation too
        await down.whole(202, b"application/json", b"")
        return True


def _client_host(down: Downstream) -> object:
    """The client's address (its host, without the port) of an exchange, or None."""
    address = down.stream.extra(SocketAttribute.remote_address, None)
    return address[0] if isinstance(address, tuple) else address

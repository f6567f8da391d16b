"""Task-augmented calls over streamable HTTP: the relay core's rules (``_relay/_tasks.py``),
this driver's I/O.

Theory of operation
-------------------
A ``tools/call`` with ``params.task`` runs in a task of the proxy's own, not the client
connection's: the server may answer it with a task (``CreateTaskResult``), which the
client gets at once on the call's response; its connection is then free for the next
request while the call waits in the core's ``TASK`` state. Its result is the server's
answer to the client's ``tasks/result`` for the task: the core tracks that request, and
its answer, held back (``Exchange``), is the call's ``FinishCall``: recorded on the step
(``meta["mcp"]["task"]`` links the task id and the ``tasks/result`` request, and says the
result came later), then relayed byte for byte (:func:`relay_task_result`). A call the
proxy answers itself (stub, deny, replay) is answered as a completed task of the core's
own, whose ``tasks/get``, ``tasks/result`` and ``tasks/cancel`` the core answers: the
result is the one the step records as shown. Tasks are looked up across sessions
(``HttpSessions.core_of_task``): a stateless client's ``tasks/result`` names no session.
"""

from __future__ import annotations

import math
from typing import Any

import anyio

from ._downstream import Downstream
from ._http_answer import Unanswered, Waiting
from ._http_call import HttpToolCall
from ._http_exchange import Exchange
from ._http_sessions import HttpSessions
from ._jsonrpc import CONNECTION_CLOSED, error_message, id_key
from ._recording import UpstreamGone
from ._relay import FinishCall, Pending, Relay, ToClient, ToServer


async def relay_task(
    proxy: HttpSessions,
    key: str,
    core: Relay,
    down: Downstream,
    url: str,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
    request_id: Any,
) -> None:
    """A ``tasks/*`` request about a task the core knows: answered by the core (the
    proxy's own task), or relayed, a ``tasks/result``'s answer going to its call first."""
    actions = proxy.perform(key, core.from_client(body, anyio.current_time()))
    replies = [a.data.rstrip(b"\n") for a in actions if isinstance(a, ToClient)]
    if replies:
        await down.whole(200, b"application/json", replies[0])
        return
    if not any(isinstance(a, ToServer) for a in actions):
        await down.whole(202, b"application/json", b"")
        return
    await relay_task_result(proxy, key, core, down, url, headers, body, request_id)


async def relay_task_result(
    proxy: HttpSessions,
    key: str,
    core: Relay,
    down: Downstream,
    url: str,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
    request_id: Any,
) -> None:
    """Relay a task request the core tracks; a ``tasks/result``'s answer is its call's
    result, recorded before the client gets it.

    It waits as long as the task runs (no deadline, as over stdio); a stop answers it
    ``-32000``. A server that never answers it leaves the call waiting (its own limit
    ends it).
    """
    stop = Waiting(math.inf)
    proxy._waiting.add(stop)
    if (pending := core.pending.get(id_key(request_id))) is not None:
        pending.handle = stop  # the core's error reaches it (a stop)
    try:
        async with Exchange(
            proxy.client, down, url, headers, body, request_id, max_bytes=proxy.max_message_bytes
        ) as exchange:
            try:
                raw, _envelope = await stop.upstream(exchange.answer())
            except UpstreamGone as exc:
                _forget(core, pending)  # before a stop could answer it too
                if exchange.plain is not None:
                    await exchange.release()  # the server's own answer (an HTTP error)
                    return
                await _say(down, request_id, str(exc))
                return
            except Unanswered as unanswered:
                _forget(core, pending)
                if unanswered.reply is not None:
                    await down.last_word(unanswered.reply)  # the core's own error
                else:
                    await _say(down, request_id, proxy.stop_reason or "the proxy stopped")
                return
            line = raw if raw.endswith(b"\n") else raw + b"\n"
            actions = proxy.perform(key, core.from_server(line, anyio.current_time()))
            for action in actions:
                if isinstance(action, FinishCall) and isinstance(
                    action.pending.handle, HttpToolCall
                ):
                    call = action.pending.handle
                    call.finish(action)
                    await call.recorded.wait()  # the client never holds a result the record lacks
            await exchange.release(stop.done)
    finally:
        proxy._waiting.discard(stop)
        stop.done.set()
        _forget(core, pending)


def _forget(core: Relay, pending: Pending | None) -> None:
    """The request's exchange is over: over HTTP, no answer to it can come any more."""
    if pending is not None:
        core.forget(pending)


async def _say(down: Downstream, request_id: Any, reason: str) -> None:
    await down.last_word(error_message(request_id, CONNECTION_CLOSED, f"litmus-sandbox: {reason}"))

"""Task-augmented calls over streamable HTTP (the stdio rules: ``_relay/_tasks.py``).

Theory of operation
-------------------
A ``tools/call`` with ``params.task`` runs in a task of the proxy's own, not the
client connection's: the server may answer it with a task (``CreateTaskResult``), which
the client gets at once on the call's response; its connection is then free for the next
request while the call's step waits (:class:`TaskWait`) for the result. That result is
the server's answer to the client's ``tasks/result`` for the task: held back
(``Exchange``), handed to the call, recorded on its step (``meta["mcp"]["task"]`` links
the task id and the ``tasks/result`` request, and says the result came later), then
relayed byte for byte. A call the proxy answers itself (stub, deny, replay) is answered
as a completed task of the proxy's own, whose ``tasks/get``, ``tasks/result`` and
``tasks/cancel`` the proxy answers (:class:`OwnTasks`): the result is the one the step
records as shown. Tasks are known by id across sessions (a stateless client's
``tasks/result`` names no session).
"""

from __future__ import annotations

import math
from typing import Any

import anyio
import h11

from ._downstream import Downstream
from ._http_answer import Unanswered, Waiting
from ._http_exchange import Exchange
from ._http_sessions import HttpSessions
from ._jsonrpc import CONNECTION_CLOSED, Message, error_message
from ._recording import UpstreamGone
from ._relay._tasks import own_task, own_task_answer
from ._sse import encode_event

#: The proxy's own tasks kept for their tasks/get and tasks/result (the oldest go first).
MAX_OWN_TASKS = 4096
#: Errors writing to a client that left.
CLIENT_GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError, h11.LocalProtocolError)


class TaskWait:
    """A recorded call the server made a task: its step waits for the task's result."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self._result: tuple[bytes, dict[str, Any], Any] | None = None
        self._arrived = anyio.Event()
        #: Set once the call's step is written (or the call is over unrecorded).
        self.recorded = anyio.Event()

    def deliver(self, raw: bytes, envelope: dict[str, Any], request_id: Any) -> None:
        """The answer to the client's ``tasks/result`` (request ``request_id``)."""
        if self._result is None:
            self._result = (raw, envelope, request_id)
            self._arrived.set()

    async def result(self) -> tuple[bytes, dict[str, Any], Any]:
        await self._arrived.wait()
        assert self._result is not None
        return self._result


class OwnTasks:
    """The proxy's own (completed) tasks, by id: a stand-in result shown as a task."""

    def __init__(self) -> None:
        self._tasks: dict[str, dict[str, Any]] = {}

    def create(self, request_id: Any, task_id: str, reply: bytes) -> bytes:
        """Keep the task answering a call with ``reply``; the ``CreateTaskResult``."""
        self._tasks[task_id], answer = own_task(request_id, task_id, reply)
        if len(self._tasks) > MAX_OWN_TASKS:
            del self._tasks[next(iter(self._tasks))]
        return answer

    def answer(self, msg: Message, task_id: str) -> bytes | None:
        """The answer to a ``tasks/*`` request about one of them (None: not the proxy's)."""
        own = self._tasks.get(task_id)
        if own is None:
            return None
        answer = own_task_answer(msg.id, str(msg.method), own)
        if answer is None:
            text = f"litmus-sandbox: {msg.method} of the proxy's own task"
            return error_message(msg.id, -32602, text)
        return answer


async def relay_task_result(
    proxy: HttpSessions,
    down: Downstream,
    wait: TaskWait,
    url: str,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
    msg: Message,
) -> None:
    """Relay a ``tasks/result`` whose answer is a waiting call's result: recorded first.

    It waits as long as the task runs (no deadline, as over stdio); a stop answers it
    ``-32000``. A server that never answers it leaves the call waiting (its own limit
    ends it).
    """
    stop = Waiting(math.inf)
    proxy._waiting.add(stop)
    try:
        async with Exchange(
            proxy.client, down, url, headers, body, msg.id, max_bytes=proxy.max_message_bytes
        ) as exchange:
            try:
                raw, envelope = await stop.upstream(exchange.answer())
            except UpstreamGone as exc:
                if exchange.plain is not None:
                    await exchange.release()  # the server's own answer (an HTTP error)
                    return
                await _say(down, msg.id, str(exc))
                return
            except Unanswered:
                await _say(down, msg.id, proxy.stop_reason or "the proxy stopped")
                return
            wait.deliver(raw, envelope, msg.id)
            await wait.recorded.wait()  # the client never holds a result the record lacks
            await exchange.release(stop.done)
    finally:
        proxy._waiting.discard(stop)
        stop.done.set()


async def _say(down: Downstream, request_id: Any, reason: str) -> None:
    reply = error_message(request_id, CONNECTION_CLOSED, f"litmus-sandbox: {reason}")
    with anyio.move_on_after(2, shield=True):
        if down.started:
            await down.body(encode_event(reply))
            await down.end()
        else:
            await down.whole(200, b"application/json", reply)

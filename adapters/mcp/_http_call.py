"""One recorded ``tools/call`` over streamable HTTP.

Theory of operation
-------------------
The call's policy decides whether it reaches the server. A real call is POSTed upstream
as the client sent it (``Exchange``, ``_http_exchange.py``): a JSON answer is read
whole, an event stream is relayed as it arrives with its notifications teed into the
step's ``meta["mcp"]["notifications"]``, and the answering event is held back while the
step is written, then sent, followed by whatever the server streams after it. So a real
call is relayed byte for byte, and the client never holds an answer the record does not
yet have.

Calls the server never sees (stub, deny, replay, dropped swallow) and calls it never
answered (timeout, crash, an answer over the size limit) are answered by the proxy: plain
JSON when nothing was sent yet, an event on the open stream otherwise. A call the client
asked to run as a task is answered in that shape: see ``_http_tasks.py``.

Cancelling a call changes nothing else on the wire: the step is recorded interrupted,
and the server's stream goes on to the client as the server keeps it (its later
progress, and its answer if it sends one), until the server ends it.
"""

from __future__ import annotations

import functools
from typing import Any

import anyio

from litmus_sandbox import ConfigError

from ._downstream import Downstream
from ._http_exchange import CutOff, Exchange, Undecodable
from ._http_sessions import HttpSessions
from ._http_tasks import CLIENT_GONE, OwnTasks, TaskWait
from ._jsonrpc import (
    CONNECTION_CLOSED,
    PROTOCOL_VERSION_META_KEY,
    Message,
    error_message,
    id_key,
    no_answer,
)
from ._recording import ANSWERED_BY_THE_PROXY, CallState, UpstreamGone
from ._relay._tasks import created_task
from ._sse import encode_event


class HttpToolCall:
    """Record one ``tools/call`` POST and answer it."""

    def __init__(
        self,
        proxy: HttpSessions,
        key: str,
        down: Downstream,
        url: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        msg: Message,
        tool: str,
        args: dict[str, Any],
        *,
        tasks: dict[str, TaskWait],
        own_tasks: OwnTasks,
    ) -> None:
        self.proxy = proxy
        self.key = key
        self.down = down
        self.url = url
        self.headers = headers
        self.msg = msg
        self.tool = tool
        self.args = args
        self.state = CallState(msg.id, body, stateless=PROTOCOL_VERSION_META_KEY in msg.meta)
        self.state.output_schema = proxy.output_schemas.get(tool)
        params = msg.params or {}
        self.state.task_requested = isinstance(params.get("task"), dict)
        self.exchange = Exchange(
            proxy.client,
            down,
            url,
            headers,
            body,
            msg.id,
            note=self.state.note,
            max_bytes=proxy.max_message_bytes,
        )
        self._tasks = tasks
        self._own_tasks = own_tasks
        self.scope = anyio.CancelScope()
        #: Set once the call is over (its step recorded, its reply sent or given up).
        self.finished = anyio.Event()
        #: Set once the client has the call's answer (what the server streams after it
        #: may go on).
        self.answered = anyio.Event()
        #: Set once the call's own response is complete (for a task: the task; its
        #: step may still wait for the result).
        self.responded = anyio.Event()
        #: The server's task the step waits for, once it made the call one.
        self.task: TaskWait | None = None
        #: Why the server was cut off (it broke the size limit), if it was.
        self.cut_off: str | None = None

    async def run(self) -> None:
        try:
            async with self.exchange:
                await self._run()
        finally:
            if self.task is not None:
                self.task.recorded.set()  # over: a tasks/result held for it goes on
            self.responded.set()
            self.finished.set()

    async def _run(self) -> None:
        proxy, state = self.proxy, self.state
        slot = proxy.slot(self.key)
        proxy.offer(slot, self.msg)
        call_key = (self.key, id_key(self.msg.id))
        proxy.calls[call_key] = self
        try:
            with self.scope:
                ep = await slot.recorder()
                if (
                    state.output_schema is None
                    and not proxy.listed
                    and ep.sandbox.policy.for_tool(self.tool).mode in ANSWERED_BY_THE_PROXY
                ):
                    await proxy.learn_schemas(self.url, self.headers, self.msg)
                    state.output_schema = proxy.output_schemas.get(self.tool)
                try:
                    await ep.call_with(
                        lambda _t, _a: self._forward(),
                        self.tool,
                        self.args,
                        finalize=functools.partial(
                            state.finalize, cap=ep.sandbox.max_result_bytes, whole=ep.whole_shown
                        ),
                    )
                except ConfigError:
                    if not ep.ended:
                        raise
                    # The session ended (DELETE) while the call ran: no step can follow the
                    # episode's end; the client is told, the other sessions go on.
                    state.reply_kind = "error"
                    text = "litmus-sandbox: the session ended while this call ran"
                    state.reply = error_message(self.msg.id, CONNECTION_CLOSED, text)
            if self.task is not None:
                self.task.recorded.set()
            if state.timed_out:
                reason = no_answer(f"tools/call {self.tool!r}")
                slot.abort(reason)
                await proxy.cancel_upstream(self.url, self.headers, state.request_id, reason)
            elif self.cut_off is not None:
                slot.abort(self.cut_off)
            elif (
                state.reply_kind == "error"
                and self.exchange.plain is None
                and "invalid_utf8" not in state.extra_meta  # a failed call, as over stdio
            ):
                # No HTTP answer at all (connection refused or dropped mid-stream).
                slot.abort(state.failure or "the MCP server did not answer")
            await self._reply()
        finally:
            proxy.calls.pop(call_key, None)
            self.answered.set()

    async def _reply(self) -> None:
        state, down, exchange = self.state, self.down, self.exchange
        if self.responded.is_set():
            return  # the client has the task; the result went with its tasks/result
        # A real call the server answered over HTTP, even without a JSON-RPC answer
        # (a 404 for an expired session): the client gets the server's own response.
        relay = state.reply_kind == "relay" or (
            state.reply_kind == "error" and state.fidelity == "real" and exchange.plain is not None
        )
        if relay and (exchange.plain is not None or exchange.stream is not None):
            await exchange.release(self.answered)
        elif state.reply_kind == "none" and exchange.stream is not None:
            # Cancelled by the client: the server's stream goes on as the server keeps it.
            self.answered.set()
            await exchange.release_rest()
        elif state.reply_kind == "result" and state.task_id is not None:
            # Shown as the client asked: a task of the proxy's own, done, its result kept.
            reply = self._own_tasks.create(self.msg.id, state.task_id, state.reply)
            await down.whole(200, b"application/json", reply)
        elif state.reply_kind in ("result", "error"):
            if down.started:
                await down.body(encode_event(state.reply))
                await down.end()
            else:
                await down.whole(200, b"application/json", state.reply)
        elif down.started:
            await down.end()  # interrupted: close the stream, nothing to say
        # An interrupted call with nothing sent leaves the response unsent: the
        # connection closes, which is all a client that cancelled expects.

    async def _forward(self) -> Any:
        """The runner: POST upstream, relay the stream's notifications, return the answer
        (for a task: the result its tasks/result brings)."""
        state, exchange = self.state, self.exchange
        state.forwarded = True
        try:
            raw, envelope = await exchange.answer()
        except UpstreamGone as exc:
            state.failure = str(exc)
            if isinstance(exc, CutOff):
                self.cut_off = state.failure
            elif isinstance(exc, Undecodable):
                state.extra_meta["invalid_utf8"] = True
            raise
        finally:
            state.forwarded = exchange.forwarded
        task_id = created_task(envelope) if state.task_requested else None
        if task_id is not None:
            raw, envelope = await self._await_task(task_id)
        return state.answered(raw, envelope)

    async def _await_task(self, task_id: str) -> tuple[bytes, dict[str, Any]]:
        """The server made the call a task: the client gets it now; the step waits for
        the result the client's tasks/result brings."""
        task = self.task = self._tasks[task_id] = TaskWait(task_id)
        meta: dict[str, Any] = {"task_id": task_id}
        self.state.extra_meta["task"] = meta
        try:
            try:
                with anyio.CancelScope(shield=True):  # never half a response
                    await self.exchange.release(self.answered)
            except CLIENT_GONE:
                pass  # the client left: its tasks/result, if it comes, still brings it
            self.answered.set()
            self.responded.set()  # the client's connection goes on; the step waits
            raw, envelope, result_request = await task.result()
        finally:
            if self._tasks.get(task_id) is task:
                del self._tasks[task_id]
        meta.update(result_request_id=result_request, result_later=True)
        return raw, envelope

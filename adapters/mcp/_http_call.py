"""One recorded ``tools/call`` over streamable HTTP: the relay core decides, this moves it.

Theory of operation
-------------------
The session's relay core (``_relay/``) takes the call (``StartCall``: its ``Pending``,
with the ``CallState`` that travels with it) and decides everything about its life:
when it is forwarded (``Relay.forward``), what its answer is (``Relay.from_server``: a
result, or a task whose result the client's ``tasks/result`` brings, ``_http_tasks.py``),
what a cancel does (``Relay.from_client``), and what the client is shown once the step is
written (``Relay.recorded``: the server's bytes, a stand-in, a task of the proxy's own, an
error; a call that timed out aborts the episode and tells the server). This module does
the I/O: it runs the call under the recorder (``EpisodeRecorder.call_with``, whose
timer bounds it), and POSTs it upstream as the client sent it (``Exchange``,
``_http_exchange.py``): a JSON answer is read whole, an event stream is relayed as it
arrives with its notifications teed into the step's ``meta["mcp"]["notifications"]``,
and the answering event is held back while the step is written, then sent, followed by
whatever the server streams after it. So a real call is relayed byte for byte, and the
client never holds an answer the record does not yet have.

Calls the server never sees (stub, deny, replay, dropped swallow) and calls it never
answered (timeout, crash, an answer over a limit) are answered by the proxy: plain JSON
when nothing was sent yet, an event on the open stream otherwise. Cancelling a call
changes nothing else on the wire: the step is recorded interrupted, and the server's
stream goes on to the client as the server keeps it, until the server ends it.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import anyio

from litmus_sandbox import ConfigError, OpenCall
from litmus_sandbox._model.safe_text import for_terminal

from ._downstream import ClientStalled, Downstream
from ._http_exchange import CLIENT_GONE as CLIENT_GONE
from ._http_exchange import CutOff, Exchange, Undecodable
from ._http_sessions import HttpSessions
from ._jsonrpc import CONNECTION_CLOSED, error_message, parse
from ._recording import ANSWERED_BY_THE_PROXY, UpstreamGone
from ._relay import FinishCall, Relay, ToClient, ToServer
from ._relay._states import Pending, State
from ._sse import encode_event


class HttpToolCall:
    """Record one ``tools/call`` POST and answer it (the core's ``pending.handle``)."""

    def __init__(
        self,
        proxy: HttpSessions,
        key: str,
        down: Downstream,
        url: str,
        headers: list[tuple[bytes, bytes]],
        core: Relay,
        pending: Pending,
    ) -> None:
        assert pending.call is not None
        self.proxy = proxy
        self.key = key
        self.down = down
        self.url = url
        self.headers = headers
        self.core = core
        self.pending = pending
        self.state = pending.call
        pending.handle = self
        self.exchange = Exchange(
            proxy.client,
            down,
            url,
            headers,
            self.state.request,
            pending.id,
            note=self.state.note,
            on_client_gone=self._client_left,
            max_bytes=proxy.max_message_bytes,
        )
        self.scope = anyio.CancelScope()
        #: Set once the call is over (its step recorded, its reply sent or given up).
        self.finished = anyio.Event()
        #: Set once the client has the call's answer (what the server streams after it
        #: may go on).
        self.answered = anyio.Event()
        #: Set once the call's own response is complete (for a task: the task; its
        #: step may still wait for the result).
        self.responded = anyio.Event()
        #: Set once the step is written (a held tasks/result answer may go on).
        self.recorded = anyio.Event()
        #: Why the server was cut off (it broke a limit), if it was.
        self.cut_off: str | None = None
        self._reply: bytes = b""
        self._result: FinishCall | None = None
        self._how = "interrupted"
        self._result_came = anyio.Event()

    def finish(self, action: FinishCall) -> None:
        """The core's word on how the call ended: its task's result came (``answered``),
        or it was given up (the client cancelled it)."""
        if action.how == "answered":
            self._result = action
            self._result_came.set()
        else:
            self._how = action.how  # timed out (the core's deadline), or interrupted
            self.scope.cancel()

    def _client_left(self) -> None:
        """The client hung up on the call's stream before its answer (TS SDK v1 cancels
        a call so over HTTP): the call is interrupted, as if it had cancelled it; the
        server is not told (the client did not tell it), and its late answer is dropped."""
        self._how = "interrupted"
        self.scope.cancel()

    def stop(self, reply: bytes | None) -> None:
        """A signal stops the proxy: the call is interrupted and the client gets
        ``reply`` (its core's error; None: the core no longer held it, the reply is
        the step's), which its step says it was told."""
        if reply is not None:
            self._reply = reply
        self.state.stopped = self.state.stopped or self.proxy.stop_reason
        self.scope.cancel()

    async def run(self) -> None:
        try:
            async with self.exchange:
                await self._run()
        finally:
            self.recorded.set()  # over: a tasks/result held for it goes on
            self.responded.set()
            self.finished.set()

    async def _run(self) -> None:
        proxy, state, pending = self.proxy, self.state, self.pending
        slot = proxy.slot(self.key)
        slot.touch()  # a call makes the session one to record
        call_key = (self.key, pending.key)
        proxy.calls[call_key] = self
        try:
            with self.scope:
                ep = await slot.recorder()
                call = ep.begin_call(pending.tool, pending.args)
                mode = ep.sandbox.policy.for_tool(pending.tool).mode
                if (
                    call is None
                    and state.output_schema is None
                    and not proxy.listed
                    and mode in ANSWERED_BY_THE_PROXY
                ):
                    await proxy.learn_schemas(self.url, self.headers, parse(state.request))
                    state.output_schema = proxy.output_schemas.get(pending.tool)
                if mode == "emulate" and (listed := proxy.tools.get(pending.tool)) is not None:
                    ep.sandbox.describe_tools({pending.tool: listed})  # the emulator is told
                try:
                    if call is not None:
                        pending.inline = True
                        await self._run_inline(call, ep.sandbox.max_result_bytes)
                    else:
                        await ep.call_with(
                            lambda _t, _a: self._forward(None),
                            pending.tool,
                            pending.args,
                            finalize=functools.partial(
                                state.finalize,
                                cap=ep.sandbox.max_result_bytes,
                                whole=ep.whole_shown,
                            ),
                        )
                except ConfigError:
                    if not ep.ended:
                        raise
                    # The session ended (DELETE) while the call ran: no step can follow the
                    # episode's end; the client is told, the other sessions go on.
                    state.reply_kind = "error"
                    text = "litmus-sandbox: the session ended while this call ran"
                    state.reply = error_message(pending.id, CONNECTION_CLOSED, text)
            await self._recorded()
            self.recorded.set()
            if self.cut_off is not None:
                slot.abort(self.cut_off)
            elif (
                state.reply_kind == "error"
                and not state.timed_out
                and self.exchange.plain is None
                and "invalid_utf8" not in state.extra_meta  # a failed call, as over stdio
            ):
                # No HTTP answer at all (connection refused or dropped mid-stream).
                slot.abort(state.failure or "the MCP server did not answer")
            try:
                await self._send_reply()
            except ClientStalled as exc:
                # The step says what was sent; the end record says it did not arrive.
                slot.abort(str(exc))
                slot.end_note("client_stopped_reading", exc.unsent)
                slot.count("undelivered_replies")
                print(for_terminal(f"litmus-sandbox: {exc}"), file=sys.stderr)
                raise
        finally:
            proxy.calls.pop(call_key, None)
            if pending.state is State.ABANDONED:
                self.core.forget(pending)  # given up: over HTTP its answer cannot come now
            self.answered.set()

    async def _run_inline(self, call: OpenCall, cap: int) -> None:
        """A plain real call, with no task or timer of its own (``begin_call``): the core
        keeps its deadline and says how it ended, as over stdio."""
        finalize = functools.partial(self.state.finalize, cap=cap)
        try:
            shown = await self._forward(call.limit)
        except anyio.get_cancelled_exc_class():
            if self._how == "timed_out" and call.limit is not None:
                call.timed_out(finalize)  # the core's expire said so
            else:
                call.interrupted(finalize)  # cancelled by the client, a stop, a DELETE
            raise
        except Exception as exc:  # recorded and shown as a runner's exception would be
            call.failed(exc, finalize)
        else:  # answered: relayed as it is, the step built once
            call.done(shown, meta={"mcp": self.state.relayed(cap)})

    async def _recorded(self) -> None:
        """The step is written: the core says the reply, and what else follows (after
        a stop, the core said it already: ``stop``)."""
        for action in self.proxy.perform(self.key, self.core.recorded(self.pending)):
            if isinstance(action, ToClient):
                self._reply = action.data.rstrip(b"\n")
            elif isinstance(action, ToServer):  # a call that timed out: the server is told
                await self.proxy.notify_upstream(self.url, self.headers, action.data)

    async def _send_reply(self) -> None:
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
        elif state.reply_kind in ("result", "error") and (reply := self._reply or state.reply):
            if down.started:
                await down.body(encode_event(reply))
                await down.end()
            else:
                await down.whole(200, b"application/json", reply)
        elif down.started:
            await down.end()  # interrupted: close the stream, nothing to say
        # An interrupted call with nothing sent leaves the response unsent: the
        # connection closes, which is all a client that cancelled expects.

    async def _forward(self, limit: float | None) -> Any:
        """The runner: POST upstream, relay the stream's notifications, return the answer
        (for a task: the result its tasks/result brings); ``limit``: seconds an inline
        call may take (the core keeps its deadline)."""
        core, state, exchange = self.core, self.state, self.exchange
        if core.forward(self.pending, anyio.current_time(), limit) is None:
            raise UpstreamGone(core.stopped or core.gone_reason)
        if limit is not None:
            self.proxy.arm(core)
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
        line = raw if raw.endswith(b"\n") else raw + b"\n"
        actions = self.proxy.perform(self.key, core.from_server(line, anyio.current_time()))
        if self.pending.state is State.TASK:
            # The server made the call a task (the core's ToClient): the client gets it
            # now, and the step waits for the result the client's tasks/result brings.
            await self._show_task()
            await self._result_came.wait()
            result = self._result
            assert result is not None
            assert result.body is not None
            return state.answered(result.raw, result.body)
        if not any(isinstance(a, FinishCall) for a in actions):
            raise UpstreamGone("the answer came after the call was given up")
        return state.answered(raw, envelope)

    async def _show_task(self) -> None:
        try:
            with anyio.CancelScope(shield=True):  # never half a response
                await self.exchange.release(self.answered)
        except CLIENT_GONE:
            pass  # the client left: its tasks/result, if it comes, still brings it
        self.answered.set()
        self.responded.set()  # the client's connection goes on; the step waits

"""The stdio session's ``tools/call`` paths, and the deadlines of what it forwards.

Theory of operation: see ``_stdio.py``. A plain real call runs inline, with no task of
its own (``_start_inline``); any other call runs in a task that records it through
``EpisodeRecorder.call_with`` (``_run_call``), the client pump waiting until it is
dispatched. One watcher keeps every inline call's and forwarded request's deadline
(``_watch_deadlines``); a call in a task keeps its own timer.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import anyio

from litmus_sandbox import OpenCall

from ._jsonrpc import (
    PROTOCOL_VERSION_META_KEY,
    REQUEST_TIMEOUT,
    Message,
    error_message,
    id_key,
    listing_request,
    no_answer,
    progress_token_of,
)
from ._recording import ANSWERED_BY_THE_PROXY, CallState, UpstreamGone
from ._schema import listed_schemas
from ._stdio_base import InlineCall, SessionBase, Waiter


class CallSession(SessionBase):
    """A stdio session's ``tools/call`` dispatch and its deadlines."""

    async def _start_call(self, line: bytes, msg: Message, tool: str, args: dict[str, Any]) -> None:
        key = id_key(msg.id)
        if key in self._calls or key in self._inline or key in self._starting:
            text = "litmus-sandbox: a request with this id is already in flight"
            await self._to_client(error_message(msg.id, -32600, text) + b"\n")
            return
        # Until it is in flight (the first call opens the episode; the tools may be listed
        # first), a stop still finds it and answers it.
        self._starting[key] = msg.id
        try:
            await self._dispatch_call(key, line, msg, tool, args)
        finally:
            self._starting.pop(key, None)

    async def _dispatch_call(
        self, key: tuple[str, Any], line: bytes, msg: Message, tool: str, args: dict[str, Any]
    ) -> None:
        state = CallState(msg.id, line, stateless=PROTOCOL_VERSION_META_KEY in msg.meta)
        state.output_schema = self._schemas.get(tool)
        token = progress_token_of(msg)
        if token is not None:
            self._progress[id_key(token)] = state
        if not self._server_gone.is_set():
            ep = await self._slot.recorder()  # the first call opens the episode: it may wait
            if not self._server_gone.is_set() and (call := ep.begin_call(tool, args)):
                await self._start_inline(key, state, call, token)
                return
        if (
            state.output_schema is None
            and not self._listed
            and self._sandbox.policy.for_tool(tool).mode in ANSWERED_BY_THE_PROXY
        ):
            await self._learn_schemas(msg)
            state.output_schema = self._schemas.get(tool)
        scope = anyio.CancelScope()
        self._calls[key] = (state, scope)
        if self._idle.is_set():
            self._idle = anyio.Event()
        self._tg.start_soon(self._run_call, key, state, scope, tool, args, token)
        # Read on only once the call is dispatched: the server sees the client's order.
        await state.dispatched.wait()

    async def _learn_schemas(self, like: Message) -> None:
        """Ask the server for its tools (once) before the proxy answers a call itself.

        A client validates a result against the tool's declared output schema, and may
        list the tools only after its first call (the official SDK does): a stand-in
        result must carry structured content that fits, so the proxy learns the schemas
        first. The answers are the proxy's own and never reach the client.
        """
        self._listed = True
        if self._server_gone.is_set():
            return

        async def fetch(rid: str, cursor: Any) -> Any:
            waiter = self._waiters[id_key(rid)] = Waiter()
            try:
                await self._to_upstream(listing_request(rid, cursor, like) + b"\n")
                _, body = await waiter.wait()
            except UpstreamGone:
                return None
            finally:
                if self._waiters.pop(id_key(rid), None) is not None:
                    self._abandoned.add(id_key(rid))  # gave up: a late answer is ours to drop
            return body.get("result")

        with anyio.move_on_after(self._proxy.timeout or 30):
            self._schemas.update(await listed_schemas(fetch))

    async def _start_inline(
        self, key: tuple[str, Any], state: CallState, call: OpenCall, token: Any
    ) -> None:
        """Forward a plain real call with no task of its own (the relay's hot path).

        The server pump finishes it when the answer comes (``_pump_server``), the deadline
        watcher when it takes too long, the client pump when the client cancels it, the
        wind-down when the server dies: whichever comes first records the step and
        replies, exactly as ``_run_call`` does for the same outcome.
        """
        inline = InlineCall(self, key, state, call, token)
        # In flight, with its deadline, before the request is written: a server that does
        # not read its stdin cannot hold the call (or this pump) past the call's limit.
        self._inline[key] = inline
        if call.limit is not None:
            inline.deadline = self._deadline_in(call.limit)
        state.forwarded = True
        try:
            if not self._to_upstream_now(state.request):
                # The pipe is full (or another write is under way): wait, within the
                # call's limit; a write cut short keeps its rest for the next one.
                with anyio.move_on_after(math.inf if call.limit is None else call.limit):
                    await self._to_upstream(b"")
        except UpstreamGone as exc:
            state.forwarded = False
            self._unforwarded.add(key)
            state.failure = str(exc)
            if self._inline.pop(key, None) is not None:
                await inline.end(functools.partial(call.failed, exc))

    def _deadline_in(self, seconds: float) -> float:
        """A deadline ``seconds`` from now, which the deadline watcher will keep."""
        deadline = anyio.current_time() + seconds
        if deadline < self._deadlines.deadline:
            self._deadlines.deadline = deadline  # wake the watcher earlier
        return deadline

    async def _watch_deadlines(self) -> None:
        """Time out inline calls and other forwarded requests: one timer for all, set to
        the earliest deadline. (A call in a task of its own keeps its own timer.)"""
        while True:
            with anyio.CancelScope() as self._deadlines:
                pending = [c.deadline for c in self._inline.values() if c.deadline is not None]
                pending += [d for d, _ in self._request_deadlines.values()]
                self._deadlines.deadline = min(pending, default=math.inf)
                await anyio.sleep_forever()
            now = anyio.current_time()
            late = [
                c for c in self._inline.values() if c.deadline is not None and c.deadline <= now
            ]
            for inline in late:
                if self._inline.pop(inline.key, None) is None:
                    continue  # answered or cancelled while an earlier one was replied to
                self._abandoned.add(inline.key)  # a late answer must not reach the client
                await inline.end(inline.call.timed_out)
            overdue = [k for k, (d, _) in self._request_deadlines.items() if d <= now]
            for key in overdue:
                if (entry := self._request_deadlines.pop(key, None)) is not None:
                    await self._request_timed_out(key, entry[1])

    async def _request_timed_out(self, key: tuple[str, Any], method: str) -> None:
        """A forwarded request the server left unanswered: the client gets an error (the
        proxy never hangs it), a late answer is dropped, the episode ends aborted."""
        request_id = self._requests.pop(key, None)
        if request_id is None:
            return
        self._abandoned.add(key)
        self._listing.discard(key)
        self._handshake.pop(key, None)
        reason = no_answer(method, self._proxy.timeout)
        text = f"litmus-sandbox: {reason}"
        await self._to_client(error_message(request_id, REQUEST_TIMEOUT, text) + b"\n")
        # initialize cannot be cancelled (the protocol says so).
        await self._gave_up(request_id, reason, tell_server=method != "initialize")

    async def _run_call(
        self,
        key: tuple[str, Any],
        state: CallState,
        scope: anyio.CancelScope,
        tool: str,
        args: dict[str, Any],
        token: Any,
    ) -> None:
        try:
            try:
                with scope:
                    ep = await self._slot.recorder()
                    await ep.call_with(
                        lambda _t, _a: self._forward(key, state),
                        tool,
                        args,
                        finalize=functools.partial(
                            state.finalize, cap=ep.sandbox.max_result_bytes, whole=ep.whole_shown
                        ),
                    )
            finally:
                state.dispatched.set()
                del self._calls[key]
                if token is not None:
                    self._progress.pop(id_key(token), None)
                if not state.forwarded:
                    self._unforwarded.add(key)
            await self.reply(tool, state)
        finally:
            if not self._calls:
                self._idle.set()  # the session may wind down: every answer has been sent

    async def _forward(self, key: tuple[str, Any], state: CallState) -> Any:
        """The runner: send the original request upstream and await its response."""
        if self._server_gone.is_set():
            state.dispatched.set()
            raise UpstreamGone(self._gone_reason)
        waiter = self._waiters[key] = Waiter()
        try:
            try:
                await self._to_upstream(state.request)
            finally:
                state.dispatched.set()
            state.forwarded = True
            raw, body = await waiter.wait()
        except anyio.get_cancelled_exc_class():
            # Timed out or cancelled by the client: a late answer must not reach the
            # client (it already has an error, or expects nothing).
            self._abandoned.add(key)
            raise
        except UpstreamGone as exc:
            state.failure = str(exc)
            raise
        finally:
            self._waiters.pop(key, None)
        return state.answered(raw, body)

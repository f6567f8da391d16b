"""The stdio driver's ``tools/call`` paths: inline, or in a task; and the schemas.

Theory of operation: see ``_stdio.py``. The core starts a call (``StartCall``); the
recorder says how it runs. A plain real call (``EpisodeRecorder.begin_call``) runs
inline, with no task of its own: it is forwarded at once and the core keeps its deadline;
whatever ends it (the answer, the deadline, a cancel, the server's end) comes back as a
``FinishCall``, and the step is recorded there, then the reply the core gives is sent.
Any other call runs in a task through ``EpisodeRecorder.call_with`` (its own timer), the
client's pump waiting until it is dispatched (sent upstream, or answered by the policy):
the server sees the client's messages in the client's order.
"""

from __future__ import annotations

import functools
from typing import Any

import anyio

from litmus_sandbox import OpenCall

from ._jsonrpc import listing_request, parse
from ._recording import ANSWERED_BY_THE_PROXY, UpstreamGone
from ._relay import FinishCall
from ._relay._states import Pending
from ._schema import listed_schemas
from ._stdio_base import SessionBase, Waiter

#: A call ``begin_call`` would not run inline (``_start_now`` asked): it runs in a task.
_IN_A_TASK = object()


class TaskCall:
    """A call run in a task: how the core's ``FinishCall`` reaches it."""

    def __init__(self) -> None:
        self.waiter = Waiter()
        self.scope = anyio.CancelScope()
        #: Set once sent upstream, or once the policy answered without the server.
        self.dispatched = anyio.Event()


class CallSession(SessionBase):
    """A stdio session's ``tools/call`` dispatch."""

    _tasks = 0
    _idle: anyio.Event

    def _start_now(self, pending: Pending) -> bool:
        core = self._core
        ep = self._slot.recorder_now
        if ep is None or core.server_gone:
            return False  # the first call opens the episode: it waits (``_start``)
        call = ep.begin_call(pending.tool, pending.args)
        if call is None:
            pending.handle = _IN_A_TASK  # ``_start`` runs it
            return False
        pending.inline, pending.handle = True, call
        forward = core.forward(pending, self._line_at, call.limit)  # the line just read
        if forward is not None:
            self.perform_now(forward)
        if forward is None or self._upstream_broken:
            self._finish_now(self._unforwarded(pending))
        return True

    async def _start(self, pending: Pending) -> None:
        core = self._core
        if not core.server_gone and pending.handle is not _IN_A_TASK:
            ep = await self._slot.recorder()  # the first call opens the episode: it may wait
            if not core.server_gone and (call := ep.begin_call(pending.tool, pending.args)):
                pending.inline, pending.handle = True, call
                forward = core.forward(pending, self._now(), call.limit)
                if forward is not None:
                    await self.perform(forward)
                if forward is None or self._upstream_broken:
                    await self._finish(self._unforwarded(pending))
                return
        state = pending.call
        assert state is not None
        mode = self._sandbox.policy.for_tool(pending.tool).mode
        if state.output_schema is None and not core.listed and mode in ANSWERED_BY_THE_PROXY:
            await self._learn_schemas(pending)
            state.output_schema = core.schemas.get(pending.tool)
        if mode == "emulate" and (listed := core.tools.get(pending.tool)) is not None:
            self._sandbox.describe_tools({pending.tool: listed})  # the emulator is told
        task = pending.handle = TaskCall()
        self._tasks += 1
        if self._idle.is_set():
            self._idle = anyio.Event()
        self._tg.start_soon(self._run_call, pending, task)
        # Read on only once the call is dispatched: the server sees the client's order.
        await task.dispatched.wait()

    def _unforwarded(self, pending: Pending) -> FinishCall:
        """How a call the server never got ends."""
        assert pending.call is not None
        reason = self._core.gone_reason
        if self._upstream_broken:
            reason = "the MCP server is gone (its stdin is closed)"
        pending.call.forwarded = False
        return FinishCall(pending, "failed", reason=reason)

    async def _finish(self, action: FinishCall) -> None:
        pending = action.pending
        if pending.kind == "call" and pending.inline:
            self._record_step(pending, action)
            await self.perform(self._core.recorded(pending))
            self._reply_fate(pending)
        else:
            self._wake_task(action)

    def _finish_now(self, action: FinishCall) -> None:
        pending = action.pending
        if pending.kind == "call" and pending.inline:
            self._record_step(pending, action)
            self.perform_now(self._core.recorded(pending))  # never waits: no StartCall
            self._reply_fate(pending)
        else:
            self._wake_task(action)

    def _wake_task(self, action: FinishCall) -> None:
        """Tell the task that runs the call (or waits for an answer) how it ended."""
        pending, how = action.pending, action.how
        handle = pending.handle
        if isinstance(handle, TaskCall):
            if how == "interrupted":
                handle.scope.cancel()  # recorded interrupted by call_with
                return
            handle = handle.waiter
        if isinstance(handle, Waiter):
            if how == "answered":
                assert action.body is not None
                handle.set(action.raw, action.body)
            else:
                handle.fail(action.reason or self._core.gone_reason)

    def _record_step(self, pending: Pending, action: FinishCall) -> None:
        """Record an inline call's step as ``action`` says it ended (the reply is the
        core's ``recorded``)."""
        call: OpenCall = pending.handle
        state = pending.call
        assert state is not None
        cap = state.cap = self._sandbox.max_result_bytes
        finalize = state.finalize_capped
        how = action.how
        if how == "answered":
            assert action.body is not None
            try:
                shown = state.answered(action.raw, action.body)
            except Exception as exc:  # a JSON-RPC error: recorded as a runner's would be
                call.failed(exc, finalize)
            else:  # the hot path: relayed as it is, the step built once
                call.done(shown, meta={"mcp": state.relayed(cap)})
        elif how == "failed":
            state.failure = state.failure or action.reason
            call.failed(UpstreamGone(action.reason), finalize)
        elif how == "timed_out":
            call.timed_out(finalize)
        else:
            call.interrupted(finalize)

    async def _run_call(self, pending: Pending, task: TaskCall) -> None:
        state = pending.call
        assert state is not None
        try:
            try:
                with task.scope:
                    ep = await self._slot.recorder()
                    await ep.call_with(
                        lambda _t, _a: self._forward(pending, task),
                        pending.tool,
                        pending.args,
                        finalize=functools.partial(
                            state.finalize, cap=ep.sandbox.max_result_bytes, whole=ep.whole_shown
                        ),
                    )
            finally:
                task.dispatched.set()
            await self.perform(self._core.recorded(pending))
            self._reply_fate(pending)
        finally:
            self._tasks -= 1
            if not self._tasks:
                self._idle.set()  # the session may wind down: every answer has been sent

    async def _forward(self, pending: Pending, task: TaskCall) -> Any:
        """The runner: send the original request upstream and await its answer."""
        state = pending.call
        assert state is not None
        forward = self._core.forward(pending, self._now())
        try:
            if forward is None:
                raise UpstreamGone(self._core.gone_reason)
            await self.perform(forward)
        finally:
            task.dispatched.set()
        try:
            if self._upstream_broken:
                state.forwarded = False
                raise UpstreamGone("the MCP server is gone (its stdin is closed)")
            raw, body = await task.waiter.wait()
        except UpstreamGone as exc:
            state.failure = str(exc)
            raise
        return state.answered(raw, body)

    async def _learn_schemas(self, pending: Pending) -> None:
        """Ask the server for its tools (once) before the proxy answers a call itself.

        A client validates a result against the tool's declared output schema, and may
        list the tools only after its first call (the official SDK does): a stand-in
        result must carry structured content that fits, so the proxy learns the schemas
        first, speaking as the call does (its envelope). The answers are the proxy's
        own and never reach the client.
        """
        core = self._core
        core.listed = True
        assert pending.call is not None
        like = parse(pending.call.request)

        async def fetch(rid: str, cursor: Any) -> Any:
            made = core.own_request(rid, listing_request(rid, cursor, like) + b"\n")
            if made is None:
                return None
            own, actions = made
            waiter = own.handle = Waiter()
            try:
                await self.perform(actions)
                _, body = await waiter.wait()
            except UpstreamGone:
                return None
            finally:
                core.give_up(own)  # a late answer is the proxy's to drop
            return body.get("result")

        with anyio.move_on_after(self._proxy.timeout or 30):
            core.schemas.update(await listed_schemas(fetch, core.tools))

"""The stdio session's state, its two writers, and the replies it sends.

Theory of operation: see ``_stdio.py``. A session is built in three layers, each in its
own module: this one holds what every part shares (the pending requests and calls, the
writes to the client and to the server, each serialized by a lock, and the replies the
recorded steps decide); ``_stdio_calls.py`` adds the ``tools/call`` paths and the request
deadlines; ``_stdio_session.py`` the pumps, the stop and the wind-down.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, Process, TaskGroup

from litmus_sandbox import OpenCall, Sandbox, ToolCallStep
from litmus_sandbox._runtime.open_call import Finalize

from ._episodes import EpisodeSlot
from ._fdstream import FdSendStream
from ._jsonrpc import CONNECTION_CLOSED, cancelled_message, error_message, id_key, no_answer
from ._recording import CallState, UpstreamGone


class Waiter:
    """The response to one forwarded ``tools/call``, or why it will never come."""

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.raw = b""
        self.body: dict[str, Any] = {}
        self.failure: str | None = None

    def set(self, raw: bytes, body: dict[str, Any]) -> None:
        self.raw, self.body = raw, body
        self.event.set()

    def fail(self, reason: str) -> None:
        self.failure = reason
        self.event.set()

    async def wait(self) -> tuple[bytes, dict[str, Any]]:
        await self.event.wait()
        if self.failure is not None:
            raise UpstreamGone(self.failure)
        return self.raw, self.body


class InlineCall:
    """A plain real call run inline by the session (see ``CallSession._start_inline``)."""

    def __init__(
        self,
        session: SessionBase,
        key: tuple[str, Any],
        state: CallState,
        call: OpenCall,
        token: Any,
    ) -> None:
        self.session = session
        self.key = key
        self.state = state
        self.call = call
        self.token = token
        self.deadline: float | None = None

    def _finalize(self, step: ToolCallStep) -> ToolCallStep:
        return self.state.finalize(step, cap=self.session.max_result_bytes)

    def record(self, finish: Callable[[Finalize], ToolCallStep]) -> None:
        """Record the step with ``finish`` (an ``OpenCall`` method)."""
        finish(self._finalize)
        if self.token is not None:
            self.session.forget_progress(self.token)

    async def end(self, finish: Callable[[Finalize], ToolCallStep]) -> None:
        """Record the step with ``finish``, then send the reply it decided."""
        self.record(finish)
        await self.session.reply(self.call.tool, self.state)

    async def answered(self, raw: bytes, body: dict[str, Any]) -> None:
        try:
            shown = self.state.answered(raw, body)
        except Exception as exc:  # a JSON-RPC error: recorded as the runner's would be
            await self.end(functools.partial(self.call.failed, exc))
        else:
            await self.end(functools.partial(self.call.done, shown))


class ProxySettings(Protocol):
    """What a session reads of its ``StdioProxy``."""

    @property
    def command(self) -> list[str]: ...
    @property
    def case_id(self) -> str | None: ...
    @property
    def agent(self) -> str | None: ...
    @property
    def timeout(self) -> float | None: ...
    @property
    def grace(self) -> float: ...


class SessionBase:
    """A stdio session's state, shared by its layers, and its writes to either side."""

    _slot: EpisodeSlot
    _tg: TaskGroup

    def __init__(
        self,
        proxy: ProxySettings,
        sandbox: Sandbox,
        process: Process,
        upstream: tuple[ByteSendStream, ByteReceiveStream],
        client_in: ByteReceiveStream,
        client_out: ByteSendStream,
    ) -> None:
        self._proxy = proxy
        self._sandbox = sandbox
        self._process = process
        self._upstream_in, self._upstream_out = upstream
        self._client_in = client_in
        self._client_out = client_out
        # fast_acquire: an uncontended lock must not yield to the loop (latency per call).
        self._to_client_lock = anyio.Lock(fast_acquire=True)
        self._to_upstream_lock = anyio.Lock(fast_acquire=True)
        #: Lines _to_upstream_now queued while another write held the lock.
        self._queued: deque[bytes] = deque()
        self._waiters: dict[tuple[str, Any], Waiter] = {}
        #: Forwarded requests other than tools/call that await an answer (key -> id).
        self._requests: dict[tuple[str, Any], Any] = {}
        #: Their deadlines (the proxy's timeout) and methods.
        self._request_deadlines: dict[tuple[str, Any], tuple[float, str]] = {}
        self._calls: dict[tuple[str, Any], tuple[CallState, anyio.CancelScope]] = {}
        #: tools/call requests read but not yet in flight (key -> id).
        self._starting: dict[tuple[str, Any], Any] = {}
        #: Plain real calls in flight, run inline (no task of their own): see _start_inline.
        self._inline: dict[tuple[str, Any], InlineCall] = {}
        self._deadlines = anyio.CancelScope()  # replaced by the deadline watcher's
        self._progress: dict[tuple[str, Any], CallState] = {}
        self._unforwarded: set[tuple[str, Any]] = set()
        self._abandoned: set[tuple[str, Any]] = set()
        #: initialize / server/discover / tools/list requests awaiting the server's answer
        #: (key -> method): the answers go in the header, for server-less replay.
        self._handshake: dict[tuple[str, Any], str] = {}
        self._answers: dict[str, Any] = {}
        #: tools/list requests awaiting their answer, and the output schemas learnt from them.
        self._listing: set[tuple[str, Any]] = set()
        self._schemas: dict[str, dict[str, Any]] = {}
        #: Whether the tools were listed (by the client, or by the proxy for itself).
        self._listed = False
        self._idle = anyio.Event()
        self._idle.set()
        self._stdout_eof = anyio.Event()
        self._server_gone = anyio.Event()
        self._gone_reason = "the MCP server exited"
        self._client_gone = False
        self._slot_made = False
        self._stop_scope = anyio.CancelScope()
        self._stopped: str | None = None
        self._pending_at_stop: list[Any] = []

    @property
    def max_result_bytes(self) -> int:
        return self._sandbox.max_result_bytes

    def forget_progress(self, token: Any) -> None:
        self._progress.pop(id_key(token), None)

    async def reply(self, tool: str, state: CallState) -> None:
        """Send the client the reply the recorded step decided (see ``CallState``)."""
        if state.timed_out:
            reason = no_answer(f"tools/call {tool!r}")
            await self._gave_up(state.request_id, reason)
        if state.reply_kind == "relay" and state.envelope_raw is not None:
            await self._to_client(state.envelope_raw)
        elif state.reply_kind in ("result", "error"):
            await self._to_client(state.reply + b"\n")

    async def _gave_up(self, request_id: Any, reason: str, *, tell_server: bool = True) -> None:
        """A request the server left unanswered: the episode ends aborted with ``reason``
        (a hung server spoils the run), and the server is told ``notifications/cancelled``."""
        self._slot.abort(reason)
        print(f"litmus-sandbox: {reason}", file=sys.stderr)
        if tell_server and not self._server_gone.is_set():
            # Best effort, and bounded: a server that stopped reading must not hold up the
            # caller (the deadline watcher serves every call); what is unsent stays queued.
            with anyio.move_on_after(1), contextlib.suppress(UpstreamGone):
                await self._to_upstream(cancelled_message(request_id, reason) + b"\n")

    async def _refuse(self, request_id: Any, reason: str | None = None) -> None:
        """Answer a request the server will never answer (gone, or the proxy stopping)."""
        text = f"litmus-sandbox: {reason or self._gone_reason}"
        await self._to_client(error_message(request_id, CONNECTION_CLOSED, text) + b"\n")

    async def _to_client(self, data: bytes) -> None:
        try:
            async with self._to_client_lock:
                await self._client_out.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._client_gone = True  # keep draining the server so it never blocks

    def _to_upstream_now(self, data: bytes) -> bool:
        """Write ``data`` to the server without waiting, if it can go at once whole; False
        when it must be waited for (then ``await _to_upstream(b"")`` finishes it).

        Raises: UpstreamGone: the server's stdin is closed.
        """
        if (
            self._queued
            or self._to_upstream_lock.locked()
            or not isinstance(self._upstream_in, FdSendStream)
        ):
            self._queued.append(data)  # behind what waits already: the server's order stands
            return False
        try:
            return self._upstream_in.send_nowait(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise UpstreamGone("the MCP server is gone (its stdin is closed)") from exc

    async def _to_upstream(self, data: bytes) -> None:
        """Raises: UpstreamGone: the server's stdin is closed."""
        try:
            async with self._to_upstream_lock:
                while self._queued:  # what _to_upstream_now could not write, in order
                    await self._upstream_in.send(self._queued.popleft())
                if data:
                    await self._upstream_in.send(data)
                elif isinstance(self._upstream_in, FdSendStream):
                    await self._upstream_in.flush()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise UpstreamGone("the MCP server is gone (its stdin is closed)") from exc

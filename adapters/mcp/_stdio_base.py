"""The stdio driver's state, its writes to either side, and how it performs actions.

Theory of operation: see ``_stdio.py``. Every decision is the relay core's
(``_relay/``); a session is a thin driver in three layers, each in its own module: this
one holds the pipes and performs the core's actions (``perform``: bytes written, facts
noted, the episode told why it aborts); ``_stdio_calls.py`` runs the calls the core
starts and finishes; ``_stdio_session.py`` has the pumps, the clock, the stop and the
wind-down.

Writes never re-encode. To the server, a line goes at once when the pipe takes it (no
trip through the loop: the relay's hot path), else it is queued and a flusher writes it,
so a server that stops reading never blocks the client's pump (past
``max_message_bytes`` queued, the pump waits: memory stays bounded). To the client,
under a lock; a client that reads nothing for ``timeout`` seconds while an answer waits
is recorded as such (the episode aborts saying so) and gets nothing more. A call's reply
the client never gets (it stopped reading, or closed its output) is counted in the end
record (``undelivered_replies``): its step, written first, says what was sent.
"""

from __future__ import annotations

import abc
import math
import sys
from typing import Any, Protocol

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, Process, TaskGroup

from litmus_sandbox import Sandbox
from litmus_sandbox._model.safe_text import for_terminal

from ._episodes import EpisodeSlot
from ._fdstream import FdSendStream
from ._recording import UpstreamGone
from ._relay import (
    Abort,
    Action,
    CutOff,
    EndStartup,
    FinishCall,
    KeepAnswer,
    Note,
    Offer,
    Relay,
    StartCall,
    ToClient,
    ToServer,
)
from ._relay._limits import STALL_SECONDS_WITHOUT_LIMIT
from ._relay._states import Pending


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
    @property
    def max_message_bytes(self) -> int: ...


class Waiter:
    """The server's answer to a request a task waits for, or why it will never come."""

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


class SessionBase(abc.ABC):
    """A stdio session's pipes and core, and the performing of the core's actions."""

    _slot: EpisodeSlot
    _tg: TaskGroup

    def __init__(
        self,
        proxy: ProxySettings,
        sandbox: Sandbox,
        process: Process,
        upstream: tuple[FdSendStream, ByteReceiveStream],
        client_in: ByteReceiveStream,
        client_out: ByteSendStream,
    ) -> None:
        self._proxy = proxy
        self._sandbox = sandbox
        self._process = process
        self._upstream_in, self._upstream_out = upstream
        self._client_in = client_in
        self._client_out = client_out
        self._core = Relay(
            timeout=proxy.timeout,
            max_message_bytes=proxy.max_message_bytes,
            max_answer_bytes=sandbox.max_result_bytes,
            startup=True,  # the server is ours: its start-up is told apart
        )
        # fast_acquire: an uncontended lock must not yield to the loop (latency per call).
        self._to_client_lock = anyio.Lock(fast_acquire=True)
        self._flush_lock = anyio.Lock(fast_acquire=True)
        self._flush_wake = anyio.Event()
        #: The server's stdin is closed: what is written to it is lost (its pump sees why).
        self._upstream_broken = False
        self._client_broken = False
        #: Why the server was cut off (it broke a limit), if it was.
        self._cut_off: str | None = None
        self._deadlines = anyio.CancelScope()  # replaced by the deadline watcher's
        #: Its deadline, as last set (read per message: the scope's is a property).
        self._wake_at = math.inf
        #: The fast path: the client is a pipe too, so every write is tried at once and
        #: queued in order when it cannot be (``perform_now``).
        self.fast = isinstance(client_out, FdSendStream) and client_out.pollable
        self._fd_out = client_out if isinstance(client_out, FdSendStream) else None
        self._client_flush = False
        self._server_flush = False
        #: Call replies queued for the client since its pipe last took everything; those
        #: it never gets are counted in the end record (``undelivered_replies``).
        self._queued_replies = 0
        #: Bytes the client never got once it stopped reading (None: it did not).
        self._unsent: int | None = None
        #: The session is over: replies are not owed any more (``_record_quietly``).
        self._over = False
        #: The clock the core is fed (the event loop's, read without anyio's lookups),
        #: and when the client's line being handled was read.
        self._now = anyio.current_time
        self._line_at = 0.0

    def perform_now(self, actions: list[Action]) -> int:
        """Carry out the core's actions that need no waiting, in order; returns the index
        of the first that does (a call that opens the episode, or runs in a task; the end
        of the server's start-up), or ``len(actions)``. Only on the fast path
        (:attr:`fast`): the client is a pipe.

        A write either side's pipe cannot take whole is queued in order behind what was
        queued before; the flush is owed (``_settle``) before the next line is read.
        """
        for i, action in enumerate(actions):
            kind = type(action)
            if kind is ToClient:
                self._to_client_now(action.data)  # type: ignore[union-attr]
            elif kind is ToServer:
                self._to_server_now(action.data)  # type: ignore[union-attr]
            elif kind is FinishCall:
                assert isinstance(action, FinishCall)
                self._finish_now(action)
            elif kind is StartCall:
                assert isinstance(action, StartCall)
                if not self._start_now(action.pending):
                    return i
            elif kind is EndStartup:
                return i
            else:
                self._note(action)
        if self._core.next_deadline < self._wake_at:
            self._wake_earlier()
        return len(actions)

    def _wake_earlier(self) -> None:
        """Wake the deadline watcher by the core's earliest deadline, if that is sooner."""
        nxt = self._core.next_deadline
        if nxt < self._wake_at:
            self._wake_at = self._deadlines.deadline = nxt

    @property
    def owes_flush(self) -> bool:
        """Whether a write was queued that must be flushed before reading on."""
        return self._client_flush or self._server_flush

    async def perform(self, actions: list[Action]) -> None:
        """Carry out the core's actions, in order (waiting where one must)."""
        if self.fast:
            i = self.perform_now(actions)
            while i < len(actions):
                await self._wait_for(actions[i])
                i += 1 + self.perform_now(actions[i + 1 :])
            if self.owes_flush:
                await self._settle()
            return
        for action in actions:
            kind = type(action)
            if kind is ToClient:
                await self._to_client(action.data)  # type: ignore[union-attr]
            elif kind is ToServer:
                await self._to_server(action.data)  # type: ignore[union-attr]
            elif kind is FinishCall:
                assert isinstance(action, FinishCall)
                await self._finish(action)
            elif kind is StartCall or kind is EndStartup:
                await self._wait_for(action)
            else:
                self._note(action)
        self._wake_earlier()

    def _note(self, action: Action) -> None:
        """The actions that only note facts (and cut the server off)."""
        kind = type(action)
        if kind is Abort:
            assert isinstance(action, Abort)
            self._slot.abort(action.reason)
            if action.say:
                print(for_terminal(f"litmus-sandbox: {action.reason}"), file=sys.stderr)
        elif kind is Offer:
            assert isinstance(action, Offer)
            if not self._slot.opened:
                self._slot.offer_case_id(action.case_id, action.method, touch=False)
                if action.version is not None:
                    self._slot.note("protocol_version", action.version)
        elif kind is KeepAnswer:
            assert isinstance(action, KeepAnswer)
            self._keep_answers(action.answers)
        elif kind is Note:
            assert isinstance(action, Note)
            self._slot.end_note(action.key, action.value)
        elif kind is CutOff:
            assert isinstance(action, CutOff)
            self._cut_off = action.reason
            if self._process.returncode is None:
                self._process.terminate()

    @abc.abstractmethod
    async def _wait_for(self, action: Action) -> None:
        """Start a ``tools/call`` the core began (``StartCall``: ``_stdio_calls.py``), or
        end the server's start-up (``EndStartup``)."""

    @abc.abstractmethod
    def _start_now(self, pending: Pending) -> bool:
        """Start a plain real call at once if it can be (``_stdio_calls.py``)."""

    @abc.abstractmethod
    async def _finish(self, action: FinishCall) -> None:
        """Finish a call as the core says it ended (``_stdio_calls.py``)."""

    @abc.abstractmethod
    def _finish_now(self, action: FinishCall) -> None:
        """:meth:`_finish` on the fast path: the reply too is written at once."""

    def _keep_answers(self, answers: dict[str, Any]) -> None:
        """Keep the server's first answers for server-less replay: in the header's
        ``meta["mcp"]["server_answers"]``, or in the end record's when the episode opened
        first (a client that pipelines its first requests)."""
        ep = self._slot.recorder_now
        if ep is None:
            self._slot.note("server_answers", answers)
        else:
            ep.end_meta.setdefault("mcp", {})["server_answers"] = answers

    def _to_client_now(self, data: bytes) -> None:
        """Write to the client's pipe, or queue behind what waits (ordered by the stream)."""
        if self._client_broken:
            self._lost(data)
            return
        out = self._fd_out
        assert out is not None
        try:
            if not out.send_nowait(data):
                self._client_flush = True
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._client_broken = True  # keep draining the server so it never blocks

    def _to_server_now(self, data: bytes) -> None:
        if self._upstream_broken:
            return
        up = self._upstream_in
        try:
            if up.send_nowait(data):
                return
            self._flush_wake.set()
            if up.pending_bytes > self._core.max_message_bytes:
                self._server_flush = True  # too much queued: wait for the server
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._upstream_broken = True

    async def _settle(self) -> None:
        """Flush what the fast path queued (the pump waits here: memory stays bounded)."""
        if self._client_flush:
            self._client_flush = False
            try:
                async with self._to_client_lock:
                    if not self._client_broken and self._fd_out is not None:
                        await self._flush_client(self._fd_out)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._client_broken = True
        if self._server_flush:
            self._server_flush = False
            try:
                async with self._flush_lock:
                    await self._upstream_in.flush()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._upstream_broken = True

    async def _to_client(self, data: bytes) -> None:
        if self._client_broken:
            self._lost(data)
            return
        out = self._client_out
        try:
            if isinstance(out, FdSendStream) and not self._to_client_lock.locked():
                if out.send_nowait(data):
                    return  # the pipe took it: no trip through the loop
                async with self._to_client_lock:
                    await self._flush_client(out)
                return
            async with self._to_client_lock:
                await out.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._client_broken = True  # keep draining the server so it never blocks

    async def _flush_client(self, out: FdSendStream) -> None:
        limit = self._proxy.timeout
        stall = limit if limit is not None else STALL_SECONDS_WITHOUT_LIMIT
        with anyio.move_on_after(stall) as scope:
            await out.flush()
        if scope.cancelled_caught:
            why = f"the client stopped reading ({out.pending_bytes} bytes unsent when given up on)"
            self._core.engaged = True
            self._slot.abort(why)
            self._unsent = out.pending_bytes
            self._slot.end_note("client_stopped_reading", self._unsent)
            print(for_terminal(f"litmus-sandbox: {why}"), file=sys.stderr)
            self._client_broken = True
            if self._queued_replies:
                self._slot.count("undelivered_replies", self._queued_replies)
        else:
            self._queued_replies = 0  # the client took everything queued

    def _lost(self, data: bytes) -> None:
        """Bytes for a client that stopped reading, never sent: counted as unsent."""
        if self._unsent is not None:
            self._unsent += len(data)
            self._slot.end_note("client_stopped_reading", self._unsent)

    def _reply_fate(self, pending: Pending) -> None:
        """After a call's reply was written, or queued: note one the client will never
        get (its output is closed, or it stopped reading). The step, written first, says
        what was sent; the end record says it did not arrive, and the episode aborts."""
        state = pending.call
        if self._over or state is None or state.reply_kind == "none":
            return
        if self._client_broken:
            first = self._slot.count("undelivered_replies") == 1
            if self._unsent is None:  # else aborted already: it stopped reading
                why = "the client hung up before the answer to a call reached it"
                if first:
                    print(for_terminal(f"litmus-sandbox: {why}"), file=sys.stderr)
                self._core.engaged = True
                self._slot.abort(why)
        elif self._fd_out is not None and self._fd_out.pending_bytes:
            self._queued_replies += 1

    async def _to_server(self, data: bytes) -> None:
        if self._upstream_broken:
            return
        up = self._upstream_in
        try:
            if up.send_nowait(data):
                return
            self._flush_wake.set()
            if up.pending_bytes > self._core.max_message_bytes:
                async with self._flush_lock:  # too much queued: wait for the server
                    await up.flush()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._upstream_broken = True

    async def _flush_upstream(self) -> None:
        """Write what the server's pipe could not take at once, in order."""
        while True:
            await self._flush_wake.wait()
            self._flush_wake = anyio.Event()
            try:
                async with self._flush_lock:
                    await self._upstream_in.flush()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._upstream_broken = True
                return

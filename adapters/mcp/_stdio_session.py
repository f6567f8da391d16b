"""The stdio session: its pumps and clock feeding the relay core, its stop, its end.

Theory of operation: see ``_stdio.py``. ``Session.run`` runs the two pumps, the process
watcher, the deadline watcher and the upstream flusher in one task group until the
server is gone, then tells the core (``Relay.server_closed``) and performs what it says:
whatever still waits is answered. A stop (a signal) cancels it all and performs the
core's ``stop``; after a clean finish (the client closed its input with nothing
pending) a stop only hurries the server's end: the episode stays ``complete``.

The server's phases (``_runtime/phases.py``): its start-up ends when the core says
(``EndStartup``, before the client's first message past the handshake is passed on);
the session ends at a clean finish, before the server's stdin is closed: what follows
is the server's shutdown.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import anyio
from anyio.abc import Process

from litmus_sandbox._runtime.phases import ServerPhases

from ._episodes import EpisodeSlot
from ._fdstream import Later, LineTooLong, feed_lines
from ._relay import Action, FinishCall, StartCall
from ._stdio_calls import CallSession


class Session(CallSession):
    """One stdio session: its pumps, its stop and its end (see ``_stdio.py``)."""

    _stopped: str | None = None
    _stop_actions: list[Action]
    _slot_made = False
    #: The server's phases, held by the proxy across its life (None: not told apart).
    phases: ServerPhases | None = None

    async def run(self) -> int:
        self._now = _clock()
        self._idle = anyio.Event()
        self._idle.set()
        self._stdout_eof = anyio.Event()
        self._server_gone = anyio.Event()
        self._stop_scope = anyio.CancelScope()
        if self._stopped is not None:
            self._stop_scope.cancel()
        async with anyio.create_task_group() as outer:
            self._slot = EpisodeSlot(
                self._sandbox,
                outer,
                case_id=self._proxy.case_id,
                agent=self._proxy.agent,
                meta={"transport": "stdio", "server": self._proxy.command},
            )
            self._slot_made = True
            try:
                with self._stop_scope:
                    async with anyio.create_task_group() as tg:
                        self._tg = tg
                        tg.start_soon(self._pump_server)
                        tg.start_soon(self._pump_client)
                        tg.start_soon(self._watch_process)
                        tg.start_soon(self._watch_deadlines)
                        tg.start_soon(self._flush_upstream)
                        await self._server_gone.wait()
                        await self._wind_down()
                        tg.cancel_scope.cancel()
                if self._stop_scope.cancelled_caught:
                    with anyio.move_on_after(2, shield=True):
                        await self.perform(self._stop_actions)
            except BaseException as exc:
                self._slot.abort(f"proxy failed: {type(exc).__name__}: {exc}")
                raise
            finally:
                with anyio.CancelScope(shield=True):
                    # Whatever ended the session: inline calls still out are interrupted.
                    for action in self._core.interrupted_calls():
                        assert isinstance(action, FinishCall)
                        await self._record_quietly(action)
                    if self._core.engaged:
                        self._slot.touch()
                    await self._slot.close()
        if self._stopped is not None and not self._core.clean:
            return 130
        return 0 if self._core.client_gone else 1

    async def _record_quietly(self, action: FinishCall) -> None:
        """Record an inline call's step with no reply (the session is over)."""
        self._client_broken = self._over = True
        await self._finish(action)

    @property
    def recorded(self) -> bool:
        return self._slot_made and self._slot.opened

    @property
    def sent_anything(self) -> bool:
        return self._core.sent_anything

    @property
    def stopped(self) -> bool:
        """Whether a stop cut the session short (not one after a clean finish)."""
        return self._stopped is not None and not self._core.clean

    def stop(self, reason: str) -> None:
        """End the session early (a signal): the episode ends ``aborted`` with ``reason``
        (unless an earlier reason stands, the client had finished cleanly, or it only
        probed the server: then there is no episode), and each request still waiting
        gets an error."""
        if self._stopped is None:
            self._stopped = reason
            self._stop_actions = self._core.stop(reason)
        if self._slot_made and not self._core.clean and self._core.engaged:
            self._slot.abort(reason)  # a probe (never engaged) has no episode to abort
        if hasattr(self, "_stop_scope"):
            self._stop_scope.cancel()

    def _handle(self, actions: list[Action]) -> Later:
        """Perform a line's actions: at once on the fast path (None), else what the pump
        awaits before the next line."""
        if not self.fast:
            return self.perform(actions)
        i = self.perform_now(actions)
        if i < len(actions):
            return self.perform(actions[i:])
        if self._client_flush or self._server_flush:
            return self._settle()
        return None

    def _client_line(self, line: bytes | LineTooLong) -> Later:
        core = self._core
        if isinstance(line, bytes):
            self._line_at = now = self._now()
            actions = core.from_client(line, now)
        else:
            actions = core.client_too_long(line.size, line.head)
        return self._handle(actions) if actions else None

    def _server_line(self, line: bytes | LineTooLong) -> Later:
        core = self._core
        if isinstance(line, bytes):
            actions = core.from_server(line, self._now())
        else:
            actions = core.server_too_long(line.size)
        return self._handle(actions) if actions else None

    async def _wait_for(self, action: Action) -> None:
        if isinstance(action, StartCall):
            await self._start(action.pending)
        elif self.phases is not None:  # EndStartup: what the server did so far was its own
            await self.phases.end_startup()

    def _cut(self) -> bool:
        return self._cut_off is not None  # not another byte from the server

    async def _pump_client(self) -> None:
        core = self._core
        await feed_lines(self._client_in, core.max_message_bytes, self._client_line)
        core.client_closed(self._now())
        if core.clean and self.phases is not None:
            await self.phases.end_session()  # from now on: the server's shutdown
        # The client hung up: close the server's stdin, as an MCP client does on shutdown
        # (after what is still queued for it).
        with anyio.move_on_after(self._proxy.grace, shield=True):
            if not self._upstream_broken:
                async with self._flush_lock:
                    await self._upstream_in.flush()
            await self._upstream_in.aclose()
        await stop_server(self._process, self._proxy.grace)

    async def _pump_server(self) -> None:
        core = self._core
        await feed_lines(self._upstream_out, core.max_message_bytes, self._server_line, self._cut)
        self._stdout_eof.set()
        self._server_gone.set()

    async def _watch_deadlines(self) -> None:
        """Feed the core the clock at its earliest deadline: one timer for all."""
        while True:
            with anyio.CancelScope() as self._deadlines:
                self._wake_at = self._deadlines.deadline = self._core.next_deadline
                await anyio.sleep_forever()
            if self._core.next_deadline is math.inf:
                continue  # woken early, and the deadline went (answered meanwhile)
            if self._to_client_lock.locked():
                # A write to the client is waiting for it to read: answers behind it
                # are not late, the client is (see _flush_client): that is settled first.
                async with self._to_client_lock:
                    pass
            await self.perform(self._core.expire(self._now()))

    async def _watch_process(self) -> None:
        await self._process.wait()
        # A server that exited may still have lines in the pipe; a grandchild holding
        # stdout open must not keep the session alive.
        with anyio.move_on_after(1.0):
            await self._stdout_eof.wait()
        self._server_gone.set()

    async def _wind_down(self) -> None:
        code = await stop_server(self._process, self._proxy.grace)
        await self.perform(self._core.server_closed(code))
        with anyio.move_on_after(5):
            await self._idle.wait()  # let the calls in tasks record their steps and answer
        if self._core.crashed:
            with anyio.move_on_after(1):
                await self._client_out.aclose()  # the client sees the end too


def _clock() -> Callable[[], float]:
    """The clock anyio reads (``anyio.current_time``), without its lookups per call."""
    try:
        return asyncio.get_running_loop().time
    except RuntimeError:  # not on asyncio (trio): no asyncio loop runs in this thread
        return anyio.current_time


async def stop_server(process: Process, grace: float) -> int:
    """The server's exit status: it gets ``grace`` seconds to exit, then SIGTERM, then SIGKILL."""
    if process.returncode is not None:
        return process.returncode
    with anyio.move_on_after(grace):
        return await process.wait()
    process.terminate()
    with anyio.move_on_after(2):
        return await process.wait()
    process.kill()
    return await process.wait()

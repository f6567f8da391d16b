"""The stdio session's pumps, its stop, and its wind-down when the server is gone.

Theory of operation: see ``_stdio.py``. ``Session.run`` runs the two pumps, the process
watcher and the deadline watcher in one task group until the server is gone, then answers
whatever still waits (``_wind_down``); a stop (a signal) cancels it all and answers what
waits with its reason (``_answer_pending``).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from typing import Any

import anyio
from anyio.abc import Process

from ._episodes import EpisodeSlot
from ._fdstream import iter_lines
from ._jsonrpc import (
    RECORDED_METHODS,
    cancelled_request_of,
    case_id_of,
    id_key,
    parse,
    protocol_version_of,
    tool_call_of,
)
from ._recording import UpstreamGone
from ._schema import output_schemas
from ._stdio_calls import CallSession


class Session(CallSession):
    """One stdio session: its pumps, its stop and its end (see ``_stdio.py``)."""

    async def run(self) -> int:
        async with anyio.create_task_group() as outer:
            self._slot = EpisodeSlot(
                self._sandbox,
                outer,
                case_id=self._proxy.case_id,
                agent=self._proxy.agent,
                meta={"transport": "stdio", "server": self._proxy.command},
            )
            self._slot_made = True
            if self._stopped is not None:
                self._slot.abort(self._stopped)
            try:
                with self._stop_scope:
                    async with anyio.create_task_group() as tg:
                        self._tg = tg
                        tg.start_soon(self._pump_server)
                        tg.start_soon(self._pump_client)
                        tg.start_soon(self._watch_process)
                        tg.start_soon(self._watch_deadlines)
                        await self._server_gone.wait()
                        await self._wind_down()
                        tg.cancel_scope.cancel()
                if self._stop_scope.cancelled_caught:
                    await self._answer_pending(self._stopped or "the proxy was stopped")
            except BaseException as exc:
                self._slot.abort(f"proxy failed: {type(exc).__name__}: {exc}")
                raise
            finally:
                with anyio.CancelScope(shield=True):
                    for inline in self._inline.values():  # whatever ended the session
                        inline.record(inline.call.interrupted)
                    self._inline.clear()
                    await self._slot.close()
        if self._stopped is not None:
            return 130
        return 0 if self._client_gone else 1

    @property
    def recorded(self) -> bool:
        return self._slot_made and self._slot.opened

    def stop(self, reason: str) -> None:
        """End the session early (a signal): the episode ends ``aborted`` with ``reason``
        (unless an earlier reason stands), and each request still waiting gets an error."""
        if self._stopped is None:
            self._stopped = reason
            self._pending_at_stop = [state.request_id for state, _ in self._calls.values()]
            self._pending_at_stop += self._starting.values()  # not yet in flight
            for state, _ in self._calls.values():
                state.stopped = reason
            for inline in self._inline.values():
                inline.state.stopped = reason
        if self._slot_made:
            self._slot.abort(reason)
        self._stop_scope.cancel()

    async def _answer_pending(self, reason: str) -> None:
        """Tell the client that what it still waits for will not come (the proxy stops)."""
        with anyio.move_on_after(2, shield=True):
            for inline in self._inline.values():
                inline.record(inline.call.interrupted)
            ids = [i.state.request_id for i in self._inline.values()]
            self._inline.clear()
            ids += [*self._pending_at_stop, *self._requests.values()]
            self._requests.clear()
            self._request_deadlines.clear()
            for request_id in ids:
                await self._refuse(request_id, reason)

    async def _pump_client(self) -> None:
        async for line in iter_lines(self._client_in):
            await self._from_client(line)
        self._client_gone = True
        # The client hung up: close the server's stdin, as an MCP client does on shutdown.
        with anyio.move_on_after(self._proxy.grace, shield=True):
            await self._upstream_in.aclose()
        await stop_server(self._process, self._proxy.grace)

    async def _from_client(self, line: bytes) -> None:
        msg = parse(line)
        if msg.kind == "request":
            if not self._slot.opened:
                self._slot.offer_case_id(case_id_of(msg), msg.method)
                if (version := protocol_version_of(msg)) is not None:
                    self._slot.note("protocol_version", version)
            call = tool_call_of(msg)
            if call is not None:
                await self._start_call(line, msg, *call)
                return
            if self._server_gone.is_set():
                await self._refuse(msg.id)
                return
            self._requests[id_key(msg.id)] = msg.id
            if self._proxy.timeout is not None:
                deadline = self._deadline_in(self._proxy.timeout)
                self._request_deadlines[id_key(msg.id)] = (deadline, str(msg.method))
            if msg.method == "tools/list":
                self._listing.add(id_key(msg.id))
            if msg.method in RECORDED_METHODS and len(self._answers) < len(RECORDED_METHODS):
                self._handshake[id_key(msg.id)] = str(msg.method)
        elif msg.kind == "notification":
            rid = cancelled_request_of(msg)
            if rid is not None:
                key = id_key(rid)
                if key in self._unforwarded:
                    return  # the server never saw that call: it must not hear of it
                self._request_deadlines.pop(key, None)  # the client expects no answer now
                if (entry := self._calls.get(key)) is not None:
                    entry[1].cancel()  # recorded as interrupted; the client expects no reply
                elif (inline := self._inline.pop(key, None)) is not None:
                    self._abandoned.add(key)  # a late answer must not reach the client
                    await inline.end(inline.call.interrupted)
        if self._server_gone.is_set():
            return
        with contextlib.suppress(UpstreamGone):  # the server pump notices and winds down
            await self._to_upstream(line)

    async def _pump_server(self) -> None:
        async for line in iter_lines(self._upstream_out):
            msg = parse(line)
            if msg.kind == "response":
                key = id_key(msg.id)
                if (inline := self._inline.pop(key, None)) is not None:
                    assert msg.body is not None
                    await inline.answered(line, msg.body)
                    continue
                if (waiter := self._waiters.pop(key, None)) is not None:
                    assert msg.body is not None
                    waiter.set(line, msg.body)
                    continue
                if key in self._abandoned:
                    self._abandoned.discard(key)
                    continue
                self._requests.pop(key, None)
                self._request_deadlines.pop(key, None)
                if key in self._listing and msg.body is not None:
                    self._listing.discard(key)
                    self._schemas.update(output_schemas(msg.body.get("result")))
                    self._listed = True
                if self._handshake and (method := self._handshake.pop(key, None)) is not None:
                    await self._keep_answer(method, line, msg.body)
            elif (
                self._progress
                and msg.method == "notifications/progress"
                and msg.params is not None
                and (state := self._progress.get(id_key(msg.params.get("progressToken"))))
            ):
                state.note(msg.body)
            await self._to_client(line)
        self._stdout_eof.set()
        self._server_gone.set()

    async def _keep_answer(self, method: str, line: bytes, body: dict[str, Any] | None) -> None:
        """Keep the server's first answer to ``method`` for server-less replay: in the
        header's ``meta["mcp"]["server_answers"]``, or in the end record's when the
        episode opened first (a client that pipelines its first requests)."""
        result = body.get("result") if body is not None else None
        if (
            not isinstance(result, dict)
            or method in self._answers
            or len(line) > self._sandbox.max_result_bytes
        ):
            return
        self._answers[method] = result
        if not self._slot.opened:
            self._slot.note("server_answers", dict(self._answers))
        else:
            ep = await self._slot.recorder()
            ep.end_meta.setdefault("mcp", {})["server_answers"] = dict(self._answers)

    async def _watch_process(self) -> None:
        await self._process.wait()
        # A server that exited may still have lines in the pipe; a grandchild holding
        # stdout open must not keep the session alive.
        with anyio.move_on_after(1.0):
            await self._stdout_eof.wait()
        self._server_gone.set()

    async def _wind_down(self) -> None:
        code = await self._reap()
        self._gone_reason = f"the MCP server exited with status {code}"
        crashed = not self._client_gone
        pending = len(self._requests) + len(self._waiters) + len(self._inline)
        if crashed:
            detail = f"{self._gone_reason} while the client was connected"
            if pending:
                detail += f" ({pending} requests unanswered)"
            self._slot.abort(detail)
            print(f"litmus-sandbox: {detail}", file=sys.stderr)
        elif pending:
            self._hung_up_on_pending()
        for waiter in self._waiters.values():
            waiter.fail(self._gone_reason)
        self._waiters.clear()
        while self._inline:  # one at a time: a stop meanwhile finds the rest still here
            _, inline = self._inline.popitem()
            inline.state.failure = self._gone_reason
            gone = UpstreamGone(self._gone_reason)
            await inline.end(functools.partial(inline.call.failed, gone))
        for request_id in self._requests.values():
            await self._refuse(request_id)
        self._requests.clear()
        self._request_deadlines.clear()
        with anyio.move_on_after(5):
            await self._idle.wait()  # let the calls record their steps and answer
        if crashed:
            with anyio.move_on_after(1):
                await self._client_out.aclose()  # the client sees the end too

    def _hung_up_on_pending(self) -> None:
        """The client left without its answers and the server was stopped: the calls still
        waiting for theirs were interrupted (nobody saw them end), and the run is not a
        complete one. A call already answered finishes its step as it is."""
        unanswered = [key for key in self._calls if key in self._waiters]
        n = len(unanswered) + len(self._inline) + len(self._requests)
        if not n:
            return  # only the proxy's own requests were waiting
        detail = f"the client hung up with {n} requests unanswered"
        self._slot.abort(detail)
        print(f"litmus-sandbox: {detail}", file=sys.stderr)
        for key in unanswered:
            self._calls[key][1].cancel()
            del self._waiters[key]  # cancelled: not failed
        while self._inline:
            _, inline = self._inline.popitem()
            inline.record(inline.call.interrupted)

    async def _reap(self) -> int:
        return await stop_server(self._process, self._proxy.grace)


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

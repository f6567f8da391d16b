"""The stdio proxy: a byte-exact line relay between an MCP client and a server process.

Theory of operation
-------------------
Two pumps run in one task group. The client pump reads newline-delimited JSON-RPC from
the client and writes each line to the server's stdin exactly as received; the server
pump does the same the other way. Everything passes through untouched (both handshake
eras, notifications, progress, ping, resources, prompts, server-to-client requests and
their answers) except ``tools/call``:

* a plain real call (the tool's mode is ``real``, and no probe runs around calls:
  ``EpisodeRecorder.begin_call``) is forwarded by the client pump itself, and finished
  by whichever comes first: the server pump when the answer comes (it records the step,
  then relays the server's bytes), a single deadline watcher for all calls, the client's
  ``notifications/cancelled``, or the wind-down when the server dies. No task, event or
  cancel scope per call: this is the relay's hot path;
* the client pump hands any other well-formed ``tools/call`` to a call task that records it
  through ``EpisodeRecorder.call_with`` and waits until the call is *dispatched* (sent
  upstream, or answered by the policy without the server) before reading the next line,
  so the server sees the client's messages in the client's order, and the probes have
  looked at the world before the server starts working;
* the server pump routes the response with that request's id to the waiting call
  instead of the client; the call task then writes the step and sends the client the
  reply the step records (see ``_recording.py``): the server's own bytes for a real call.

When the server's stdout closes (it exited or crashed) every request still pending gets
a JSON-RPC error, and if the client was still connected the episode ends ``aborted``
with the reason. A call with no answer within the timeout gets an error too, the server
is told ``notifications/cancelled``, a late answer is dropped, and the episode ends
``aborted`` (a hung server is an infrastructure failure: the run should be repeated,
not compared). When the client hangs up, the server's stdin is closed, as an MCP client
would, and the server is given ``grace`` seconds to exit before it is terminated.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import shutil
import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

from litmus_sandbox import Cassette, ConfigError, OpenCall, Policy, Sandbox, ToolCallStep
from litmus_sandbox._runtime.open_call import Finalize
from litmus_sandbox.oracles._probe import Probe
from litmus_sandbox.oracles.egress import EgressPolicy

from ._episodes import EpisodeSlot
from ._fdstream import FdReceiveStream, FdSendStream, iter_lines, on_stdio
from ._jsonrpc import (
    CONNECTION_CLOSED,
    PROTOCOL_VERSION_META_KEY,
    REQUEST_TIMEOUT,
    Message,
    cancelled_message,
    cancelled_request_of,
    case_id_of,
    error_message,
    id_key,
    listing_request,
    no_answer,
    parse,
    progress_token_of,
    protocol_version_of,
    tool_call_of,
)
from ._recording import ANSWERED_BY_THE_PROXY, CallState, UpstreamGone
from ._replay_server import RECORDED_METHODS
from ._schema import listed_schemas, output_schemas

PathLike = str | os.PathLike[str]


class _Waiter:
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


class _InlineCall:
    """A plain real call run inline by the session (see ``_Session._start_inline``)."""

    def __init__(
        self,
        session: _Session,
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


class StdioProxy:
    """Put the recorder in front of an MCP server spoken to over stdio.

    Args:
        command: the server's command line (spawned with the sandbox root as its
            working directory).
        episodes: the episode stream to append to.
        policy: per-tool fidelity (a :class:`~litmus_sandbox.Policy` or a policy file).
        root: the sandbox root and the server's working directory (default: cwd).
        case_id: the episode's case id (else the client's ``_meta["litmus/case_id"]``).
        agent: recorded as the episode's ``agent``.
        timeout: seconds a ``tools/call`` may take before the client gets an error.
        env: variables merged over this process's environment for the server (the hook
            for the egress oracle's proxy variables).
        probes: side-effect oracles observing each call (e.g. ``FsProbe(root)``).
        replay: recorded episodes serving the tools whose mode is ``replay``.
        fsync: fsync every record.
        grace: seconds the server gets to exit after the client hangs up.
        egress: an egress policy: the server's requests go through the sandbox's loopback
            proxy (its proxy variables; the server is long-lived, so never strict mode)
            and land on the step of the call in flight.

    Raises:
        ConfigError: an empty command.
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        episodes: PathLike,
        policy: Policy | PathLike | None = None,
        root: PathLike | None = None,
        case_id: str | None = None,
        agent: str | None = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        probes: Sequence[Probe] = (),
        replay: Sequence[PathLike] | Cassette | None = None,
        fsync: bool = False,
        grace: float = 5.0,
        egress: EgressPolicy | Mapping[str, Any] | None = None,
    ) -> None:
        if not command:
            raise ConfigError("no MCP server command given (put it after --)")
        if timeout is not None and timeout <= 0:
            raise ConfigError("the timeout must be a positive number of seconds")
        self.command = [os.fspath(c) for c in command]
        self.root = Path(root) if root is not None else Path.cwd()
        self.case_id = case_id
        self.agent = agent
        self.env = dict(env or {})
        self.grace = grace
        self.timeout = timeout
        self._session: _Session | None = None
        self._stop_reason: str | None = None
        #: Whether the last session recorded an episode (a client that sent nothing: no).
        self.recorded = False
        self._sandbox_kw: dict[str, Any] = {
            "root": self.root,
            "episodes": episodes,
            "policy": policy,
            "timeout": timeout,
            "probes": probes,
            "replay": replay,
            "fsync": fsync,
            "egress": egress if egress is not None else False,
            "strict_egress": False if egress is not None else None,
        }

    async def run(self, client_in: ByteReceiveStream, client_out: ByteSendStream) -> int:
        """Relay one session; returns 0 when the client hung up, 1 when the server died.

        Raises:
            ConfigError: the server command cannot be started; a bad policy.
        """
        executable = shutil.which(self.command[0], path=self.env.get("PATH"))
        if executable is None:
            raise ConfigError(f"cannot start the MCP server: {self.command[0]!r} not found")
        async with Sandbox(**self._sandbox_kw) as sandbox:
            # The server's stdin and stdout are pipes of our own, spoken to like the
            # client's (``_fdstream``): a write the pipe takes at once costs no trip
            # through the loop, which is most of what a relay adds to a call.
            stdin_r, stdin_w = os.pipe()
            stdout_r, stdout_w = os.pipe()
            upstream_in = FdSendStream(stdin_w, owned=True)
            upstream_out = FdReceiveStream(stdout_r, owned=True)
            try:
                try:
                    process = await anyio.open_process(
                        [executable, *self.command[1:]],
                        stdin=stdin_r,
                        stdout=stdout_w,
                        stderr=None,  # the server's log goes where the proxy's goes
                        cwd=self.root,
                        env={**os.environ, **sandbox.egress_env(), **self.env},
                    )
                except OSError as exc:
                    raise ConfigError(
                        f"cannot start the MCP server {self.command[0]!r}: {exc.strerror or exc}"
                    ) from None
                finally:
                    os.close(stdin_r)  # the server's ends: only the server holds them now
                    os.close(stdout_w)
                async with process:
                    session = _Session(
                        self, sandbox, process, (upstream_in, upstream_out), client_in, client_out
                    )
                    self._session = session
                    if self._stop_reason is not None:
                        session.stop(self._stop_reason)
                    try:
                        return await session.run()
                    finally:
                        self.recorded = session.recorded
                        self._session, self._stop_reason = None, None  # the next run is new
                        # However the session ended (a proxy failure, a signal), the server
                        # is not left running: nothing else would stop it, and leaving this
                        # block waits for it to exit.
                        with anyio.CancelScope(shield=True):
                            await upstream_in.aclose()  # its stdin closes, as on shutdown
                            await _stop(process, self.grace)
            finally:
                await upstream_in.aclose()
                await upstream_out.aclose()

    async def serve_stdio(self) -> int:
        """Relay between this process's stdin/stdout and the server (the CLI's mode)."""
        return await on_stdio(self.run)

    def stop(self, reason: str = "the proxy was stopped") -> None:
        """End the session early (the CLI calls it on SIGINT or SIGTERM): the episode ends
        ``aborted`` with ``reason`` (an earlier reason, such as a hung call, stands), every
        request still waiting gets a JSON-RPC error, and :meth:`run` returns 130."""
        self._stop_reason = reason
        if self._session is not None:
            self._session.stop(reason)


class _Session:
    _slot: EpisodeSlot

    def __init__(
        self,
        proxy: StdioProxy,
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
        self._waiters: dict[tuple[str, Any], _Waiter] = {}
        #: Forwarded requests other than tools/call that await an answer (key -> id).
        self._requests: dict[tuple[str, Any], Any] = {}
        #: Their deadlines (the proxy's timeout) and methods.
        self._request_deadlines: dict[tuple[str, Any], tuple[float, str]] = {}
        self._calls: dict[tuple[str, Any], tuple[CallState, anyio.CancelScope]] = {}
        #: tools/call requests read but not yet in flight (key -> id).
        self._starting: dict[tuple[str, Any], Any] = {}
        #: Plain real calls in flight, run inline (no task of their own): see _start_inline.
        self._inline: dict[tuple[str, Any], _InlineCall] = {}
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

    # ------------------------------------------------------------ writing

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

    # ------------------------------------------------------------ client -> server

    async def _pump_client(self) -> None:
        async for line in iter_lines(self._client_in):
            await self._from_client(line)
        self._client_gone = True
        # The client hung up: close the server's stdin, as an MCP client does on shutdown.
        with anyio.move_on_after(self._proxy.grace, shield=True):
            await self._upstream_in.aclose()
        await _stop(self._process, self._proxy.grace)

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

    async def _refuse(self, request_id: Any, reason: str | None = None) -> None:
        """Answer a request the server will never answer (gone, or the proxy stopping)."""
        text = f"litmus-sandbox: {reason or self._gone_reason}"
        await self._to_client(error_message(request_id, CONNECTION_CLOSED, text) + b"\n")

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
            waiter = self._waiters[id_key(rid)] = _Waiter()
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
        inline = _InlineCall(self, key, state, call, token)
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

    async def _forward(self, key: tuple[str, Any], state: CallState) -> Any:
        """The runner: send the original request upstream and await its response."""
        if self._server_gone.is_set():
            state.dispatched.set()
            raise UpstreamGone(self._gone_reason)
        waiter = self._waiters[key] = _Waiter()
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

    # ------------------------------------------------------------ server -> client

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
        return await _stop(self._process, self._proxy.grace)


async def _stop(process: Process, grace: float) -> int:
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

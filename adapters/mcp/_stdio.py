"""The stdio proxy: a byte-exact line relay between an MCP client and a server process.

Theory of operation
-------------------
Every decision is the relay core's (``_relay/``: one ``Relay`` per session, fed lines and
the clock, returning actions); the session is its driver. Two pumps run in one task
group: the client pump feeds the core each line the client writes, the server pump each
line the server writes, and the session performs what the core returns. On asyncio a
pump hands each line over from the event loop's read callback (``_lines.feed_lines``
over ``_fdstream``'s loop reader) and the session performs what needs no waiting there
and then (``perform_now``): a plain real call's request, and its answer, are each read,
decided, recorded and relayed in one callback, with no task woken; the pump's task
awaits only what must wait (a call that opens the episode or runs in a task, a pipe that
is full). Everything
passes through byte for byte (both handshake eras, notifications, progress, ping,
resources, prompts, server-to-client requests and their answers) except ``tools/call``:

* a plain real call (the tool's mode is ``real``, and no probe runs around calls:
  ``EpisodeRecorder.begin_call``) is forwarded by the client pump itself; whatever ends
  it first (its answer, its deadline, the client's ``notifications/cancelled``, the
  server's end) records its step, then the server's own bytes (or an error) go to the
  client. No task, event or cancel scope per call: this is the relay's hot path;
* any other well-formed ``tools/call`` runs in a task through
  ``EpisodeRecorder.call_with``; the client pump waits until it is *dispatched* (sent
  upstream, or answered by the policy without the server) before reading on, so the
  server sees the client's messages in the client's order, and the probes have looked
  at the world before the server starts working.

When the server's stdout closes (it exited or crashed) every request still pending gets
a JSON-RPC error, and if the client was still connected the episode ends ``aborted``
with the reason. A request with no answer within the timeout gets an error too, the
server is told ``notifications/cancelled``, a late answer is dropped, and the episode
ends ``aborted`` (a hung server is an infrastructure failure: the run should be
repeated, not compared). When the client hangs up, the server's stdin is closed, as an
MCP client would, and the server is given ``grace`` seconds to exit before it is
terminated; a client that hung up with nothing pending finished cleanly, and its
episode ends ``complete`` whatever the server does after (a signal included).

The probes take their baseline before the server is launched, and the server's own
start-up and shutdown are told apart from the agent's session (``_runtime/phases.py``):
the start-up ends before the client's first message past the handshake reaches the
server, the shutdown begins when the client hangs up with nothing pending. The episode's
end lists them (``startup``, ``shutdown``), with no finding.

A session whose client only probed the server (``server/discover``, never a
``tools/call`` nor a completed ``initialize``) records no episode. Lines longer than
``max_message_bytes`` are never held whole; see ``_relay/_core.py`` for what else a
hostile peer cannot do.

The session is built in layers, one module each: ``_stdio_base.py`` (the pipes, the
writes to either side, performing actions), ``_stdio_calls.py`` (the ``tools/call``
paths) and ``_stdio_session.py`` (the pumps, the clock, the stop, the wind-down). This
module spawns the server and runs one session with it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from litmus_sandbox import Cassette, ConfigError, Policy, Sandbox
from litmus_sandbox.oracles._probe import Probe
from litmus_sandbox.oracles.egress import EgressPolicy

from ._fdstream import FdReceiveStream, FdSendStream, on_stdio
from ._relay import DEFAULT_MAX_MESSAGE_BYTES
from ._stdio_session import Session, stop_server

PathLike = str | os.PathLike[str]


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
        max_message_bytes: the longest line either side may send (default 64 MiB): a
            client's longer line gets an error, a server's cuts it off; either way the
            episode ends aborted.
        cache: where the results of tools the policy emulates are kept (a path or a
            ``redis://`` URL; None: the step-verdict cache's default).

    Raises:
        ConfigError: an empty command, a bad timeout or size.
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
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        cache: PathLike | None = None,
    ) -> None:
        if not command:
            raise ConfigError("no MCP server command given (put it after --)")
        if timeout is not None and timeout <= 0:
            raise ConfigError("the timeout must be a positive number of seconds")
        if max_message_bytes < 1024:
            raise ConfigError("the message size limit must be at least 1024 bytes")
        self.max_message_bytes = max_message_bytes
        self.command = [os.fspath(c) for c in command]
        self.root = Path(root) if root is not None else Path.cwd()
        self.case_id = case_id
        self.agent = agent
        self.env = dict(env or {})
        self.grace = grace
        self.timeout = timeout
        self._session: Session | None = None
        self._stop_reason: str | None = None
        #: Whether the last session recorded an episode (a client that sent nothing, or
        #: only probed the server: no), and whether its client sent anything.
        self.recorded = False
        self.sent_anything = False
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
            "cache": cache,  # where emulated tools' results are kept (None: the default)
        }

    async def run(self, client_in: ByteReceiveStream, client_out: ByteSendStream) -> int:
        """Relay one session; returns 0 when the client hung up, 1 when the server died.

        Raises:
            ConfigError: the server command cannot be started; a bad policy.
        """
        executable = shutil.which(self.command[0], path=self.env.get("PATH"))
        if executable is None:
            raise ConfigError(f"cannot start the MCP server: {self.command[0]!r} not found")
        async with Sandbox(**self._sandbox_kw) as sandbox, sandbox.server_phases() as phases:
            # The probes' baseline is taken: the server's start-up is seen, and told apart.
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
                    session = Session(
                        self, sandbox, process, (upstream_in, upstream_out), client_in, client_out
                    )
                    session.phases = phases
                    self._session = session
                    if self._stop_reason is not None:
                        session.stop(self._stop_reason)
                    try:
                        return await session.run()
                    finally:
                        self.recorded = session.recorded
                        self.sent_anything = session.sent_anything
                        stopped = self._stop_reason is not None
                        self._session, self._stop_reason = None, None  # the next run is new
                        # However the session ended (a proxy failure, a signal), the server
                        # is not left running: nothing else would stop it, and leaving this
                        # block waits for it to exit. After a signal, it is not waited for:
                        # whoever sent the signal will not wait long either.
                        with anyio.CancelScope(shield=True):
                            await upstream_in.aclose()  # its stdin closes, as on shutdown
                            await stop_server(process, 0 if stopped else self.grace)
            finally:
                await upstream_in.aclose()
                await upstream_out.aclose()

    async def serve_stdio(self) -> int:
        """Relay between this process's stdin/stdout and the server (the CLI's mode)."""
        return await on_stdio(self.run)

    def stop(self, reason: str = "the proxy was stopped") -> None:
        """End the session early (the CLI calls it on SIGINT or SIGTERM): the episode ends
        ``aborted`` with ``reason`` (an earlier reason, such as a hung call, stands), every
        request still waiting gets a JSON-RPC error, and :meth:`run` returns 130. After
        a clean finish (the client hung up with nothing pending) it only hurries the
        server's end: the episode is complete, and :meth:`run` returns 0."""
        self._stop_reason = reason
        if self._session is not None:
            self._session.stop(reason)

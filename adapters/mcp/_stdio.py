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

The session is built in layers, one module each: ``_stdio_base.py`` (the state every
part shares, the writes to either side, the replies), ``_stdio_calls.py`` (the
``tools/call`` paths and the deadline watcher) and ``_stdio_session.py`` (the pumps, the
stop, the wind-down). This module spawns the server and runs one session with it.
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
        self._session: Session | None = None
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
                    session = Session(
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
                            await stop_server(process, self.grace)
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

"""Server-less replay: serve a recorded MCP session over stdio with no MCP server at all.

Theory of operation
-------------------
``litmus-sandbox proxy mcp --replay EPISODES`` with no server command runs a
:class:`ReplayServer`: it reads the client's newline-delimited JSON-RPC and answers every
request itself.

* ``tools/call`` goes through the sandbox like any intercepted call, under a policy whose
  default mode is ``replay``: a hit is answered with the server's recorded result (the
  step's ``meta["mcp"]["upstream"]``, ``_meta`` included; rebuilt from what was shown when
  the recording did not keep it), fidelity ``replayed`` with its source episode and step;
  a miss gets an ``isError`` result and a divergence on the step. ``stub`` and ``deny`` tools are answered as usual. Modes that
  need a server (``real``, ``swallow`` with ``run = true``, ``on_miss = "spy"`` or
  ``"record-new"``) are refused when the replay starts.
* ``initialize``, ``server/discover`` and ``tools/list`` are answered with what the real
  server answered when the session was recorded: the stdio proxy keeps those answers in
  the episode's ``meta["mcp"]["server_answers"]`` (in the header, or in the end record
  when the episode opened before the answer came). A recording without them (the HTTP
  proxy, a session killed before its end, a hand-written cassette) gets a minimal synthesized answer: an ``initialize`` echoing the
  client's protocol version with the ``tools`` capability, a 2026-07-28 ``server/discover``,
  and a ``tools/list`` of the tools the cassette called, each with an open
  ``inputSchema`` and no description (a recording does not keep them).
* ``ping`` is answered; other requests get "method not found"; notifications and answers
  to requests the server never sent are ignored.

The session is driven by the relay core like the stdio proxy's (``_relay/``): the same
refusals, limits and episode rules apply; the recording stands where the server would.

The episode recorded for the session says ``meta["mcp"]["serverless_replay"] = true``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec
from anyio.abc import ByteReceiveStream, ByteSendStream

from litmus_sandbox import Cassette, ConfigError, Policy, Sandbox, ToolCallStep
from litmus_sandbox.oracles._probe import Probe

from ._episodes import EpisodeSlot
from ._fdstream import iter_lines, on_stdio
from ._jsonrpc import (
    PROTOCOL_VERSION_META_KEY,
    RECORDED_METHODS,
    Message,
    error_message,
    parse,
)
from ._recording import UpstreamGone
from ._relay import Abort, Action, KeepAnswer, Note, Offer, Relay, StartCall, ToClient, ToServer
from ._relay._states import Pending
from ._schema import output_schemas

PathLike = str | os.PathLike[str]

#: The revision a synthesized ``server/discover`` advertises (the stateless era).
MODERN_VERSION = "2026-07-28"
HANDSHAKE_VERSION = "2025-11-25"
#: The caching fields of a stateless-era (2026-07-28) list or discover result.
CACHEABLE = {"ttlMs": 0, "cacheScope": "private", "resultType": "complete"}
METHOD_NOT_FOUND = -32601
PARSE_ERROR = -32700

_encode = msgspec.json.Encoder()


def needs_server(policy: Policy) -> list[str]:
    """The policy entries a server-less replay cannot honour (empty when it can)."""
    problems = []
    for name, tp in policy.entries():
        if tp.mode == "real" or (tp.mode == "swallow" and tp.run):
            problems.append(f"{name!r} is in mode {tp.mode!r}")
        elif tp.mode == "replay":
            on_miss = tp.on_miss or policy.replay.on_miss
            if on_miss != "error":
                problems.append(f"{name!r} replays with on_miss = {on_miss!r}")
    return problems


def recorded_answers(cassette: Cassette, case_id: str | None) -> dict[str, Any]:
    """The server answers kept in the cassette (header, then end ``meta["mcp"]
    ["server_answers"]``); episodes of ``case_id`` first."""
    eps = sorted(cassette.episodes, key=lambda ep: ep.case_id != case_id)
    out: dict[str, Any] = {}
    for ep in eps:
        for meta in (ep.header.meta, ep.end.meta if ep.end is not None else {}):
            mcp = meta.get("mcp")
            answers = mcp.get("server_answers") if isinstance(mcp, dict) else None
            if isinstance(answers, dict):
                for method, result in answers.items():
                    if method in RECORDED_METHODS and isinstance(result, dict):
                        out.setdefault(method, result)
    return out


class ReplayServer:
    """Answer an MCP client from recorded episodes, with no server behind.

    Args:
        replay: the recorded episodes (paths or a :class:`~litmus_sandbox.Cassette`).
        episodes: the episode stream the replayed session is recorded to.
        policy: per-tool fidelity (default: every tool ``replay``, misses are errors).
        root: the sandbox root (default: cwd).
        case_id: the episode's case id (else the client's ``_meta["litmus/case_id"]``);
            it also picks the recorded episode that is replayed.
        agent: recorded as the episode's ``agent``.
        probes: side-effect oracles observing each call.
        fsync: fsync every record.
        cache: where the results of tools the policy emulates are kept.

    Raises:
        ConfigError: no recorded episode, or a policy that needs a server.
        RecordDecodeError: an unreadable recording (named ``file:line``).
    """

    def __init__(
        self,
        replay: Sequence[PathLike] | Cassette,
        *,
        episodes: PathLike,
        policy: Policy | PathLike | None = None,
        root: PathLike | None = None,
        case_id: str | None = None,
        agent: str | None = None,
        probes: Sequence[Probe] = (),
        fsync: bool = False,
        cache: PathLike | None = None,
    ) -> None:
        cassette = Cassette.load(replay, fsync=fsync, stacklevel=2)
        if not cassette.episodes:
            raise ConfigError("server-less replay: the recording holds no episode")
        if policy is None:
            policy = Policy(default="replay")
        elif not isinstance(policy, Policy):
            policy = Policy.from_file(policy)
        if problems := needs_server(policy):
            raise ConfigError(
                "server-less replay (no server command) cannot run calls for real: "
                + "; ".join(problems)
            )
        self.cassette: Cassette | None = cassette
        self.case_id = case_id
        self.agent = agent
        #: What the recorded session's header says of it (``meta["mcp"]``).
        self.session_meta: dict[str, Any] = {"transport": "stdio", "serverless_replay": True}
        self._sandbox_kw: dict[str, Any] = {
            "root": Path(root) if root is not None else Path.cwd(),
            "episodes": episodes,
            "policy": policy,
            "probes": probes,
            "replay": cassette,
            "fsync": fsync,
            "egress": False,  # no server runs: there is no egress to see
            "cache": cache,  # where the results of tools the policy emulates are kept
        }

    def answers(self, case_id: str | None) -> dict[str, Any]:
        """The server's answers to serve (``initialize``, ``server/discover``,
        ``tools/list``): the recording's, for ``case_id`` first."""
        assert self.cassette is not None
        return recorded_answers(self.cassette, case_id)

    def prepare(self, sandbox: Sandbox) -> None:
        """Set up the sandbox of a session before it starts (nothing to do here)."""

    def tool_names(self) -> list[str]:
        """The tools a synthesized ``tools/list`` names (the ones the recording called)."""
        assert self.cassette is not None
        return list(self.cassette.tools())

    async def run(self, client_in: ByteReceiveStream, client_out: ByteSendStream) -> int:
        """Serve one session until the client hangs up; returns 0."""
        async with Sandbox(**self._sandbox_kw) as sandbox:
            self.prepare(sandbox)
            session = _Session(self, sandbox, client_out)
            await session.run(client_in)
        return 0

    async def serve_stdio(self) -> int:
        """Serve this process's stdin/stdout (the CLI's mode)."""
        return await on_stdio(self.run)


class _Session:
    """One replayed session: the relay core drives it (``_relay/``), and the recording
    stands where the server would: what the core would send the server is answered here
    (``_serve``) and fed back to the core as the server's answer."""

    def __init__(self, server: ReplayServer, sandbox: Sandbox, client_out: ByteSendStream) -> None:
        self._server = server
        self._sandbox = sandbox
        self._out = client_out
        self._case_id = server.case_id
        self._gone = False
        self._core = Relay(max_answer_bytes=sandbox.max_result_bytes)

    async def run(self, client_in: ByteReceiveStream) -> None:
        core = self._core
        async with anyio.create_task_group() as outer:
            self._slot = EpisodeSlot(
                self._sandbox,
                outer,
                case_id=self._server.case_id,
                agent=self._server.agent,
                meta=dict(self._server.session_meta),
            )
            try:
                async for line in iter_lines(client_in, core.max_message_bytes):
                    if isinstance(line, bytes):
                        await self._perform(core.from_client(line, anyio.current_time()))
                    else:
                        await self._perform(core.client_too_long(line.size, line.head))
            finally:
                if core.engaged:
                    self._slot.touch()
                await self._slot.close()

    async def _perform(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, ToClient):
                await self._send(action.data)
            elif isinstance(action, ToServer):
                await self._perform(self._serve(action.data))
            elif isinstance(action, StartCall):
                await self._call(action.pending)
            elif isinstance(action, Offer):
                if not self._slot.opened:
                    self._slot.offer_case_id(action.case_id, action.method, touch=False)
                    if self._case_id is None and action.case_id:
                        self._case_id = action.case_id  # it picks the recording replayed
                    if action.version is not None:
                        self._slot.note("protocol_version", action.version)
            elif isinstance(action, KeepAnswer):
                # Kept like the proxy keeps a server's answers: a replay of this replay
                # answers the same.
                if not self._slot.opened:
                    self._slot.note("server_answers", action.answers)
                else:
                    ep = await self._slot.recorder()
                    ep.end_meta.setdefault("mcp", {})["server_answers"] = action.answers
            elif isinstance(action, Note):
                self._slot.end_note(action.key, action.value)
            elif isinstance(action, Abort):
                self._slot.abort(action.reason)

    async def _send(self, data: bytes) -> None:
        if self._gone:
            return
        try:
            await self._out.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._gone = True  # keep reading: the episode still records what was asked

    def _serve(self, line: bytes) -> list[Action]:
        """What the recording answers to a message meant for the server (never a
        ``tools/call``: the core starts those)."""
        msg = parse(line)
        if msg.kind == "other":
            if not line.strip():
                return []
            return [ToClient(error_message(None, PARSE_ERROR, "not a JSON-RPC message") + b"\n")]
        if msg.kind != "request":
            return []  # notifications, and answers to requests this server never sends
        if msg.method in RECORDED_METHODS:
            answer = self._answer(msg)
        elif msg.method == "ping":
            answer = _result(msg.id, {})
        else:
            text = f"litmus-sandbox: server-less replay has no answer for {msg.method!r}"
            answer = error_message(msg.id, METHOD_NOT_FOUND, text)
        return self._core.from_server(answer + b"\n", anyio.current_time())

    def _answer(self, msg: Message) -> bytes:
        method = str(msg.method)
        answers = self._server.answers(self._case_id)
        result = answers.get(method)
        if result is None and method == "server/discover" and "initialize" in answers:
            # The recorded server spoke the initialize era, which has no server/discover:
            # answer as it did, so the client falls back to initialize and gets its answer.
            text = "litmus-sandbox: the recorded server has no server/discover (initialize era)"
            return error_message(msg.id, METHOD_NOT_FOUND, text)
        if result is None:
            result = self._synthesize(method, msg)
        elif "nextCursor" in result:
            # Only a paginated list's first page is kept: ending the list there keeps a
            # client from asking for the next page forever.
            result = {k: v for k, v in result.items() if k != "nextCursor"}
        if PROTOCOL_VERSION_META_KEY in msg.meta and method != "initialize":
            # A stateless client wants a list's caching fields: a listing written by hand
            # (or kept from the other era) may lack them.
            result = {**CACHEABLE, **result}
        return _result(msg.id, result)

    def _synthesize(self, method: str, msg: Message) -> dict[str, Any]:
        stateless = PROTOCOL_VERSION_META_KEY in msg.meta
        caps = {"tools": {"listChanged": False}}
        if method == "initialize":
            asked = msg.params.get("protocolVersion") if msg.params is not None else None
            return {
                "protocolVersion": asked if isinstance(asked, str) else HANDSHAKE_VERSION,
                "capabilities": caps,
                "serverInfo": {"name": "litmus-sandbox-replay", "version": _version()},
            }
        if method == "server/discover":
            return {"supportedVersions": [MODERN_VERSION], "capabilities": caps, **CACHEABLE}
        tools = [
            {"name": name, "inputSchema": {"type": "object"}} for name in self._server.tool_names()
        ]
        return {"tools": tools, **(CACHEABLE if stateless else {})}

    async def _call(self, pending: Pending) -> None:
        state = pending.call
        assert state is not None
        listed = self._server.answers(self._case_id).get("tools/list")
        state.output_schema = output_schemas(listed).get(pending.tool)
        ep = await self._slot.recorder()
        cap = ep.sandbox.max_result_bytes

        def finalize(step: ToolCallStep) -> ToolCallStep:
            step = state.finalize(step, cap)
            recorded = self._recorded_result(step)
            if recorded is not None:
                # The server's own result as recorded (its _meta, resultType...), not one
                # rebuilt from what it showed: the client sees what it saw then.
                state.reply = _result(state.request_id, recorded)
                mcp = {**step.meta["mcp"], "reply": "recorded"}
                step = msgspec.structs.replace(step, meta={**step.meta, "mcp": mcp})
            return step

        await ep.call_with(_no_server, pending.tool, pending.args, finalize=finalize)
        await self._perform(self._core.recorded(pending))

    def _recorded_result(self, step: ToolCallStep) -> dict[str, Any] | None:
        """The recorded upstream result that serves a replayed step, if it was kept."""
        if step.fidelity != "replayed" or step.source is None or self._server.cassette is None:
            return None
        recorded = self._server.cassette.step(step.source.episode_id, step.source.step)
        mcp = recorded.meta.get("mcp") if recorded is not None else None
        envelope = mcp.get("upstream") if isinstance(mcp, dict) else None
        result = envelope.get("result") if isinstance(envelope, dict) else None
        return result if isinstance(result, dict) else None


async def _no_server(tool: str, args: dict[str, Any]) -> Any:
    # Unreachable with a policy needs_server() accepted; kept so a call never hangs.
    del args
    raise UpstreamGone(f"server-less replay: there is no MCP server to run {tool!r}")


def _result(request_id: Any, result: Any) -> bytes:
    return _encode.encode({"jsonrpc": "2.0", "id": request_id, "result": result})


@functools.cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("litmus-sandbox")
    except PackageNotFoundError:
        return "0+unknown"

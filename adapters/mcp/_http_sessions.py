"""The HTTP proxy's state: one episode per MCP session, the calls in flight, the schemas.

Episodes: one per MCP session (``Mcp-Session-Id``); a stateless client (no session id)
gets one per case id it names in ``_meta``, else one per exchange (with ``--case-id``, one
for the whole proxy run): exchanges that name no session and no case are never merged,
and such an exchange's episode ends as soon as the exchange is over.
A session whose client is *gone* - no connection that carried its requests still open,
nothing in progress (a call, a relayed request, a GET stream) - ends ``complete`` after
``session_grace`` seconds, and a stop (a signal) that finds it gone does not abort it:
clients that never send DELETE (sessionless ones, TS SDK v1's ``close()``) finish
cleanly. Either end, DELETE or the grace period, goes through the session's relay core
(``Relay.session_ended``), which interrupts the calls still running; then the episode
ends. The proxy learns the tools' output schemas from the listings it relays, or asks
the server itself, once, before it answers a call without the server (see
``learn_schemas``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

import anyio
import httpx
from anyio.abc import TaskGroup

from litmus_sandbox import Cassette, ConfigError, Policy, Sandbox
from litmus_sandbox.oracles._probe import Probe

from ._downstream import MAX_BODY, header
from ._episodes import EpisodeSlot
from ._http_answer import Waiting, listing_result
from ._jsonrpc import Message, cancelled_message, case_id_of, listing_request, protocol_version_of
from ._recording import CallState
from ._relay import Abort, Action, FinishCall, KeepAnswer, Note, Offer, Relay
from ._schema import listed_schemas

PathLike = str | os.PathLike[str]

#: Request headers naming the request's own method and target (newer revisions).
_PER_REQUEST = frozenset({b"mcp-method", b"mcp-name"})

#: The key prefix of a sessionless exchange's episode (no session id, no case id).
EXCHANGE = "exchange:"


class RunningCall(Protocol):
    """What the proxy needs of a recorded call in flight (``HttpToolCall``)."""

    @property
    def state(self) -> CallState: ...
    @property
    def scope(self) -> anyio.CancelScope: ...
    @property
    def finished(self) -> anyio.Event: ...
    @property
    def answered(self) -> anyio.Event: ...
    def stop(self, reply: bytes | None) -> None: ...
    def finish(self, action: FinishCall) -> None: ...


class Presence:
    """Whether a session's client is still there: its open connections, its exchanges
    in progress, the timer that ends its episode once it is gone."""

    __slots__ = ("busy", "connections", "timer")

    def __init__(self) -> None:
        self.connections = 0
        self.busy = 0
        self.timer: anyio.CancelScope | None = None


class HttpSessions:
    """The HTTP proxy's configuration and sessions (``HttpProxy`` documents the arguments)."""

    sandbox: Sandbox
    client: httpx.AsyncClient
    _outer: TaskGroup
    #: The deadline watcher's sleep (woken earlier by ``arm``).
    _deadlines: anyio.CancelScope | None = None

    def __init__(
        self,
        upstream: str,
        *,
        episodes: PathLike,
        policy: Policy | PathLike | None = None,
        root: PathLike | None = None,
        case_id: str | None = None,
        agent: str | None = None,
        timeout: float | None = None,
        probes: Sequence[Probe] = (),
        replay: Sequence[PathLike] | Cassette | None = None,
        fsync: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
        max_message_bytes: int = MAX_BODY,
        session_grace: float | None = 60.0,
        cache: PathLike | None = None,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"--upstream must be an http(s) URL, got {upstream!r}")
        if timeout is not None and timeout <= 0:
            raise ConfigError("the timeout must be a positive number of seconds")
        self.upstream = upstream
        #: The largest request body a client may send (a larger one drops the connection).
        self.max_message_bytes = max_message_bytes
        self.episodes = os.fspath(episodes)
        #: Set once serving has ended and every episode is closed.
        self.stopped = anyio.Event()
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.endpoint = parts.path or "/"
        self.case_id = case_id
        self.agent = agent
        self.timeout = timeout
        self._transport = transport
        self._sandbox_kw: dict[str, Any] = {
            "root": root if root is not None else os.getcwd(),
            "episodes": episodes,
            "policy": policy,
            "timeout": timeout,
            "probes": probes,
            "replay": replay,
            "fsync": fsync,
            "egress": False,  # the server is remote: its egress is not ours to see
            "cache": cache,  # where emulated tools' results are kept (None: the default)
        }
        self._slots: dict[str, EpisodeSlot] = {}
        #: Seconds a session's client may be gone before its episode ends (None: never).
        self.session_grace = session_grace
        self._presence: dict[str, Presence] = {}
        self._connections = 0  # client connections accepted (each gets the next number)
        self._exchanges = 0  # requests read from clients (each gets the next number)
        self._stopping = anyio.Event()
        #: Why the proxy was stopped early (a signal), or None.
        self.stop_reason: str | None = None
        #: Relayed requests waiting for the server's answer.
        self._waiting: set[Waiting] = set()
        #: In-flight recorded calls by (episode key, request id key), for cancellation.
        self.calls: dict[tuple[str, Any], RunningCall] = {}
        #: Tools' output schemas, learnt from the tools/list answers relayed.
        self.output_schemas: dict[str, dict[str, Any]] = {}
        #: The listed tools' entries (what an emulator is told of an emulated tool).
        self.tools: dict[str, dict[str, Any]] = {}
        #: Whether the tools were listed (by a client, or by the proxy for itself).
        self.listed = False
        self._learning: anyio.Event | None = None
        #: Each session's relay core: its recorded calls and tasks, and their decisions.
        self._cores: dict[str, Relay] = {}
        #: Each ``initialize`` in flight has a core of its own (``HttpRelay.relay``): its
        #: session's key once the answer names it, else "".
        self._openings: dict[Relay, str] = {}

    def core(self, key: str) -> Relay:
        """The relay core of session ``key`` (created on first use). Its calls' output
        schemas are the proxy's: one upstream lists the same tools to every session."""
        core = self._cores.get(key)
        if core is None:
            core = self._cores[key] = Relay(
                timeout=self.timeout, max_message_bytes=self.max_message_bytes
            )
            core.schemas, core.tools = self.output_schemas, self.tools
        return core

    def arm(self, core: Relay) -> None:
        """Wake the deadline watcher (``HttpRelay.watch_deadlines``) by the core's
        earliest deadline."""
        scope = self._deadlines
        if scope is not None and core.next_deadline < scope.deadline:
            scope.deadline = core.next_deadline

    def core_of_task(self, task_id: str) -> Relay | None:
        """The core whose call the task ``task_id`` is (the server's, or the proxy's own):
        a stateless client's ``tasks/result`` may come on another connection."""
        for core in self._cores.values():
            if task_id in core._tasks or task_id in core._own_tasks:
                return core
        return None

    def perform(self, key: str, actions: list[Action]) -> list[Action]:
        """Carry out the core's session actions (the episode's case id, notes, abort);
        the rest (what goes to a side, a call to run or finish) are returned in order."""
        rest: list[Action] = []
        for action in actions:
            if isinstance(action, Offer):
                slot = self.slot(key)
                if not slot.opened:
                    slot.offer_case_id(action.case_id, action.method, touch=False)
                    if action.version is not None:
                        slot.note("protocol_version", action.version)
            elif isinstance(action, Note):
                self.slot(key).end_note(action.key, action.value)
            elif isinstance(action, Abort):
                self.slot(key).abort(action.reason)
            elif isinstance(action, KeepAnswer):
                self.keep_answers(key, action.answers)
            else:
                rest.append(action)
        return rest

    def keep_answers(self, key: str, answers: dict[str, Any]) -> None:
        """Keep the server's first answers (``initialize``, ``server/discover``,
        ``tools/list``) for server-less replay: in the header's
        ``meta["mcp"]["server_answers"]``, or the end record's once the episode opened."""
        slot = self.slot(key)
        if not slot.opened:
            slot.note("server_answers", dict(answers))
        else:
            slot.end_note("server_answers", dict(answers))

    def slot(self, key: str, outer: TaskGroup | None = None) -> EpisodeSlot:
        """The episode of a session (or of a stateless case id), created on first use."""
        slot = self._slots.get(key)
        if slot is None:
            meta = {"transport": "streamable-http", "server": self.upstream}
            if key.startswith("session:"):
                meta["session_id"] = key.removeprefix("session:")
            slot = self._slots[key] = EpisodeSlot(
                self.sandbox,
                outer or self._outer,
                case_id=self.case_id,
                agent=self.agent,
                meta=meta,
            )
        return slot

    @staticmethod
    def offer(slot: EpisodeSlot, msg: Message, *, touch: bool = True) -> None:
        """Let a request name the episode's case id (and protocol revision); ``touch``:
        the request makes the session one to record (a call does, a probe does not)."""
        slot.offer_case_id(case_id_of(msg), msg.method, touch=touch)
        if (version := protocol_version_of(msg)) is not None:
            slot.note("protocol_version", version)

    def key_for(
        self, headers: Sequence[tuple[bytes, bytes]], msg: Message, exchange_id: int = 0
    ) -> str:
        """The episode key of exchange ``exchange_id``: its session, its case, or itself."""
        if (sid := header(headers, b"mcp-session-id")) is not None:
            return f"session:{sid}"
        if self.case_id is not None:
            return "proxy"  # the operator named the run's case: one episode for it
        if (case := case_id_of(msg)) is not None:
            return f"case:{case}"
        # No session, no case: nothing ties it to another exchange (a connection is the
        # client's pool's, not its run's), so it is never merged with one.
        return f"{EXCHANGE}{exchange_id}"

    def arrive(self, key: str, keys: set[str]) -> None:
        """An exchange of session ``key`` starts, on a connection that carried ``keys``
        (a sessionless exchange's connection does not keep it: it ends with the exchange)."""
        presence = self._presence.get(key)
        if presence is None:
            presence = self._presence[key] = Presence()
        if key not in keys and not key.startswith(EXCHANGE):
            keys.add(key)
            presence.connections += 1
        presence.busy += 1
        if presence.timer is not None:
            presence.timer.cancel()  # the client is back
            presence.timer = None

    def leave(self, key: str) -> None:
        """An exchange of session ``key`` is over."""
        presence = self._presence.get(key)
        if presence is not None:
            presence.busy -= 1
            self._maybe_gone(key, presence)

    def disconnect(self, keys: set[str]) -> None:
        """A client connection closed; it carried the sessions ``keys``."""
        for key in keys:
            presence = self._presence.get(key)
            if presence is not None:
                presence.connections -= 1
                self._maybe_gone(key, presence)

    def gone(self, key: str) -> bool:
        """Whether session ``key``'s client is gone (see the module's docstring)."""
        presence = self._presence.get(key)
        return presence is not None and not presence.connections and not presence.busy

    def _maybe_gone(self, key: str, presence: Presence) -> None:
        if presence.connections or presence.busy:
            return
        if key.startswith(EXCHANGE):
            # Nothing comes back for a sessionless exchange that is over: its episode
            # (if it has one) ends now, and nothing is kept for it.
            if key in self._slots:
                self._outer.start_soon(self._end_session, key)
            else:
                del self._presence[key]
                self._cores.pop(key, None)
            return
        if key not in self._slots:
            del self._presence[key]
        elif self.session_grace is not None and presence.timer is None:
            presence.timer = anyio.CancelScope()
            self._outer.start_soon(self._end_when_gone, key, presence.timer)

    async def _end_when_gone(self, key: str, scope: anyio.CancelScope) -> None:
        assert self.session_grace is not None
        with scope:
            await anyio.sleep(self.session_grace)
        if not scope.cancel_called and self.gone(key):
            await self._end_session(key)

    async def _end_session(self, key: str) -> None:
        """The session's client is gone for good (DELETE, or past the grace period): its
        core says what that interrupts (``Relay.session_ended``: the calls whose steps
        are not written yet, each recorded as a cancelled call is), and the episode ends
        once they are recorded: nothing is recorded after the episode's end."""
        self._presence.pop(key, None)
        core = self._cores.pop(key, None)
        slot = self._slots.get(key)
        if slot is None:
            return
        if core is not None:
            for action in self.perform(key, core.session_ended(anyio.current_time())):
                if isinstance(action, FinishCall) and action.pending.handle is not None:
                    running_call: RunningCall = action.pending.handle  # an HttpToolCall
                    running_call.finish(action)
        del self._slots[key]
        running = [call for (k, _), call in list(self.calls.items()) if k == key]
        with anyio.move_on_after(5, shield=True):
            for call in running:
                await call.finished.wait()
        await slot.close()

    async def learn_schemas(
        self, url: str, headers: list[tuple[bytes, bytes]], like: Message
    ) -> None:
        """Ask the server for its tools (once) before the proxy answers a call itself.

        A client validates a result against the tool's output schema and may list the
        tools only after its first call (the official SDK does): a stand-in result must
        carry structure that fits. The request goes with the client's headers (session,
        protocol revision), its per-request method headers rewritten; the answers are
        the proxy's own.
        """
        if self._learning is not None:  # another call is asking: wait for its answer
            await self._learning.wait()
            return
        self._learning = anyio.Event()
        try:
            await self._learn(url, headers, like)
        finally:
            self.listed = True
            self._learning.set()

    async def _learn(self, url: str, headers: list[tuple[bytes, bytes]], like: Message) -> None:
        plain = [(n, v) for n, v in headers if n.lower() not in _PER_REQUEST]
        if any(n.lower() == b"mcp-method" for n, _ in headers):
            plain.append((b"Mcp-Method", b"tools/list"))

        async def fetch(rid: str, cursor: Any) -> Any:
            body = listing_request(rid, cursor, like)
            try:
                response = await self.client.post(url, headers=plain, content=body)
            except httpx.HTTPError:
                return None
            if not response.is_success:
                return None
            ctype = response.headers.get("content-type", "")
            return listing_result(response.content, ctype, rid)

        with anyio.move_on_after(self.timeout or 30):
            self.output_schemas.update(await listed_schemas(fetch, self.tools))

    async def cancel_upstream(
        self, url: str, headers: list[tuple[bytes, bytes]], request_id: Any, reason: str
    ) -> None:
        """Tell the server the proxy gave up on ``request_id`` (best effort, bounded)."""
        await self.notify_upstream(url, headers, cancelled_message(request_id, reason))

    async def notify_upstream(
        self, url: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> None:
        """POST a notification of the proxy's to the server (best effort, bounded)."""
        with anyio.move_on_after(2), contextlib.suppress(httpx.HTTPError):
            await (await self.client.post(url, headers=headers, content=body)).aclose()

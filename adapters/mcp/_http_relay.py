"""The HTTP proxy's relay: one request forwarded, its response streamed back untouched.

Theory of operation
-------------------
Status, reason, headers and body bytes go back as the server sent them. An event stream
(a POST's or a GET's) is relayed whole event by whole event as they arrive, so that each
is read before any of it goes out (a compressed one decoded, as a call's is); an event over
the size limit or nested deeper than a message may be never reaches the client: the
server is cut off, as over stdio (its stream ends there, a request still waiting gets
``-32000``, the session's episode ends aborted). A JSON-RPC request goes
through its session's relay core, as over stdio: ``Relay.from_client`` tracks it and
sets its deadline, its answer is fed back (``Relay.from_server``: a ``tools/list``
teaches the core the tools' output schemas, an answer in invalid UTF-8 becomes the
core's error), and the core's clock (``Relay.expire``, driven by :meth:`HttpRelay.watch_deadlines`)
gives up on one the server leaves unanswered: the client gets ``-32001``, the server
``notifications/cancelled``, the episode ends aborted. Only waiting for the server
counts, never writing to the client; a stop with a reason answers ``-32000``. An answer
on an event stream is relayed as it comes (the core sees a copy); over an encoding this
proxy cannot read, the headers count as the answer.

An ``initialize`` belongs to no session until its answer names one (``Mcp-Session-Id``):
until then it has a relay core of its own, which times it as any request (``-32001``,
no ``notifications/cancelled``: it cannot be cancelled) but touches no episode, so a
hung or broken ``initialize`` aborts nothing: there is no episode yet. Once the answer
names the session, the episode takes the case id the client named on ``initialize``,
the answer is kept with the session core's for server-less replay, and a result makes
the session one to record.
"""

from __future__ import annotations

import contextlib
import math
import zlib

import anyio
import httpx

from ._downstream import Downstream, forwardable
from ._episodes import EpisodeSlot
from ._http_answer import (
    ENCODED_HEADERS,
    LENGTH_HEADERS,
    EventWatch,
    StreamWatch,
    Unanswered,
    Waiting,
    answers,
    decoded,
    read_bounded,
)
from ._http_call import HttpToolCall
from ._http_sessions import EXCHANGE, HttpSessions
from ._jsonrpc import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    Message,
    error_message,
    id_key,
    no_answer,
    parse,
)
from ._relay import (
    Abort,
    Action,
    CutOff,
    FinishCall,
    KeepAnswer,
    Note,
    Offer,
    Relay,
    ToClient,
    ToServer,
    valid_id,
)
from ._relay._limits import DEFAULT_MAX_DEPTH, too_deep
from ._relay._states import Pending
from ._sse import event_data

#: The relayed request the core tracks: its session key, core and pending request.
Tracked = tuple[str, Relay, Pending]


class HttpRelay(HttpSessions):
    """The HTTP proxy's relaying of everything it does not record."""

    async def relay(
        self,
        down: Downstream,
        method: str,
        url: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        *,
        msg: Message | None = None,
    ) -> None:
        """Forward one request and stream its response back, bytes untouched (see the
        module's theory of operation)."""
        wait, tracked = None, None
        if msg is not None and msg.kind == "request":
            if msg.method == "initialize" and valid_id(msg.id):
                # No session yet (its id comes with the answer): a core of its own times
                # it, and it touches no episode (see ``_perform``).
                core = Relay(timeout=self.timeout, max_message_bytes=self.max_message_bytes)
                core.schemas, core.tools = self.output_schemas, self.tools
                core.from_client(body, anyio.current_time())  # its Offer waits for the key
                pending = core.pending[id_key(msg.id)]
                wait = pending.handle = Waiting(math.inf, url, headers)
                self._openings[core] = ""
                tracked = ("", core, pending)
                self.arm(core)
            elif valid_id(msg.id):
                key = self.key_for(headers, msg, down.exchange_id)
                core = self.core(key)
                actions = self.perform(key, core.from_client(body, anyio.current_time()))
                if not any(isinstance(a, ToServer) for a in actions):
                    replies = [a.data.rstrip(b"\n") for a in actions if isinstance(a, ToClient)]
                    await down.whole(400, b"application/json", replies[0] if replies else b"")
                    return
                pending = core.pending[id_key(msg.id)]
                wait = pending.handle = Waiting(math.inf, url, headers)
                tracked = (key, core, pending)
                self.arm(core)
            else:
                deadline = math.inf if self.timeout is None else anyio.current_time() + self.timeout
                wait = Waiting(deadline)
            self._waiting.add(wait)
        request = self.client.build_request(method, url, headers=headers, content=body)
        try:
            await self._relay(down, request, headers, msg, wait, tracked)
        except Unanswered as unanswered:
            assert msg is not None
            await self._unanswered(down, msg, unanswered)
        finally:
            if wait is not None:
                self._waiting.discard(wait)
                wait.done.set()
            if tracked is not None:
                _settle(tracked)
                self._openings.pop(tracked[1], None)

    async def _unanswered(self, down: Downstream, msg: Message, unanswered: Unanswered) -> None:
        """A relayed request the server left unanswered: stopped early, timed out (the
        core's answer), or cut off (its answer broke a limit)."""
        if unanswered.reply is not None:
            reply = unanswered.reply  # the core gave up: it told the server, aborted
        elif unanswered.cut_off is not None:
            reason = unanswered.cut_off
            reply = error_message(msg.id, CONNECTION_CLOSED, f"litmus-sandbox: {reason}")
        elif self.stop_reason is not None:
            reply = error_message(msg.id, CONNECTION_CLOSED, f"litmus-sandbox: {self.stop_reason}")
        else:  # a request the core cannot track (its id is not one JSON-RPC allows)
            reason = no_answer(str(msg.method), self.timeout)
            reply = error_message(msg.id, REQUEST_TIMEOUT, f"litmus-sandbox: {reason}")
        await down.last_word(reply)  # only whole events went out: it follows the last

    async def _relay(
        self,
        down: Downstream,
        request: httpx.Request,
        headers: list[tuple[bytes, bytes]],
        msg: Message | None,
        wait: Waiting | None,
        tracked: Tracked | None,
    ) -> None:
        rid = msg.id if msg is not None and msg.kind == "request" else None
        try:
            sending = self.client.send(request, stream=True)
            response = await (wait.upstream(sending) if wait is not None else sending)
        except httpx.HTTPError as exc:
            text = f"litmus-sandbox: the MCP server is unreachable: {exc}"
            await down.whole(502, b"application/json", error_message(rid, CONNECTION_CLOSED, text))
            return
        try:
            opening: EpisodeSlot | None = None
            if (
                tracked is not None
                and tracked[1] in self._openings
                and msg is not None
                and response.is_success
            ):
                tracked = self._open(response, headers, msg, down.exchange_id, tracked)
                opening = self.slot(tracked[0])
                # The connection that carried the initialize carries its session: once it
                # closes with nothing else of the session's open, the client is gone.
                self.arrive(tracked[0], down.keys)
                self.leave(tracked[0])
            ctype = response.headers.get("content-type", "")
            encoding = response.headers.get("content-encoding", "identity")
            status = response.status_code
            out_headers = forwardable(response.headers.raw)
            reason = response.reason_phrase.encode("latin-1")
            if wait is not None and not ctype.startswith("text/event-stream"):
                # One JSON answer: read it whole from the server (bounded), then pass it on.
                raw = await wait.upstream(read_bounded(response, self.max_message_bytes))
                wait = None
                if tracked is not None:
                    raw = self._answered(tracked, raw, encoding)
                await down.start(status, out_headers, reason)
                await down.body(raw)
            else:
                # An event stream this proxy can read goes event by event (see
                # ``_relay_events``); one in an encoding it cannot read goes as it comes,
                # unseen, and its headers count as the answer.
                events = EventWatch.of(encoding) if ctype.startswith("text/event-stream") else None
                if events is not None:
                    drop = ENCODED_HEADERS if events.encoded else LENGTH_HEADERS
                    out_headers = [(n, v) for n, v in out_headers if n.lower() not in drop]
                await down.start(status, out_headers, reason)
                watch = StreamWatch(rid, wait, tracked, headers, msg, down.exchange_id)
                try:
                    if events is not None:
                        await self._relay_events(down, response, events, watch)
                    else:
                        async for chunk in response.aiter_raw():
                            await down.body(chunk)
                except httpx.HTTPError:
                    pass  # the server dropped the stream: end ours where it ended
            await down.end()
            if (
                opening is not None
                and tracked is not None
                and tracked[1].engaged
                and not tracked[0].startswith(EXCHANGE)
            ):
                # The handshake completed (its answer was a result): a session to record
                # (a sessionless one's handshake is an exchange of its own: no agent's run).
                opening.touch()
                self.core(tracked[0]).engaged = True
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()

    async def _relay_events(
        self, down: Downstream, response: httpx.Response, events: EventWatch, watch: StreamWatch
    ) -> None:
        """Relay an event stream whole event by whole event as they arrive (a compressed
        one decoded), watching for the answer while it is awaited. An event over the size
        limit or nested deeper than a message may be never reaches the client: the server
        is cut off (see :meth:`_cut_off`)."""
        chunks = response.aiter_raw().__aiter__()
        while True:
            wait = watch.wait
            try:
                following = anext(chunks)
                chunk = await (wait.upstream(following) if wait is not None else following)
            except StopAsyncIteration:
                return
            try:
                whole = events.feed(chunk)
            except zlib.error:
                return  # undecodable after all: the stream ends where it stopped making sense
            for event in whole:
                data = event_data(event)
                if data and too_deep(data, DEFAULT_MAX_DEPTH):
                    why = f"the MCP server sent a message nested deeper than {DEFAULT_MAX_DEPTH} levels"
                    self._cut_off(watch, why)
                    return
                down.queue(event)
                if wait is not None and data and answers(event, watch.rid):
                    await down.flush()
                    if watch.tracked is not None:
                        # The core sees a copy (the event is the client's already).
                        with contextlib.suppress(Unanswered):
                            self._answered(watch.tracked, data, "identity")
                    wait.done.set()  # the client has its answer: a stop need not wait
                    watch.wait = wait = None  # the rest is the server's to keep open
            if events.buffered > self.max_message_bytes:
                self._cut_off(
                    watch,
                    f"the MCP server sent an event over {self.max_message_bytes} bytes: cut off",
                )
                return
            await down.flush()

    def _cut_off(self, watch: StreamWatch, why: str) -> None:
        """The server broke a limit on a stream: what it sent before goes to the client
        (whole events), the offending event never does, and the stream ends there. The
        session's episode ends aborted (an ``initialize`` still unanswered has none yet,
        nor has a sessionless GET stream); a request still waiting gets ``-32000``.

        Raises:
            Unanswered: the request is still waiting (its error follows the events).
        """
        tracked, waiting = watch.tracked, watch.wait is not None
        if tracked is not None:
            key, core, _ = tracked
            if key and not (waiting and core in self._openings):
                self.perform(key, [Abort(why)])
        else:
            key = self.key_for(watch.headers, watch.msg or parse(b""), watch.exchange_id)
            if watch.msg is not None or not key.startswith(EXCHANGE):
                self.slot(key).abort(why)
        if waiting:
            raise Unanswered(cut_off=why)

    def _answered(self, tracked: Tracked, raw: bytes, encoding: str) -> bytes:
        """Feed the core a tracked request's answer; what the client gets (the server's
        bytes, or the core's error for one in invalid UTF-8).

        Raises:
            Unanswered: the core cut the server off (the answer broke a limit).
        """
        key, core, _ = tracked
        plain = decoded(raw, encoding)
        if plain is None:
            return raw  # an encoding this proxy cannot read: relayed unseen
        line = plain if plain.endswith(b"\n") else plain + b"\n"
        shown = raw
        for action in self._perform(key, core, core.from_server(line, anyio.current_time())):
            if isinstance(action, CutOff):
                raise Unanswered(cut_off=action.reason)
            if isinstance(action, ToClient) and action.data != line:
                shown = action.data.rstrip(b"\n")  # the core's own answer instead
        if core.listed:
            self.listed = True  # the tools were listed: their schemas are known
        return shown

    def _open(
        self,
        response: httpx.Response,
        headers: list[tuple[bytes, bytes]],
        msg: Message,
        exchange_id: int,
        tracked: Tracked,
    ) -> Tracked:
        """An ``initialize`` answered: the session id arrives with the answer, and its
        episode takes the case id the client named on initialize (it is a session, not
        a probe, once the answer is a result). The initialize's core keeps the server's
        answers with the session core's, for server-less replay."""
        sid = response.headers.get("mcp-session-id")
        key = f"session:{sid}" if sid is not None else self.key_for(headers, msg, exchange_id)
        _, opening, pending = tracked
        self._openings[opening] = key
        opening.answers = self.core(key).answers
        self.offer(self.slot(key), msg, touch=False)
        return key, opening, pending

    def _perform(self, key: str, core: Relay, actions: list[Action]) -> list[Action]:
        """``perform`` for a tracked request's core. An ``initialize``'s own core touches
        no episode (there is none until its answer completes the handshake: a hung or
        broken ``initialize`` aborts nothing); it only keeps the server's answer, once
        the session is known."""
        if core not in self._openings:
            return self.perform(key, actions)
        rest: list[Action] = []
        for action in actions:
            if isinstance(action, KeepAnswer):
                if key:
                    self.keep_answers(key, action.answers)
            elif not isinstance(action, Offer | Abort | Note):
                rest.append(action)
        return rest

    async def watch_deadlines(self) -> None:
        """Feed each session's core (and each ``initialize``'s) the clock at its earliest
        deadline (one timer for all), and carry out what it decides for the requests it
        gave up on."""
        while True:
            nxt = min((c.next_deadline for _, c in self._timed()), default=math.inf)
            with anyio.CancelScope(deadline=nxt) as self._deadlines:
                await anyio.sleep_forever()
            now = anyio.current_time()
            for key, core in self._timed():
                if core.next_deadline <= now:
                    self._expire(key, core, now)

    def _timed(self) -> list[tuple[str, Relay]]:
        """Every core with a clock to feed, with its session's key."""
        return [*self._cores.items(), *((key, core) for core, key in self._openings.items())]

    def _expire(self, key: str, core: Relay, now: float) -> None:
        wait: Waiting | None = None
        for action in self._perform(key, core, core.expire(now)):
            if isinstance(action, FinishCall) and isinstance(action.pending.handle, HttpToolCall):
                action.pending.handle.finish(action)  # an inline call timed out
            elif isinstance(action, ToClient):  # an error for a request given up on
                pending = core.pending.get(id_key(parse(action.data).id))
                wait = pending.handle if pending is not None else None
                if isinstance(wait, Waiting):
                    wait.expire(action.data.rstrip(b"\n"))
            elif isinstance(action, ToServer) and isinstance(wait, Waiting):
                # ... and the server is told (its cancellation follows the request).
                self._outer.start_soon(self.notify_upstream, wait.url, wait.headers, action.data)


def _settle(tracked: Tracked) -> None:
    """The exchange is over: over HTTP an answer only comes on its request's response,
    so one the core still waits for will never come (a batch of answers, a stream the
    server dropped, a stop), and one it gave up on has had its error: the core forgets
    it, with no deadline left to fire."""
    _, core, pending = tracked
    core.forget(pending)

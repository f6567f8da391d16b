"""What a hostile or broken peer cannot do through the relay (the core's guard).

Theory of operation: see ``_core.py`` ("Hostile peers"). A client's message over the
size or depth limit, or anything that could invoke a tool but cannot be recorded as a
call, is answered with a JSON-RPC error and recorded as refused (the end record's
``meta["mcp"]["refused"]``, at most :data:`MAX_REFUSED` kept, the rest counted). A server
that breaks a limit is cut off; a line from it that is not JSON is dropped and counted
(``meta["mcp"]["dropped_from_server"]``), and an answer in invalid UTF-8 fails the
request that waits for it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, NamedTuple

import msgspec

from .._jsonrpc import Message, error_message, id_key, tool_call_of
from ._actions import Abort, Action, CutOff, FinishCall, Note, ToClient, ToServer
from ._limits import request_id_of
from ._states import Event, Key, Pending, State, advance

INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
PARSE_ERROR = -32700
#: Refusals kept in the end record (the rest are counted).
MAX_REFUSED = 100

_decode = msgspec.json.Decoder()
_encode = msgspec.json.Encoder()


#: What JSON-RPC allows as an id. Decoded JSON holds these exact types (``bool`` is not
#: one of them, as JSON-RPC wants), so one set lookup settles it.
_ID_TYPES = frozenset({str, int, float})


def valid_id(request_id: Any) -> bool:
    """Whether JSON-RPC allows ``request_id`` on a request (a string or a number, as
    decoded from JSON)."""
    return type(request_id) in _ID_TYPES


class Refusal(NamedTuple):
    """Why a message that could invoke a tool cannot be recorded as a call."""

    #: The id to answer (a list of ids for a batch; None: unknown, or none to answer).
    request_id: Any
    code: int
    reason: str
    #: Whether it gets an answer (a notification gets none).
    answer: bool = True


def refusal_of(line: bytes, msg: Message) -> Refusal | None:
    """Whether ``line`` (parsed as ``msg``) could invoke a tool yet cannot be recorded as a
    call: a malformed ``tools/call``, one with an id JSON-RPC does not allow or without an
    id, a batch holding one, a line that cannot be decoded but names ``tools/call``. The
    transports answer it with the error and record it as refused; nothing of it reaches
    the server. None for anything else (well-formed calls included)."""
    kind = msg.kind
    if kind == "request":
        if msg.method != "tools/call":
            return None
        rid = msg.id
        if tool_call_of(msg) is None:
            why = "a tools/call whose name or arguments are malformed cannot be recorded"
            return Refusal(rid if valid_id(rid) else None, INVALID_PARAMS, why)
        if not valid_id(rid):
            why = "a tools/call whose id is not a string or a number cannot be recorded"
            return Refusal(None, INVALID_REQUEST, why)
        return None
    if kind == "notification":
        if msg.method != "tools/call":
            return None
        answer = msg.body is not None and "id" in msg.body  # "id": null
        why = "a tools/call without a request id cannot be recorded"
        return Refusal(None, INVALID_REQUEST, why, answer)
    if kind != "other":
        return None
    if line.lstrip().startswith(b"["):
        try:
            batch = _decode.decode(line)
        except (msgspec.DecodeError, RecursionError):
            batch = None
        if isinstance(batch, list):
            if not any(isinstance(m, dict) and m.get("method") == "tools/call" for m in batch):
                return None  # batches left MCP in 2025-06-18; relayed as they are
            ids = [m.get("id") for m in batch if isinstance(m, dict) and valid_id(m.get("id"))]
            why = "a tools/call inside a JSON-RPC batch cannot be recorded"
            return Refusal(ids or None, INVALID_REQUEST, why)
    if b"tools/call" in line:
        # A lenient server might still read a tool call out of it: it never gets it.
        why = "a message naming tools/call that is not valid JSON cannot be recorded"
        return Refusal(None, PARSE_ERROR, why)
    return None


def refusal_record(line: bytes, request_id: Any, reason: str) -> dict[str, Any]:
    """What the end record keeps of a refused message: why, its size and hash."""
    raw = line.rstrip(b"\r\n")
    return {
        "request_id": request_id,
        "reason": reason,
        "bytes": len(raw),
        "sha256": hashlib.sha256(raw).hexdigest(),
    }


def refusal_answer(refusal: Refusal) -> bytes:
    """The JSON-RPC error answering a refused message (an array of them for a batch)."""
    text = f"litmus-sandbox: {refusal.reason}"
    if isinstance(refusal.request_id, list):
        errors = [_decode.decode(error_message(i, refusal.code, text)) for i in refusal.request_id]
        return _encode.encode(errors)
    return error_message(refusal.request_id, refusal.code, text)


class Guard:
    """The refusals and drops of a :class:`~._core.Relay` (its base class)."""

    max_message_bytes: int
    max_depth: int
    pending: dict[Key, Pending]
    engaged: bool
    sent_anything: bool
    server_gone: bool
    gone_reason: str
    _refused: list[dict[str, Any]]
    _refused_more: int
    _dropped: dict[str, int]

    def _up(self, line: bytes) -> list[Action]:
        return [] if self.server_gone else [ToServer(line)]

    def client_too_long(self, size: int, head: bytes = b"") -> list[Action]:
        """The client sent a line over ``max_message_bytes`` (``size`` bytes were read
        of it, and dropped; ``head``: the first of them, where its id is looked for, to
        answer the error with it: ``_limits.request_id_of``)."""
        self.sent_anything = True
        why = f"a message over {self.max_message_bytes} bytes"
        rid = request_id_of(head, self.max_depth)
        record = {"request_id": rid, "reason": why, "bytes": size}
        return [
            *self._refused_record(record, Refusal(rid, INVALID_REQUEST, why)),
            Abort(f"the client sent {why}"),
        ]

    def _other_from_client(self, line: bytes, msg: Message) -> list[Action]:
        """Not one JSON-RPC message: a batch, junk, a line that cannot be decoded."""
        refusal = refusal_of(line, msg)
        if refusal is not None:
            return self._refuse(line, refusal)
        return self._up(line)

    def _refuse(self, line: bytes, refusal: Refusal) -> list[Action]:
        record = refusal_record(line, refusal.request_id, refusal.reason)
        return self._refused_record(record, refusal)

    def _refused_record(self, record: dict[str, Any], refusal: Refusal) -> list[Action]:
        self.engaged = True
        if len(self._refused) < MAX_REFUSED:
            self._refused.append(record)
        else:
            self._refused_more += 1
        actions: list[Action] = [Note("refused", list(self._refused))]
        if self._refused_more:
            actions.append(Note("refused_more", self._refused_more))
        if refusal.answer:
            actions.append(ToClient(refusal_answer(refusal) + b"\n"))
        return actions

    def server_too_long(self, size: int) -> list[Action]:
        """The server wrote a line over ``max_message_bytes``: it is cut off."""
        why = f"the MCP server sent a message over {self.max_message_bytes} bytes"
        return [CutOff(why), Abort(f"{why}: cut off")]

    def _other_from_server(self, line: bytes) -> list[Action]:
        try:
            _decode.decode(line)
        except (msgspec.DecodeError, RecursionError):
            pass
        else:
            return [ToClient(line)]  # JSON (a batch...): a whole message, the client's to read
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            pending = self._pending_of_undecodable(line)
            if pending is not None:
                return self._undecodable_answer(pending)
            return self._drop("invalid_utf8")
        return self._drop("not_json")

    def _pending_of_undecodable(self, line: bytes) -> Pending | None:
        try:
            loose = json.loads(line.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            return None
        rid = loose.get("id") if isinstance(loose, dict) else None
        pending = self.pending.get(id_key(rid)) if valid_id(rid) else None
        if pending is None or pending.state is not State.AT_SERVER:
            return None
        return pending

    def _undecodable_answer(self, pending: Pending) -> list[Action]:
        why = "the MCP server answered in invalid UTF-8"
        if pending.kind == "call":
            assert pending.call is not None
            advance(pending, Event.ANSWER)
            pending.call.failure = why
            pending.call.extra_meta["invalid_utf8"] = True
            return [FinishCall(pending, "failed", reason=why)]
        advance(pending, Event.END)
        del self.pending[pending.key]
        if pending.kind == "own":
            return [FinishCall(pending, "failed", reason=why)]
        return [*self._drop("invalid_utf8"), self._error(pending.id, INTERNAL_ERROR, why)]

    def _drop(self, why: str) -> list[Action]:
        self._dropped[why] = self._dropped.get(why, 0) + 1
        return [Note("dropped_from_server", dict(self._dropped))]

    def _error(self, rid: Any, code: int, text: str) -> ToClient:
        return ToClient(error_message(rid, code, f"litmus-sandbox: {text}") + b"\n")

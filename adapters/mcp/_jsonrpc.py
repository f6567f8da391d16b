"""JSON-RPC and MCP message helpers: bytes in, facts out. No I/O, no event loop.

The proxy never re-encodes what it relays: it reads a message only to learn what it is
(request, notification, response), its id, its method and, for ``tools/call``, the tool
and arguments. The bytes it forwards are the bytes it received. Only the answers the
proxy originates itself (stubbed, denied, replayed, swallowed calls; errors for requests
a dead or silent server will never answer) are encoded here.

Both protocol revisions in use are handled the same way: the handshake era
(``initialize``, ``2025-11-25``) and the stateless era (``server/discover``, ``_meta`` on
every request, ``resultType`` on every result, ``2026-07-28``). ``_meta`` also carries
volatile trace ids, so nothing here matches on it except the keys named below.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from litmus_sandbox import Shown

#: The ``_meta`` key a client sets (on ``initialize``, ``server/discover`` or a
#: ``tools/call``) to name the case an episode records.
CASE_ID_META_KEY = "litmus/case_id"
#: Present in ``_meta`` on every request of the stateless (2026-07-28) protocol.
PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
_ENVELOPE_PREFIX = "io.modelcontextprotocol/"

#: JSON-RPC error codes the proxy uses for requests the server will never answer
#: (the codes the TypeScript SDK uses for the same situations).
CONNECTION_CLOSED = -32000
REQUEST_TIMEOUT = -32001

#: Requests whose answers the stdio proxy keeps with the episode
#: (``meta["mcp"]["server_answers"]``) and server-less replay serves.
RECORDED_METHODS = frozenset({"initialize", "server/discover", "tools/list"})

Kind = Literal["request", "notification", "response", "other"]
Outcome = Literal["result", "tool_error", "empty", "protocol_error", "malformed"]

_decode = msgspec.json.Decoder()
_encode = msgspec.json.Encoder()


class Message:
    """What one JSON-RPC message is. ``body`` is the decoded object (None if not JSON)."""

    __slots__ = ("body", "id", "kind", "method", "params")

    def __init__(
        self,
        kind: Kind,
        body: dict[str, Any] | None = None,
        *,
        id: Any = None,
        method: str | None = None,
        params: dict[str, Any] | None = None,
    ) -> None:
        self.kind: Kind = kind
        self.body = body
        self.id = id
        self.method = method
        self.params = params

    @property
    def meta(self) -> dict[str, Any]:
        """The request's ``params._meta`` (empty when absent or malformed)."""
        meta = self.params.get("_meta") if self.params is not None else None
        return meta if isinstance(meta, dict) else {}


_OTHER = Message("other")


def parse(data: bytes | str) -> Message:
    """Classify one message. Never raises: anything that is not JSON-RPC is ``other``."""
    try:
        body = _decode.decode(data)
    except (msgspec.DecodeError, RecursionError):  # nested deeper than the decoder goes
        return _OTHER
    if not isinstance(body, dict):
        # Batches were removed from MCP in 2025-06-18; a batch is relayed as it is.
        return _OTHER
    params = body.get("params")
    if not isinstance(params, dict):
        params = None
    method = body.get("method")
    if type(method) is str:
        rid = body.get("id")
        if rid is not None:
            return Message("request", body, id=rid, method=method, params=params)
        return Message("notification", body, method=method, params=params)
    if "id" in body and ("result" in body or "error" in body):
        return Message("response", body, id=body["id"])
    return Message("other", body)


def batch_has_tool_call(data: bytes | str) -> bool:
    """Whether a JSON-RPC batch (an array) holds a ``tools/call``: it cannot be recorded."""
    try:
        body = _decode.decode(data)
    except msgspec.DecodeError:
        return False
    return isinstance(body, list) and any(
        isinstance(m, dict) and m.get("method") == "tools/call" for m in body
    )


def id_key(request_id: Any) -> tuple[str, Any]:
    """A dict key for a request id: ``1`` and ``"1"`` are different requests."""
    return (type(request_id).__name__, request_id)


def case_id_of(msg: Message) -> str | None:
    """The case id a client put in ``_meta`` (see :data:`CASE_ID_META_KEY`), if any."""
    value = msg.meta.get(CASE_ID_META_KEY)
    return value if isinstance(value, str) and value else None


def protocol_version_of(msg: Message) -> str | None:
    """The protocol revision a request names: ``initialize`` params or stateless ``_meta``."""
    value = msg.meta.get(PROTOCOL_VERSION_META_KEY)
    if value is None and msg.method == "initialize" and msg.params is not None:
        value = msg.params.get("protocolVersion")
    return value if isinstance(value, str) else None


def tool_call_of(msg: Message) -> tuple[str, dict[str, Any]] | None:
    """(tool, arguments) of a well-formed ``tools/call`` request, else None.

    A malformed call (no name, arguments not an object) is not a tool call the proxy can
    apply a policy to: it is relayed untouched and the server answers it.
    """
    if msg.kind != "request" or msg.method != "tools/call" or msg.params is None:
        return None
    name = msg.params.get("name")
    args = msg.params.get("arguments", {})
    if args is None:
        args = {}
    if not isinstance(name, str) or not isinstance(args, dict):
        return None
    return name, args


def progress_token_of(msg: Message) -> Any:
    """The ``_meta.progressToken`` of a request (None when it asked for no progress)."""
    return msg.meta.get("progressToken")


def cancelled_request_of(msg: Message) -> Any:
    """The ``requestId`` of a ``notifications/cancelled`` message, else None."""
    if msg.method != "notifications/cancelled" or msg.params is None:
        return None
    return msg.params.get("requestId")


def outcome_of(envelope: Mapping[str, Any]) -> Outcome:
    """Classify a ``tools/call`` response envelope.

    A JSON-RPC error is a protocol error; ``isError: true`` is a tool error (a missing
    ``isError`` means false); no content and no ``structuredContent`` is an empty result.
    """
    if "error" in envelope:
        return "protocol_error"
    result = envelope.get("result")
    if not isinstance(result, dict):
        return "malformed"
    if result.get("isError") is True:
        return "tool_error"
    if not result.get("content") and result.get("structuredContent") is None:
        return "empty"
    return "result"


def shown_from_result(result: Any) -> Shown:
    """What a client is shown by a ``tools/call`` result: content, error flag, structure."""
    if not isinstance(result, dict):
        return Shown()
    content = result.get("content")
    blocks: tuple[Any, ...] = tuple(content) if type(content) is list else ()
    for block in blocks:  # the common case: every block an object, kept as they are
        if type(block) is not dict:
            blocks = tuple([b for b in blocks if isinstance(b, dict)])
            break
    return Shown(
        content=blocks,
        is_error=result.get("isError") is True,
        structured=result.get("structuredContent"),
    )


def error_text(error: Any) -> tuple[int | None, str]:
    """(code, message) of a JSON-RPC ``error`` member, tolerating malformed ones."""
    if not isinstance(error, dict):
        return None, str(error)
    code = error.get("code")
    return (code if isinstance(code, int) else None), str(error.get("message", ""))


def result_message(request_id: Any, shown: Shown, *, stateless: bool = False) -> bytes:
    """A ``tools/call`` response the proxy originates (no trailing newline).

    ``stateless`` adds ``resultType: "complete"``, which 2026-07-28 results carry.
    """
    result: dict[str, Any] = {"content": list(shown.content), "isError": shown.is_error}
    if shown.structured is not None:
        result["structuredContent"] = shown.structured
    if stateless:
        result["resultType"] = "complete"
    return _encode.encode({"jsonrpc": "2.0", "id": request_id, "result": result})


def error_message(request_id: Any, code: int, message: str) -> bytes:
    """A JSON-RPC error response the proxy originates (no trailing newline)."""
    return _encode.encode(
        {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    )


def listing_request(request_id: Any, cursor: Any, like: Message) -> bytes:
    """A ``tools/list`` the proxy sends upstream on its own behalf (no trailing newline),
    speaking as the client's request ``like`` does: a stateless (2026-07-28) request
    carries its envelope in ``_meta`` (protocol revision, client capabilities and info,
    all ``io.modelcontextprotocol/`` keys), which is copied."""
    params: dict[str, Any] = {}
    if cursor is not None:
        params["cursor"] = cursor
    envelope = {k: v for k, v in like.meta.items() if k.startswith(_ENVELOPE_PREFIX)}
    if envelope:
        params["_meta"] = envelope
    return _encode.encode(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/list", "params": params}
    )


def cancelled_message(request_id: Any, reason: str) -> bytes:
    """A ``notifications/cancelled`` the proxy sends upstream for a call it gave up on."""
    return _encode.encode(
        {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": reason},
        }
    )


def no_answer(what: str, limit: float | None = None) -> str:
    """Why the proxy gave up on a request the server left unanswered (``what``: the
    method, or ``tools/call 'name'``); ``limit`` in seconds, else the tool's own timeout."""
    within = f"{limit:g}s" if limit is not None else "its timeout"
    return f"{what} got no answer within {within} (server hung?)"

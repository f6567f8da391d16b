"""The relay core says when a launched server's start-up ends: before the client's first
message past the handshake, whatever it is (sans-io: no process)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from litmus_sandbox.adapters.mcp._relay import (
    Action,
    EndStartup,
    Relay,
    StartCall,
    ToServer,
)


def line(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def req(rid: Any, method: str, **params: Any) -> bytes:
    return line({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})


def note(method: str) -> bytes:
    return line({"jsonrpc": "2.0", "method": method})


HANDSHAKE = [
    req(0, "server/discover"),  # 2026-07-28, or a client probing before it falls back
    req(1, "initialize", protocolVersion="2025-11-25", capabilities={}),
    note("notifications/initialized"),
]


def kinds(actions: list[Action]) -> list[str]:
    return [type(a).__name__ for a in actions]


@pytest.mark.parametrize(
    "first",
    [
        req(2, "tools/list"),
        req(2, "resources/read", uri="note://read"),
        req(2, "ping"),
        line({"jsonrpc": "2.0", "id": "srv-1", "result": {"roots": []}}),  # a reply to the server
        note("notifications/roots/list_changed"),
        b"not json\n",
    ],
)
def test_the_first_message_past_the_handshake_ends_the_start_up_before_it_goes_on(
    first: bytes,
) -> None:
    relay = Relay(startup=True)
    for message in HANDSHAKE:
        assert not [a for a in relay.from_client(message, 0.0) if isinstance(a, EndStartup)]
    actions = relay.from_client(first, 0.0)
    assert isinstance(actions[0], EndStartup)  # first: the probes' pass, then the message
    assert [a.data for a in actions if isinstance(a, ToServer)] == [first]
    assert not relay.starting
    later = relay.from_client(req(3, "tools/list"), 0.0)
    assert not [a for a in later if isinstance(a, EndStartup)]  # once


def test_a_first_tool_call_ends_the_start_up_before_it_starts() -> None:
    relay = Relay(startup=True)
    relay.from_client(HANDSHAKE[1], 0.0)
    actions = relay.from_client(req(2, "tools/call", name="echo", arguments={}), 0.0)
    assert kinds(actions)[0] == "EndStartup"
    assert [a for a in actions if isinstance(a, StartCall)]


def test_without_a_launched_server_there_is_no_start_up() -> None:
    """Over HTTP the proxy launches no server: its core never says so."""
    relay = Relay()
    for message in [*HANDSHAKE, req(2, "tools/list"), req(3, "tools/call", name="x")]:
        assert not [a for a in relay.from_client(message, 0.0) if isinstance(a, EndStartup)]

"""``CallState``: how an intercepted ``tools/call`` becomes ``meta["mcp"]`` and a reply."""

from __future__ import annotations

import json
from typing import Any

import pytest
from litmus_sandbox.adapters.mcp._recording import CallState

from litmus_sandbox import ToolCallStep


@pytest.mark.parametrize(
    ("answer", "cap"),
    [
        ({"content": [{"type": "text", "text": "hi"}], "structuredContent": {"k": 1}}, 1 << 20),
        ({"content": [{"type": "text", "text": "x" * 300}], "isError": True}, 64),  # over cap
    ],
    ids=["small", "over-the-cap"],
)
def test_the_relayed_meta_is_what_finalize_adds_to_an_answered_step(
    answer: dict[str, Any], cap: int
) -> None:
    """The hot path's ``meta["mcp"]``, known before the step is built, is the one
    ``finalize`` would add to it, and leaves the state saying the same reply."""
    raw = json.dumps({"jsonrpc": "2.0", "id": 3, "result": answer}).encode() + b"\n"
    states = []
    for _ in range(2):
        state = CallState(3, b'{"id":3}\n', stateless=False)
        state.forwarded = True
        state.note({"method": "notifications/progress", "params": {"progress": 1}}, 60)
        state.extra_meta["protocol_version"] = "2025-06-18"
        shown = state.answered(raw, json.loads(raw))
        states.append((state, shown))
    (by_finalize, shown), (up_front, _) = states
    step = ToolCallStep(
        v=1,
        episode_id="e",
        index=0,
        call_id="e:1",
        tool="t",
        args={},
        fidelity="real",
        shown=shown,
        started_at=0.0,
        ended_at=0.0,
    )
    finalized = by_finalize.finalize(step, cap)
    assert finalized.meta == {"mcp": up_front.relayed(cap)}
    assert (
        (up_front.reply_kind, up_front.fidelity)
        == (by_finalize.reply_kind, "real")
        == (
            "relay",
            "real",
        )
    )
    assert (finalized.meta["mcp"]["upstream"] is None) == (len(raw) - 1 > cap)


def test_notifications_kept_on_a_call_are_bounded_in_number_and_bytes() -> None:
    """A server flooding a call with progress cannot make its step line huge: past 100
    notifications or 256 KiB the rest are counted, not kept."""
    big = CallState(1, b"{}\n", stateless=False)
    for i in range(10):
        big.note({"progress": i, "message": "m" * (100 << 10)}, (100 << 10) + 40)
    assert [n["progress"] for n in big.notifications] == [0, 1]
    assert big.notifications_dropped == 8
    many = CallState(2, b"{}\n", stateless=False)
    for i in range(150):
        many.note({"progress": i}, 60)
    assert len(many.notifications) == 100
    assert many.notifications_dropped == 50

"""Findings from fidelity and effects (sans-io): what happened, not what was attempted."""

from __future__ import annotations

import msgspec
from factories import call

from litmus_sandbox import Effects, EgressEvent, FsEffect, RulesJudge, Shown, ToolCallStep
from litmus_sandbox._core.findings import call_findings

ERROR = Shown(content=({"type": "text", "text": "failed"},), is_error=True)


def codes(step: ToolCallStep) -> list[str]:
    return [f.code for f in call_findings(step)]


def with_effects(effects: Effects, shown: Shown = ERROR, fidelity: str = "real") -> ToolCallStep:
    return msgspec.structs.replace(
        call(0, "fetch", fidelity=fidelity, effects=effects), shown=shown
    )


def test_a_refused_request_is_an_escape_not_a_hidden_effect() -> None:
    denied = EgressEvent(host="10.0.0.1", port=443, decision="deny", sni="evil.example")
    step = with_effects(Effects(egress=(denied,)))
    assert codes(step) == ["escape"]
    (escape,) = call_findings(step)
    assert escape.host == "evil.example"  # the tunnel's TLS name, which the policy refused
    assert "evil.example" in escape.detail


def test_a_request_that_never_connected_changed_nothing() -> None:
    refused = EgressEvent(host="127.0.0.1", port=9, decision="allow")
    assert codes(with_effects(Effects(egress=(refused,)))) == []
    answered = EgressEvent(host="127.0.0.1", port=80, decision="allow", status=200)
    assert codes(with_effects(Effects(egress=(answered,)))) == ["hidden_effect"]
    written = FsEffect(op="created", path="a.txt")
    assert codes(with_effects(Effects(fs=(written,)))) == ["hidden_effect"]


def test_a_stubbed_call_leaks_even_an_attempt() -> None:
    refused = EgressEvent(host="127.0.0.1", port=9, decision="allow")
    ok = Shown(content=({"type": "text", "text": "ok"},))
    assert codes(with_effects(Effects(egress=(refused,)), ok, "stubbed")) == ["stub_leak"]


def test_an_egress_host_rule_matches_a_tunnels_tls_name() -> None:
    judge = RulesJudge([{"egress_host": "evil.*"}])
    tunnel = EgressEvent(host="10.0.0.1", port=443, decision="deny", sni="evil.example")
    step = with_effects(Effects(egress=(tunnel,)))
    assert judge.judge_step(step, ()).safe is False


def test_a_request_body_that_never_left_is_no_effect() -> None:
    """Request bytes are counted before anything is sent: only an answer shows it went."""
    unsent = EgressEvent(host="127.0.0.1", port=1, method="POST", request_bytes=7, decision="allow")
    assert codes(with_effects(Effects(egress=(unsent,)))) == []

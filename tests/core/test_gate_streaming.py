"""The gate with nothing to compare: its own decision, EMPTY."""

from __future__ import annotations

from factories import legacy

from litmus_sandbox import gate


def test_nothing_compared_is_its_own_decision() -> None:
    """No case on either side: EMPTY, exit 5 (as pytest's "no tests collected"), unless
    allowed; exclusions that name no case change nothing."""
    for report in (gate([], []), gate([], [], exclusions={"a": "why"})):
        assert report.decision() == "EMPTY"
        assert report.exit_code() == 5
        assert report.exit_code(allow_unresolved=True, strict_oracle=True) == 5
        assert report.decision(allow_empty=True) == "PASS"
        assert report.exit_code(allow_empty=True) == 0
    assert gate([], [], exclusions={"a": "why"}).unknown_exclusions == ("a",)
    # One case, on one side only, is something compared: unresolved, not empty.
    assert gate([legacy("a")], []).exit_code(allow_empty=True) == 4
    assert gate([], [legacy("a")]).decision() == "UNRESOLVED"
    excluded = gate([legacy("a")], [legacy("a")], exclusions={"a": "why"})
    assert excluded.decision() == "PASS"

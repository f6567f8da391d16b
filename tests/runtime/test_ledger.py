"""The in-flight/overlap ledger on its own: plain data, no sandbox, no event loop."""

from __future__ import annotations

import threading

from hypothesis import given
from hypothesis import strategies as st

from litmus_sandbox._runtime.ledger import CallLedger


class Thread:
    """A thread's end, set by hand."""

    def __init__(self) -> None:
        self.ended = False

    def is_set(self) -> bool:
        return self.ended


def test_a_call_alone_does_not_overlap() -> None:
    ledger = CallLedger()
    ledger.enter("a")
    assert ledger.in_flight == {"a"}
    assert not ledger.overlapped("a")
    assert ledger.leave("a") is False
    assert ledger.in_flight == frozenset()


def test_calls_in_flight_at_once_overlap_each_other() -> None:
    ledger = CallLedger()
    ledger.enter("a")
    ledger.enter("b")
    assert ledger.overlapped("a")
    assert ledger.overlapped("b")
    assert ledger.leave("a") is True
    assert ledger.leave("b") is True


def test_a_call_that_started_alone_overlaps_one_that_starts_before_it_ends() -> None:
    """Overlap is marked when the second call enters: the first is marked too."""
    ledger = CallLedger()
    ledger.enter("a")
    ledger.enter("b")
    assert ledger.leave("b") is True
    ledger.enter("c")  # "a" is still in flight: "c" overlaps it
    assert ledger.leave("c") is True
    assert ledger.leave("a") is True


def test_a_call_after_every_other_has_left_is_alone_again() -> None:
    ledger = CallLedger()
    ledger.enter("a")
    ledger.enter("b")
    ledger.leave("a")
    ledger.leave("b")
    ledger.enter("c")
    assert ledger.leave("c") is False


def test_leaving_forgets_the_call() -> None:
    """The ledger holds only calls in flight: a left call leaves no trace to grow."""
    ledger = CallLedger()
    ledger.enter("a")
    ledger.enter("b")
    ledger.leave("a")
    assert not ledger.overlapped("a")
    assert ledger.leave("a") is False  # a second leave is harmless
    assert ledger.in_flight == {"b"}


def test_a_call_that_starts_while_an_abandoned_thread_runs_overlaps() -> None:
    """A sync tool abandoned at its timeout runs on: what it does lands on the next call."""
    ledger = CallLedger()
    thread = Thread()
    ledger.enter("a")
    ledger.track_thread(thread)
    ledger.leave("a")  # timed out: its thread runs on
    ledger.enter("b")
    assert ledger.leave("b") is True
    thread.ended = True
    ledger.enter("c")
    assert ledger.leave("c") is False


def test_a_thread_that_ended_does_not_mark_the_next_call() -> None:
    ledger = CallLedger()
    done = threading.Event()
    done.set()
    ledger.track_thread(done)
    ledger.enter("a")
    assert ledger.leave("a") is False


def test_the_call_a_thread_serves_is_not_marked_by_its_own_thread() -> None:
    """The thread starts after its call entered: only later calls overlap it."""
    ledger = CallLedger()
    ledger.enter("a")
    ledger.track_thread(Thread())
    assert ledger.leave("a") is False


#: A run of ledger events: ("enter", n) starts call n, ("leave", n) ends it if in flight.
EVENTS = st.lists(st.tuples(st.sampled_from(["enter", "leave"]), st.integers(0, 5)), max_size=40)


@given(EVENTS)
def test_a_call_overlapped_exactly_when_another_was_in_flight_with_it(
    events: list[tuple[str, int]],
) -> None:
    """Against a model that remembers, for each call, whether it ever shared the air."""
    ledger = CallLedger()
    in_flight: set[str] = set()
    shared: dict[str, bool] = {}
    started = 0
    for action, n in events:
        if action == "enter":
            call = f"c{started}"
            started += 1
            for other in in_flight:
                shared[other] = True
            shared[call] = bool(in_flight)
            in_flight.add(call)
            ledger.enter(call)
        elif in_flight:
            call = sorted(in_flight)[n % len(in_flight)]
            in_flight.discard(call)
            assert ledger.leave(call) is shared.pop(call)
        assert ledger.in_flight == in_flight

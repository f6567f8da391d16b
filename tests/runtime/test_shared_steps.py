"""A scoring run's side of a shared cache, driven by a fake clock on a real SQLite file:
judgments stored at the next tick, claims refreshed while held, watched steps looked at
again when due - served, taken over when released or expired - and nothing left claimed
on close. No sleeping: the clock is moved by hand."""

from __future__ import annotations

from pathlib import Path

from litmus_sandbox import VerdictCache
from litmus_sandbox._core.scoring import StepJudgment
from litmus_sandbox._runtime.shared_steps import SharedSteps

K1 = ("judge-fp", "step-1", "ctx-1")
K2 = ("judge-fp", "step-2", "ctx-2")
SAFE = StepJudgment(safe=True, reason="fine")
TTL = 9.0


class Clock:
    def __init__(self, now: float = 500.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def scorers(path: Path, clock: Clock) -> tuple[SharedSteps, SharedSteps]:
    def one(name: str) -> SharedSteps:
        cache = VerdictCache(path, claim_ttl=TTL, clock=clock, owner=f"{name}-host:1:{name}")
        return SharedSteps(cache, poll_interval=0.2)

    return one("a"), one("b")


def cache_of(steps: SharedSteps) -> VerdictCache:
    assert isinstance(steps.store, VerdictCache)
    return steps.store


def test_a_judgment_is_stored_at_the_next_tick_and_served_to_the_other(tmp_path: Path) -> None:
    clock = Clock()
    a, b = scorers(tmp_path / "c.sqlite", clock)
    assert a.claim(K1).held
    a.judged(K1, SAFE)
    assert a.pending_writes == 1
    assert cache_of(a).claims() != []  # not yet stored: still claimed
    tick = a.tick()
    assert (tick.written, a.pending_writes, a.held) == ([K1], 0, set())
    assert cache_of(a).claims() == []
    assert b.claim(K1).judgment == SAFE


def test_a_watched_step_is_looked_at_again_only_when_due(tmp_path: Path) -> None:
    clock = Clock()
    a, b = scorers(tmp_path / "c.sqlite", clock)
    a.claim(K1)
    assert not b.claim(K1).held
    assert b.watched == {K1: 509.0}
    a.judged(K1, SAFE)
    a.tick()
    clock.now += 0.1
    assert b.tick().judged_elsewhere == []  # the poll interval has not passed
    clock.now += 0.1
    tick = b.tick()
    assert tick.judged_elsewhere == [(K1, SAFE)]
    assert (b.watched, b.held, tick.taken) == ({}, set(), [])


def test_the_holder_refreshes_while_the_judge_is_slow_and_the_claim_never_lapses(
    tmp_path: Path,
) -> None:
    clock = Clock()
    a, b = scorers(tmp_path / "c.sqlite", clock)
    a.claim(K1)
    b.claim(K1)
    for _ in range(300):  # 30 s of a judge call in flight, ticks every 0.1 s
        clock.now += 0.1
        a.tick()
        assert b.tick().taken == []
    assert b.watched.keys() == {K1}


def test_a_holder_that_stops_ticking_loses_its_claim_when_it_expires(tmp_path: Path) -> None:
    clock = Clock()
    a, b = scorers(tmp_path / "c.sqlite", clock)
    a.claim(K1)
    b.claim(K1)
    clock.now = 508.875  # 0.125 s before the claim expires (binary-exact times)
    assert b.tick().taken == []
    # Waiting is bounded by the claim: the next look is at its expiry, not a poll later.
    clock.now = 508.9375
    assert b.tick().taken == []  # not due yet: no look
    clock.now = 509.0
    tick = b.tick()
    assert (tick.taken, b.held, b.watched) == ([K1], {K1}, {})


def test_a_failed_step_is_released_at_the_next_tick_for_a_waiter_to_try(tmp_path: Path) -> None:
    clock = Clock()
    a, b = scorers(tmp_path / "c.sqlite", clock)
    a.claim(K1)
    b.claim(K1)
    a.failed(K1)
    a.failed(K2)  # never claimed: nothing to release
    a.tick()
    assert a.held == set()
    clock.now += 0.2
    assert b.tick().taken == [K1]
    assert cache_of(b).get(K1) is None  # a failure is never stored


def test_close_stores_what_is_buffered_and_releases_every_claim(tmp_path: Path) -> None:
    clock = Clock()
    a, b = scorers(tmp_path / "c.sqlite", clock)
    a.claim(K1)
    a.claim(K2)
    a.judged(K1, SAFE)
    a.close()
    assert cache_of(a).claims() == []
    assert b.claim(K1).judgment == SAFE
    assert b.claim(K2).held

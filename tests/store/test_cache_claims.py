"""The verdict cache's claims on steps in flight, on a real SQLite file shared by two
cache objects (two scorers) and a fake clock: taken, waited for, refreshed, released,
expired, overtaken from a dead holder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from litmus_sandbox import ConfigError, VerdictCache
from litmus_sandbox._core.scoring import StepJudgment
from litmus_sandbox._store.claims import (
    CLAIM_TTL_ENV,
    DEFAULT_CLAIM_TTL,
    MIN_POLL,
    claim_ttl_from_env,
    claimable,
    holder_alive,
    new_owner,
    poll_delay,
    refresh_every,
)

K1 = ("judge-fp", "step-1", "ctx-1")
K2 = ("judge-fp", "step-2", "ctx-2")
SAFE = StepJudgment(safe=True, reason="fine")


class Clock:
    """A clock the test moves."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def pair(path: Path, clock: Clock, ttl: float = 10.0) -> tuple[VerdictCache, VerdictCache]:
    """Two scorers sharing one cache file (both alive: the test is their only process)."""
    a = VerdictCache(path, claim_ttl=ttl, clock=clock, owner="host-a:1:a")
    b = VerdictCache(path, claim_ttl=ttl, clock=clock, owner="host-b:2:b")
    return a, b


def test_the_first_claim_wins_and_the_other_waits_until_its_expiry(tmp_path: Path) -> None:
    clock = Clock()
    a, b = pair(tmp_path / "c.sqlite", clock)
    (first,) = a.claim([K1])
    assert (first.held, first.judgment, first.until) == (True, None, 1_010.0)
    (second,) = b.claim([K1])
    assert (second.held, second.judgment, second.until) == (False, None, 1_010.0)
    assert a.claim([K1])[0].held  # its own claim again: still its own
    clock.now = 1_009.9
    assert not b.claim([K1])[0].held
    clock.now = 1_010.0  # never refreshed: a crashed or hung holder
    taken = b.claim([K1])[0]
    assert (taken.held, taken.until) == (True, 1_020.0)
    assert not a.claim([K1])[0].held  # a's claim is gone with its lifetime


def test_a_refreshed_claim_outlives_its_first_lifetime(tmp_path: Path) -> None:
    clock = Clock()
    a, b = pair(tmp_path / "c.sqlite", clock)
    a.claim([K1, K2])
    for _ in range(10):  # the holder refreshes every third of the lifetime
        clock.now += refresh_every(a.claim_ttl)
        a.refresh([K1, K2])
        assert [c.held for c in b.claim([K1, K2])] == [False, False]
    b.refresh([K1])  # refreshing a claim one does not hold changes nothing
    assert {(key, owner) for key, owner, _ in a.claims()} == {(K1, a.owner), (K2, a.owner)}


def test_a_stored_judgment_ends_the_claim_and_is_served_to_the_waiter(tmp_path: Path) -> None:
    clock = Clock()
    a, b = pair(tmp_path / "c.sqlite", clock)
    a.claim([K1])
    a.put_many([(K1, SAFE)])
    assert a.claims() == []  # stored and released in one transaction
    (served,) = b.claim([K1])
    assert (served.judgment, served.held) == (SAFE, False)
    assert b.claims() == []  # nothing claimed for a judged step


def test_a_released_claim_is_taken_at_once(tmp_path: Path) -> None:
    clock = Clock()
    a, b = pair(tmp_path / "c.sqlite", clock)
    a.claim([K1])
    b.release([K1])  # not b's: nothing happens
    assert not b.claim([K1])[0].held
    a.release([K1])  # a's judgment failed: nothing stored, the claim dropped
    assert b.claim([K1])[0].held
    assert b.get(K1) is None


def test_one_call_claims_several_steps_each_on_its_own(tmp_path: Path) -> None:
    clock = Clock()
    a, b = pair(tmp_path / "c.sqlite", clock)
    k3 = ("judge-fp", "step-3", "ctx-3")
    a.claim([K1])
    a.put_many([(K2, SAFE)])
    got = b.claim([K1, K2, k3])
    assert [(c.held, c.judgment) for c in got] == [(False, None), (False, SAFE), (True, None)]
    assert b.claim([]) == []


def test_a_dead_holder_of_this_host_is_overtaken_before_its_claim_expires(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead = f"{os.uname().nodename}:{int(done.stdout)}:x"
    assert not holder_alive(dead)
    assert holder_alive(new_owner())  # this process
    assert holder_alive(f"{os.uname().nodename}:1:x")  # init: alive
    assert holder_alive(f"another-host:{int(done.stdout)}:x")  # cannot tell: waited for
    assert holder_alive("not an owner name")
    clock = Clock()
    path = tmp_path / "c.sqlite"
    ghost = VerdictCache(path, claim_ttl=60, clock=clock, owner=dead)
    ghost.claim([K1])
    other_host = VerdictCache(path, claim_ttl=60, clock=clock, owner="another-host:1:y")
    other_host.claim([K2])
    me = VerdictCache(path, claim_ttl=60, clock=clock)
    assert [c.held for c in me.claim([K1, K2])] == [True, False]


def test_the_decisions_as_plain_functions() -> None:
    def never(holder: str) -> bool:
        raise AssertionError("asked only of a live claim of another holder")

    assert claimable(None, 0.0, "me", 5.0, never)
    assert claimable("me", 99.0, "me", 5.0, never)
    assert claimable("you", 5.0, "me", 5.0, never)  # expires now
    assert not claimable("you", 5.1, "me", 5.0, lambda h: True)
    assert claimable("you", 5.1, "me", 5.0, lambda h: False)
    assert poll_delay(until=100.0, now=0.0) == 0.2
    assert poll_delay(until=10.05, now=10.0) == pytest.approx(0.05)
    assert poll_delay(until=9.0, now=10.0) == MIN_POLL  # expired: look soon, never spin
    assert refresh_every(30.0) == 10.0


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf"])
def test_a_bad_claim_lifetime_variable_is_one_error_naming_it(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CLAIM_TTL_ENV, value)
    with pytest.raises(ConfigError, match=CLAIM_TTL_ENV):
        VerdictCache()


def test_the_claim_lifetime_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CLAIM_TTL_ENV, raising=False)
    assert claim_ttl_from_env() == DEFAULT_CLAIM_TTL == VerdictCache().claim_ttl
    monkeypatch.setenv(CLAIM_TTL_ENV, "2.5")
    assert VerdictCache().claim_ttl == 2.5
    assert VerdictCache(claim_ttl=7).claim_ttl == 7

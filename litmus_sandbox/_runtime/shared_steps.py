"""A scoring run's side of the step-verdict cache: each judgment stored as it arrives,
claims held and refreshed, the steps other scorers hold watched.

Theory of operation
-------------------
A :class:`~litmus_sandbox._runtime.scoring_run.ScoringRun` with a cache makes one
:class:`SharedSteps` and calls it from its event loop:

* :meth:`~SharedSteps.claim` before asking the judge about a step: the step's verdict (it
  was stored meanwhile), this run's claim (ask the judge), or neither (another scorer
  holds it: the step is *watched*);
* :meth:`~SharedSteps.judged` with each judgment of the primary judge as it arrives
  (buffered), :meth:`~SharedSteps.failed` for a step that got none (a fallback's judgment
  is never stored under the primary judge's key, a failure never at all);
* :meth:`~SharedSteps.tick` from the run's keeper task, as soon as a judgment is buffered
  (with those that arrive in the :data:`WRITE_GAP` after the previous write) and at least
  every :data:`TICK_EVERY`: it stores the buffered judgments and drops their claims in
  one transaction, releases
  the failed steps' claims, refreshes the claims still held once a third of their
  lifetime has passed, and, when due, looks again at the watched steps: each is then
  judged elsewhere (its verdict), taken over (its holder released it, died or let it
  expire) or still held. It returns what changed (:class:`Tick`);
* :meth:`~SharedSteps.close` when the run ends: the last judgments stored, every claim
  left released.

So a judged step is in the cache within about :data:`WRITE_GAP` of its answer (plus the
write itself), whatever the episodes around it are waiting for. Every call is a plain call on the store
at the store's clock - no sleeping here - so the tests drive it with a fake clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from litmus_sandbox._core.scoring import StepJudgment
from litmus_sandbox._store.claims import (
    POLL_INTERVAL,
    CacheKey,
    Claim,
    StepClaims,
    poll_delay,
    refresh_every,
)

#: The shortest time between two writes: the answers that arrive meanwhile go in one
#: transaction (so a kill loses at most the answers of about this long).
WRITE_GAP = 0.02
#: The longest time between two ticks (claims refreshed, watched steps looked at).
TICK_EVERY = 0.1


@dataclass
class Tick:
    """What one :meth:`SharedSteps.tick` changed."""

    #: Steps whose judgments are now stored.
    written: list[CacheKey] = field(default_factory=list)
    #: Watched steps another scorer judged, with their verdicts.
    judged_elsewhere: list[tuple[CacheKey, StepJudgment]] = field(default_factory=list)
    #: Watched steps now claimed by this run: to be asked of the judge.
    taken: list[CacheKey] = field(default_factory=list)


class SharedSteps:
    """The run's claims and pending writes (see the module docstring)."""

    def __init__(self, store: StepClaims, *, poll_interval: float = POLL_INTERVAL) -> None:
        self.store = store
        self.poll_interval = poll_interval
        #: Steps this run claimed and has not yet stored or released.
        self.held: set[CacheKey] = set()
        #: Steps another scorer holds, and until when its claim lasts.
        self.watched: dict[CacheKey, float] = {}
        self._buffer: list[tuple[CacheKey, StepJudgment]] = []
        self._failed: list[CacheKey] = []
        self._next_refresh = store.clock() + refresh_every(store.claim_ttl)
        self._next_poll = math.inf

    def claim(self, key: CacheKey) -> Claim:
        """Claim ``key`` before asking the judge (see :meth:`StepClaims.claim`); a step
        held elsewhere is watched from now on."""
        (claim,) = self.store.claim([key])
        if claim.held:
            self.held.add(key)
        elif claim.judgment is None:
            self._watch(key, claim.until, self.store.clock())
        return claim

    def judged(self, key: CacheKey, judgment: StepJudgment) -> None:
        """The primary judge judged ``key``: stored at the next tick."""
        self._buffer.append((key, judgment))

    def failed(self, key: CacheKey) -> None:
        """``key`` got no judgment to store: its claim is released at the next tick."""
        if key in self.held:
            self._failed.append(key)

    @property
    def pending_writes(self) -> int:
        """Judgments waiting for the next tick."""
        return len(self._buffer)

    def tick(self) -> Tick:
        """Store, release, refresh and look again, as due (see the module docstring)."""
        out = Tick()
        if self._buffer:
            self.store.put_many(self._buffer)
            out.written = [key for key, _ in self._buffer]
            self.held.difference_update(out.written)
            self._buffer = []
        if self._failed:
            self.store.release(self._failed)
            self.held.difference_update(self._failed)
            self._failed = []
        now = self.store.clock()
        if now >= self._next_refresh:
            self.store.refresh(self.held)
            self._next_refresh = now + refresh_every(self.store.claim_ttl)
        if self.watched and now >= self._next_poll:
            self._look_again(out)
        return out

    def close(self) -> None:
        """Store what is buffered and release every claim still held."""
        buffer, self._buffer = self._buffer, []
        self.store.put_many(buffer)
        self.held.difference_update(key for key, _ in buffer)
        held, self.held = self.held, set()
        self._failed = []
        self.store.release(held)

    def _look_again(self, out: Tick) -> None:
        keys = list(self.watched)
        claims = self.store.claim(keys)
        now = self.store.clock()
        self.watched = {}
        self._next_poll = math.inf
        for key, claim in zip(keys, claims, strict=True):
            if claim.judgment is not None:
                out.judged_elsewhere.append((key, claim.judgment))
            elif claim.held:
                self.held.add(key)
                out.taken.append(key)
            else:
                self._watch(key, claim.until, now)

    def _watch(self, key: CacheKey, until: float, now: float) -> None:
        self.watched[key] = until
        self._next_poll = min(self._next_poll, now + poll_delay(until, now, self.poll_interval))

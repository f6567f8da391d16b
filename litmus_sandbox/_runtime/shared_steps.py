"""A scoring run's side of the step-verdict cache: each judgment stored as it arrives.

Theory of operation
-------------------
A :class:`~litmus_sandbox._runtime.scoring_run.ScoringRun` with a cache makes one
:class:`SharedSteps` and calls it from its event loop:

* :meth:`~SharedSteps.judged` with each judgment of the primary judge as it arrives
  (buffered; a fallback's judgment is never stored under the primary judge's key, a
  failure never at all);
* :meth:`~SharedSteps.tick` from the run's keeper task, as soon as a judgment is buffered
  (with those that arrive in the :data:`WRITE_GAP` after the previous write): it stores
  the buffered judgments in one transaction and returns what it stored (:class:`Tick`);
* :meth:`~SharedSteps.close` when the run ends: the last judgments stored.

So a judged step is in the cache within about :data:`WRITE_GAP` of its answer (plus the
write itself), whatever the episodes around it are waiting for. Every call is a plain call on the
store - no sleeping here - so the tests drive it without an event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from litmus_sandbox._core.scoring import StepJudgment
from litmus_sandbox._store.cache import CacheKey, VerdictCache

#: The shortest time between two writes: the answers that arrive meanwhile go in one
#: transaction (so a kill loses at most the answers of about this long).
WRITE_GAP = 0.02


@dataclass
class Tick:
    """What one :meth:`SharedSteps.tick` changed."""

    #: Steps whose judgments are now stored.
    written: list[CacheKey] = field(default_factory=list)


class SharedSteps:
    """The run's pending writes (see the module docstring)."""

    def __init__(self, store: VerdictCache) -> None:
        self.store = store
        self._buffer: list[tuple[CacheKey, StepJudgment]] = []

    def judged(self, key: CacheKey, judgment: StepJudgment) -> None:
        """The primary judge judged ``key``: stored at the next tick."""
        self._buffer.append((key, judgment))

    @property
    def pending_writes(self) -> int:
        """Judgments waiting for the next tick."""
        return len(self._buffer)

    def tick(self) -> Tick:
        """Store the judgments buffered since the last tick."""
        out = Tick()
        if self._buffer:
            self.store.put_many(self._buffer)
            out.written = [key for key, _ in self._buffer]
            self._buffer = []
        return out

    def close(self) -> None:
        """Store what is buffered."""
        buffer, self._buffer = self._buffer, []
        self.store.put_many(buffer)

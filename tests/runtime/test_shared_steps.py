"""A scoring run's side of the cache on a real SQLite file: judgments stored at the next
tick, in one write, and what is buffered stored on close. No event loop, no sleeping."""

from __future__ import annotations

from pathlib import Path

from litmus_sandbox import VerdictCache
from litmus_sandbox._core.scoring import StepJudgment
from litmus_sandbox._runtime.shared_steps import SharedSteps

K1 = ("judge-fp", "step-1", "ctx-1")
K2 = ("judge-fp", "step-2", "ctx-2")
SAFE = StepJudgment(safe=True, reason="fine")


def test_a_judgment_is_stored_at_the_next_tick(tmp_path: Path) -> None:
    cache = VerdictCache(tmp_path / "c.sqlite")
    steps = SharedSteps(cache)
    steps.judged(K1, SAFE)
    steps.judged(K2, SAFE)
    assert (steps.pending_writes, cache.get(K1)) == (2, None)
    assert steps.tick().written == [K1, K2]
    assert (steps.pending_writes, cache.get(K1), cache.get(K2)) == (0, SAFE, SAFE)
    assert steps.tick().written == []  # nothing new: no write


def test_close_stores_what_is_buffered(tmp_path: Path) -> None:
    cache = VerdictCache(tmp_path / "c.sqlite")
    steps = SharedSteps(cache)
    steps.judged(K1, SAFE)
    steps.close()
    assert cache.get(K1) == SAFE

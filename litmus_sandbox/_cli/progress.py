"""What ``score``, ``rebaseline`` and ``gate --candidate-episodes`` show while they judge.

On a terminal (stderr), a progress bar (rich): covered steps done of all, judge calls made,
steps served from the cache, steps that failed, the rate and the time left, updated as
each episode is scored. With ``--quiet``, or when stderr is not a terminal, nothing but the
final summary. Steps the judge gave no verdict for are summed up on stderr, one line per
failure class.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from litmus_sandbox._runtime.progress_bar import JudgingBar, on_terminal
from litmus_sandbox._runtime.scorer import Progress, ScoreStats, covered_keys
from litmus_sandbox._store.streams import iter_episodes
from litmus_sandbox.judges import FAILURE_CLASSES, ScoringConfig
from litmus_sandbox.reports._shared import plural

if TYPE_CHECKING:
    import os

#: Exit code of a command whose judge gave no verdict for some steps (no guess).
EXIT_JUDGE = 6


def shows_progress(quiet: bool) -> bool:
    """A bar only on a terminal, and not with ``--quiet``."""
    return not quiet and on_terminal()


@contextmanager
def score_progress(
    paths: Iterable[str | os.PathLike[str]],
    config: ScoringConfig,
    *,
    quiet: bool,
    what: str = "scoring",
    skip_unscorable: bool = False,
) -> Iterator[Progress | None]:
    """A progress callback for the scorer drawing a bar on stderr, or None (no bar).

    The episodes are read once more first, to know how many steps there are to judge
    (only when a bar is shown). ``skip_unscorable`` leaves out incomplete and truncated
    recordings (``rebaseline`` does not score them).
    """
    if not shows_progress(quiet):
        yield None
        return
    total = 0
    for ep in iter_episodes(list(paths), []):
        if skip_unscorable and (ep.header.recorder.truncated or not ep.complete):
            continue
        total += len(covered_keys(ep, config))
    with JudgingBar(total, what) as bar:
        yield bar.update


def _example(text: str) -> str:
    return text if len(text) <= 160 else text[:157] + "..."


def report_failures(stats: ScoreStats) -> None:
    """One line per failure class on stderr: how many steps, what it means, an example."""
    steps, episodes = len(stats.failures), stats.failed_episodes
    print(
        f"litmus-sandbox: error: the judge gave no verdict for {plural(steps, 'step')} of "
        f"{plural(episodes, 'episode')}: those cases have no verdict, nothing was cached for those "
        "steps, and scoring again asks the judge again",
        file=sys.stderr,
    )
    for failure, n in stats.failure_counts().items():
        first = next(f for f in stats.failures if f.failure == failure)
        meaning = FAILURE_CLASSES.get(failure, failure)
        print(
            f"litmus-sandbox:   {failure}: {plural(n, 'step')} ({meaning}); e.g. episode "
            f"{first.episode_id!r} step {first.index}: {_example(first.message)}",
            file=sys.stderr,
        )

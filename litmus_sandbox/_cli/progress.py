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

from litmus_sandbox._runtime.scorer import Progress, ScoreStats, covered_keys
from litmus_sandbox._store.streams import iter_episodes
from litmus_sandbox.judges import FAILURE_CLASSES, ScoringConfig

if TYPE_CHECKING:
    import os

    from rich.progress import Task
    from rich.text import Text

#: Exit code of a command whose judge gave no verdict for some steps (no guess).
EXIT_JUDGE = 6


def shows_progress(quiet: bool) -> bool:
    """A bar only on a terminal, and not with ``--quiet``."""
    return not quiet and sys.stderr.isatty()


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
    from rich import progress as rp
    from rich.console import Console
    from rich.text import Text

    class Rate(rp.ProgressColumn):
        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            return Text(f"{speed:,.0f} steps/s" if speed else "", style="progress.data.speed")

    total = 0
    for ep in iter_episodes(list(paths), []):
        if skip_unscorable and (ep.header.recorder.truncated or not ep.complete):
            continue
        total += len(covered_keys(ep, config))
    bar = rp.Progress(
        rp.TextColumn("{task.description}"),
        rp.BarColumn(),
        rp.MofNCompleteColumn(),
        rp.TextColumn("{task.fields[detail]}"),
        Rate(),
        rp.TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = bar.add_task(what, total=total, detail="")

    def update(stats: ScoreStats) -> None:
        failed = len(stats.failures)
        bar.update(
            task,
            completed=stats.judge_calls + stats.cache_hits,
            detail=f"{stats.judge_calls} calls, {stats.cache_hits} cached, {failed} failed",
        )

    with bar:
        yield update


def _example(text: str) -> str:
    return text if len(text) <= 160 else text[:157] + "..."


def report_failures(stats: ScoreStats) -> None:
    """One line per failure class on stderr: how many steps, what it means, an example."""
    steps, episodes = len(stats.failures), stats.failed_episodes
    print(
        f"litmus-sandbox: error: the judge gave no verdict for {steps} step(s) of "
        f"{episodes} episode(s): those cases have no verdict, nothing was cached for those "
        "steps, and scoring again asks the judge again",
        file=sys.stderr,
    )
    for failure, n in stats.failure_counts().items():
        first = next(f for f in stats.failures if f.failure == failure)
        meaning = FAILURE_CLASSES.get(failure, failure)
        print(
            f"litmus-sandbox:   {failure}: {n} step(s) ({meaning}); e.g. episode "
            f"{first.episode_id!r} step {first.index}: {_example(first.message)}",
            file=sys.stderr,
        )

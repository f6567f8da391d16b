"""What the long commands show while they work, on a terminal (stderr, rich).

``score``, ``rebaseline`` and ``gate --candidate-episodes``: a progress bar of judging -
covered steps done of all, judge calls made, steps served from the cache, steps that
failed, the rate and the time left, updated as each episode is scored. A large ``gate``:
the cases decided so far (:func:`counter`); ``replay --check``: the episodes checked of
all (:func:`track`); ``import``: what is being read, and for how long (:func:`status`).

With ``--quiet``, in CI (``$CI`` set), or when stderr is not a terminal: nothing but the
final summary. Steps the judge gave no verdict for are summed up on stderr, one line per
failure class.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from litmus_sandbox._model.safe_text import for_terminal
from litmus_sandbox._runtime.progress_bar import JudgingBar, on_terminal
from litmus_sandbox._runtime.scorer import Progress, ScoreStats, covered_keys
from litmus_sandbox._store.streams import iter_episodes
from litmus_sandbox.judges import FAILURE_CLASSES, ScoringConfig
from litmus_sandbox.reports._shared import plural

if TYPE_CHECKING:
    from rich.progress import Progress as Bar

    from litmus_sandbox._core.gate import CaseResult
    from litmus_sandbox._core.suite import CaseSink

T = TypeVar("T")

#: Exit code of a command whose judge gave no verdict for some steps (no guess).
EXIT_JUDGE = 6


def shows_progress(quiet: bool) -> bool:
    """A bar only on a terminal, not in CI, and not with ``--quiet``."""
    return not quiet and not os.environ.get("CI") and on_terminal()


def _bar(*columns: str, total: bool) -> Bar:
    from rich import progress as rp
    from rich.console import Console

    parts: list[rp.ProgressColumn] = [rp.SpinnerColumn(), rp.TextColumn("{task.description}")]
    if total:
        parts += [rp.BarColumn(), rp.MofNCompleteColumn()]
    parts += [rp.TextColumn(c) for c in columns]
    parts.append(rp.TimeElapsedColumn())
    return rp.Progress(*parts, console=Console(stderr=True), transient=True)


def track(items: Sequence[T], what: str, *, quiet: bool) -> Iterator[T]:
    """``items``, one at a time, with a bar of how many are done (see the module docstring)."""
    if not shows_progress(quiet):
        yield from items
        return
    with _bar(total=True) as bar:
        task = bar.add_task(what, total=len(items))
        for item in items:
            yield item
            bar.advance(task)


@contextmanager
def status(what: str, *, quiet: bool) -> Iterator[None]:
    """A spinner saying ``what`` is being done, and for how long."""
    if not shows_progress(quiet):
        yield
        return
    with _bar(total=False) as bar:
        bar.add_task(what, total=None)
        yield


class _Counted:
    """A gate sink that counts the cases it passes on."""

    def __init__(self, sink: CaseSink, advance: Callable[[int], None]) -> None:
        self.sink, self.advance, self.plain = sink, advance, sink.plain

    def write(self, results: Sequence[CaseResult]) -> None:
        self.sink.write(results)
        self.advance(len(results))


@contextmanager
def counter(sink: CaseSink, what: str, *, quiet: bool, show: bool = True) -> Iterator[CaseSink]:
    """``sink``, counting the cases decided on a line of its own (when ``show``)."""
    if not show or not shows_progress(quiet):
        yield sink
        return
    with _bar("{task.completed:,} cases decided", total=False) as bar:
        task = bar.add_task(what, total=None)
        yield _Counted(sink, lambda n: bar.advance(task, n))


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
            for_terminal(
                f"litmus-sandbox:   {failure}: {plural(n, 'step')} ({meaning}); e.g. episode "
                f"{first.episode_id!r} step {first.index}: {_example(first.message)}"
            ),
            file=sys.stderr,
        )

"""A progress bar of judging on a terminal (rich, on stderr): the CLI's and the sandbox's.

Steps done of all, judge calls made, steps served from the cache, steps that failed, the
rate and the time left. Only where stderr is a terminal (:func:`on_terminal`); elsewhere
callers show nothing but their final summary.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import TYPE_CHECKING

from litmus_sandbox._runtime.scoring_job import ScoreStats

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


def on_terminal() -> bool:
    """Whether stderr is a terminal (a bar can be drawn)."""
    return sys.stderr.isatty()


class JudgingBar:
    """``with JudgingBar(total) as bar: ... bar.update(stats)``.

    Args:
        total: covered steps to settle.
        what: the bar's label.
        base: stats already counted before the bar started (shown relative to them).
    """

    def __init__(self, total: int, what: str = "scoring", base: ScoreStats | None = None) -> None:
        from rich import progress as rp
        from rich.console import Console
        from rich.text import Text

        class Rate(rp.ProgressColumn):
            def render(self, task: rp.Task) -> Text:
                speed = task.finished_speed or task.speed
                return Text(f"{speed:,.0f} steps/s" if speed else "", style="progress.data.speed")

        self._bar: Progress = rp.Progress(
            rp.TextColumn("{task.description}"),
            rp.BarColumn(),
            rp.MofNCompleteColumn(),
            rp.TextColumn("{task.fields[detail]}"),
            Rate(),
            rp.TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self._task: TaskID = self._bar.add_task(what, total=total, detail="")
        b = base or ScoreStats()
        self._base = (b.judge_calls, b.cache_hits, len(b.failures))

    def update(self, stats: ScoreStats) -> None:
        calls = stats.judge_calls - self._base[0]
        cached = stats.cache_hits - self._base[1]
        failed = len(stats.failures) - self._base[2]
        self._bar.update(
            self._task,
            completed=calls + cached,
            detail=f"{calls} calls, {cached} cached, {failed} failed",
        )

    def __enter__(self) -> JudgingBar:
        self._bar.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._bar.__exit__(exc_type, exc, tb)

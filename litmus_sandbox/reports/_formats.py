"""One entry point for every format: :data:`FORMATS`, :func:`writer` and :func:`render`."""

from __future__ import annotations

from typing import Any, BinaryIO

from litmus_sandbox._core.suite import GateReport
from litmus_sandbox.reports._json import JsonlWriter, JsonWriter
from litmus_sandbox.reports._junit import JunitWriter
from litmus_sandbox.reports._markdown import MarkdownWriter
from litmus_sandbox.reports._shared import Writer
from litmus_sandbox.reports._shared import render as _render
from litmus_sandbox.reports._table import TableWriter

__all__ = ["FORMATS", "render", "writer"]

_WRITERS: dict[str, type[Writer]] = {
    "table": TableWriter,
    "json": JsonWriter,
    "jsonl": JsonlWriter,
    "junit": JunitWriter,
    "markdown": MarkdownWriter,
}
FORMATS = tuple(_WRITERS)


def writer(fmt: str, out: BinaryIO, **kw: Any) -> Writer:
    """A report in one of :data:`FORMATS`, written to ``out`` as the gate decides its
    cases: hand it to ``stream_gate`` as the sink, then call ``finish(summary,
    warnings)`` and ``close()``. Keywords: ``allow_unresolved``, ``strict_oracle``,
    ``allow_empty``, ``spool_dir`` and ``spool_memory`` (where cases wait for their
    place in the report, and how many bytes of each rank stay in memory first).
    """
    return _WRITERS[fmt](out, **kw)


def render(report: GateReport, fmt: str, **kw: Any) -> str:
    """Render ``report`` in one of :data:`FORMATS`."""
    return _render(_WRITERS[fmt], report, **kw)

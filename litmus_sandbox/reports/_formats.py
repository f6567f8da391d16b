"""One entry point for every format: :data:`FORMATS` and :func:`render`."""

from __future__ import annotations

from typing import Any

from litmus_sandbox._core.suite import GateReport
from litmus_sandbox.reports._json import render_json
from litmus_sandbox.reports._junit import render_junit
from litmus_sandbox.reports._markdown import render_markdown
from litmus_sandbox.reports._table import render_table

__all__ = ["FORMATS", "render"]

FORMATS = ("table", "json", "junit", "markdown")


def render(report: GateReport, fmt: str, **kw: Any) -> str:
    """Render ``report`` in one of :data:`FORMATS`."""
    renderers = {
        "table": render_table,
        "json": render_json,
        "junit": render_junit,
        "markdown": render_markdown,
    }
    return renderers[fmt](report, **kw)

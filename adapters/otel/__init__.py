"""OpenTelemetry export: episodes as GenAI ``invoke_agent`` / ``execute_tool`` traces.

Shipped as ``litmus_sandbox.adapters.otel`` (the extra ``otel``):
``litmus-sandbox export otel EPISODES... -o SPANS.otlp.jsonl`` (``_cli.py``) writes one
OTLP/JSON ``ExportTraceServiceRequest`` per episode (``_spans.py``). Names are resolved
lazily: importing this package loads no OpenTelemetry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from litmus_sandbox import _lazy_exports

if TYPE_CHECKING:
    from litmus_sandbox.adapters.otel._spans import episode_spans as episode_spans
    from litmus_sandbox.adapters.otel._spans import otlp_json as otlp_json
    from litmus_sandbox.adapters.otel._spans import trace_lines as trace_lines

_EXPORTS = {
    "episode_spans": "litmus_sandbox.adapters.otel._spans",
    "otlp_json": "litmus_sandbox.adapters.otel._spans",
    "trace_lines": "litmus_sandbox.adapters.otel._spans",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS, __all__)

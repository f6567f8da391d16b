"""OpenTelemetry export: episodes as GenAI ``invoke_agent`` / ``execute_tool`` traces.

Shipped as ``litmus_sandbox.adapters.otel`` (the extra ``otel``):
``litmus-sandbox export otel EPISODES... -o SPANS.otlp.jsonl`` (``_cli.py``) writes one
OTLP/JSON ``ExportTraceServiceRequest`` per episode (``_spans.py``). Names are resolved
lazily: importing this package loads no OpenTelemetry.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

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


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return list(__all__)

"""Episodes as OpenTelemetry traces: GenAI ``invoke_agent`` and ``execute_tool`` spans.

Theory of operation
-------------------
Each episode is one trace, written as one OTLP ``ExportTraceServiceRequest`` in the OTLP/JSON
encoding (the Collector file exporter's: one request a line, ids in hex, enums as integers):

=========================  =====================================================
span                       attributes
=========================  =====================================================
``invoke_agent {agent}``   ``gen_ai.operation.name = invoke_agent``,
(the root)                 ``gen_ai.agent.name``, ``gen_ai.conversation.id`` (the
                           episode id), ``litmus.case_id``; ``litmus.verdict.safe``
                           with ``--verdicts``
``execute_tool {tool}``    ``gen_ai.operation.name = execute_tool``,
(one per tool-call step)   ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
                           ``gen_ai.tool.type = function``, ``litmus.fidelity``,
                           ``litmus.step.index``, ``litmus.episode_id``; status
                           ERROR and ``error.type`` when the agent was shown an error
=========================  =====================================================

The call's arguments and result (``gen_ai.tool.call.arguments`` / ``.result``, opt-in in
the semantic conventions) are written only when asked. With a verdict stream, each scored
step gets a ``gen_ai.evaluation.result`` event: on its tool span, or on the root (with
``litmus.step.index``) for a message step, which has no span of its own.

Spans are the SDK's own ``ReadableSpan`` objects, encoded by the OTLP exporters' common
encoder (``opentelemetry-exporter-otlp-proto-common``), so the output is what an OTLP
exporter would send. Ids are derived from the episode id: exporting again gives the same
trace.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from litmus_sandbox._model.about import package_version
from litmus_sandbox._model.records import Episode, Step, ToolCallStep, Verdict

DEFAULT_SERVICE_NAME = "litmus-sandbox"
#: The keys of OTLP/JSON whose values are ids: hex there, base64 in protobuf's own mapping.
_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})


def _id(episode_id: str, what: str, size: int) -> int:
    digest = hashlib.sha256(f"{episode_id}\0{what}".encode()).digest()[:size]
    return int.from_bytes(digest, "big") or 1  # an all-zero id is invalid


def _ns(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1_000_000_000)


def _iso_ns(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return _ns(datetime.fromisoformat(text).timestamp())
    except ValueError:
        return None


def _step_times(step: Step) -> tuple[int | None, int | None]:
    if isinstance(step, ToolCallStep):
        start = _ns(step.started_at if step.started_at is not None else step.ended_at)
        return start, _ns(step.ended_at) if step.ended_at is not None else start
    at = _ns(step.at)
    return at, at


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr)


def _result(step: ToolCallStep) -> str:
    shown = step.shown
    if shown.structured is None and all(b.get("type") == "text" for b in shown.content):
        return shown.text()
    return _json({"content": list(shown.content), "structured": shown.structured})


def _error_type(step: ToolCallStep) -> str:
    actual = step.actual
    if actual is not None and actual.error_type:
        return actual.error_type
    if actual is not None and actual.outcome == "timeout":
        return "timeout"
    errors = {"denied": "denied", "replayed": "replayed_error", "emulated": "emulated_error"}
    return errors.get(step.fidelity, "tool_error")


def _evaluation(label: str, safe: bool, index: int, at: int | None, reason: str | None) -> Event:
    attrs: dict[str, Any] = {
        "gen_ai.evaluation.name": label,
        "gen_ai.evaluation.score.label": "safe" if safe else "unsafe",
        "litmus.step.index": index,
    }
    if reason:
        attrs["gen_ai.evaluation.explanation"] = reason
    return Event("gen_ai.evaluation.result", attrs, timestamp=at)


def episode_spans(
    episode: Episode,
    verdict: Verdict | None = None,
    *,
    include_content: bool = False,
    resource: Resource | None = None,
) -> list[ReadableSpan]:
    """The spans of one episode's trace: the root first, then one per tool-call step."""
    eid = episode.episode_id
    trace_id = _id(eid, "trace", 16)
    root_ctx = SpanContext(trace_id, _id(eid, "root", 8), False, TraceFlags(TraceFlags.SAMPLED))
    scope = InstrumentationScope("litmus-sandbox", package_version())
    times = [t for s in episode.steps for t in _step_times(s) if t is not None]
    start = _iso_ns(episode.header.started_at) or (min(times) if times else 0)
    end = _iso_ns(episode.end.at if episode.end else None) or max([start, *times])
    by_index = {sv.index: sv for sv in verdict.steps} if verdict is not None else {}
    label = ""
    if verdict is not None:
        label = verdict.provenance.judge_label or verdict.provenance.judge or "judge"
    root_events: list[Event] = []
    spans: list[ReadableSpan] = []
    for step in episode.steps:
        s_start, s_end = _step_times(step)
        judged = by_index.get(step.index)
        event = (
            None
            if judged is None
            else _evaluation(label, judged.safe, step.index, s_end or end, judged.reason)
        )
        if not isinstance(step, ToolCallStep):
            if event is not None:
                root_events.append(event)
            continue
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": step.tool,
            "gen_ai.tool.call.id": step.call_id,
            "gen_ai.tool.type": "function",
            "litmus.fidelity": step.fidelity,
            "litmus.step.index": step.index,
            "litmus.episode_id": eid,
        }
        status = Status(StatusCode.UNSET)
        if step.shown.is_error:
            attrs["error.type"] = _error_type(step)
            status = Status(StatusCode.ERROR, step.shown.text()[:200] or None)
        if include_content:
            attrs["gen_ai.tool.call.arguments"] = _json(step.args)
            attrs["gen_ai.tool.call.result"] = _result(step)
        ctx = SpanContext(trace_id, _id(eid, f"step {step.index}", 8), False, root_ctx.trace_flags)
        spans.append(
            ReadableSpan(
                f"execute_tool {step.tool}",
                context=ctx,
                parent=root_ctx,
                resource=resource,
                attributes=attrs,
                events=[event] if event is not None else [],
                kind=SpanKind.INTERNAL,
                status=status,
                start_time=s_start if s_start is not None else start,
                end_time=s_end if s_end is not None else start,
                instrumentation_scope=scope,
            )
        )
    agent = episode.header.agent
    root_attrs: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.conversation.id": eid,
        "litmus.case_id": episode.case_id,
    }
    if agent:
        root_attrs["gen_ai.agent.name"] = agent
    if verdict is not None:
        root_attrs["litmus.verdict.safe"] = verdict.safe
    root = ReadableSpan(
        f"invoke_agent {agent}" if agent else "invoke_agent",
        context=root_ctx,
        resource=resource,
        attributes=root_attrs,
        events=root_events,
        kind=SpanKind.INTERNAL,
        start_time=start,
        end_time=end,
        instrumentation_scope=scope,
    )
    return [root, *spans]


def _hex_ids(value: Any) -> Any:
    """protobuf's JSON mapping writes bytes as base64; OTLP/JSON writes ids in hex."""
    if isinstance(value, dict):
        return {
            k: base64.b64decode(v).hex() if k in _ID_KEYS and isinstance(v, str) else _hex_ids(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(v) for v in value]
    return value


def otlp_json(spans: Iterable[ReadableSpan]) -> dict[str, Any]:
    """``spans`` as one ``ExportTraceServiceRequest`` in the OTLP/JSON encoding."""
    request = encode_spans(list(spans))
    data: dict[str, Any] = MessageToDict(request, use_integers_for_enums=True)
    result: dict[str, Any] = _hex_ids(data)
    return result


def trace_lines(
    episodes: Iterable[Episode],
    verdicts: Mapping[str, Verdict] | None = None,
    *,
    include_content: bool = False,
    service_name: str = DEFAULT_SERVICE_NAME,
) -> Iterable[bytes]:
    """One OTLP/JSON line (newline included) per episode: its trace."""
    resource = Resource({"service.name": service_name})  # no detectors: the same every run
    for episode in episodes:
        verdict = (verdicts or {}).get(episode.episode_id)
        spans = episode_spans(episode, verdict, include_content=include_content, resource=resource)
        line = json.dumps(otlp_json(spans), ensure_ascii=False, separators=(",", ":"))
        yield line.encode() + b"\n"

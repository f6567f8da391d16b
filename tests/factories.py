"""Small builders for records used across the tests (plain data, no I/O)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from litmus_sandbox import (
    SCHEMA_VERSION,
    Episode,
    EpisodeEnd,
    EpisodeHeader,
    LegacyProvenance,
    LegacyVerdict,
    MessageStep,
    Provenance,
    Recorder,
    RecorderId,
    Shown,
    StepVerdict,
    ToolCallStep,
    Verdict,
)

# Where the tests live, for the programs and packages they run (tests are in subfolders).
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
PROGRAMS = TESTS / "programs"

V = SCHEMA_VERSION


def header(eid: str = "e1", case: str = "c1", **kw: Any) -> EpisodeHeader:
    kw.setdefault(
        "recorder", Recorder(name="litmus-sandbox", version="0.1.0", measurement_version="1")
    )
    return EpisodeHeader(v=V, episode_id=eid, case_id=case, **kw)


def msg(i: int, role: str, text: str, eid: str = "e1", **kw: Any) -> MessageStep:
    return MessageStep(v=V, episode_id=eid, index=i, role=role, text=text, **kw)  # type: ignore[arg-type]


def call(
    i: int,
    tool: str,
    shown: str | None = "ok",
    eid: str = "e1",
    fidelity: str = "real",
    args: dict[str, Any] | None = None,
    **kw: Any,
) -> ToolCallStep:
    content = () if shown is None else ({"type": "text", "text": shown},)
    return ToolCallStep(
        v=V,
        episode_id=eid,
        index=i,
        call_id=f"call-{i}",
        tool=tool,
        args=args or {},
        fidelity=fidelity,  # type: ignore[arg-type]
        shown=Shown(content=content),
        **kw,
    )


def end(eid: str = "e1", n: int | None = None, status: str = "complete") -> EpisodeEnd:
    return EpisodeEnd(v=V, episode_id=eid, status=status, steps=n)  # type: ignore[arg-type]


def episode(
    steps: list[Any], eid: str = "e1", case: str = "c1", complete: bool = True, **kw: Any
) -> Episode:
    return Episode(
        header=header(eid, case, **kw),
        steps=tuple(steps),
        end=end(eid, len(steps)) if complete else None,
    )


def prov(**kw: Any) -> Provenance:
    base: dict[str, Any] = {
        "recorder": RecorderId(name="litmus-sandbox", version="0.1.0", measurement_version="1"),
        "recording_truncated": False,
        "episode_complete": True,
        "truncate_on_refusal": False,
        "truncate_on_empty_tool_result": False,
        "refusal_detector": "det1",
        "judge": "judgeA",
        "judge_label": "rules-a",
        "judge_retries": 0,
        "fallback_judge": False,
        "steps_recorded": 4,
        "steps_covered": 4,
        "tool_modes": {"send_email": "real"},
        "tools_called": ("send_email",),
    }
    base.update(kw)
    return Provenance(**base)


def verdict(
    case: str = "c1",
    safe: bool = True,
    eid: str | None = None,
    steps: list[bool] | None = None,
    **kw: Any,
) -> Verdict:
    p = prov(**kw)
    step_flags = steps if steps is not None else [True] * (p.steps_covered or 0)
    if steps is None and not safe and step_flags:
        step_flags[-1] = False
    sv = tuple(StepVerdict(index=i, safe=s) for i, s in enumerate(step_flags))
    first = next((s.index for s in sv if not s.safe), None)
    return Verdict(
        v=V,
        case_id=case,
        episode_id=eid or f"ep-{case}",
        safe=safe,
        steps=sv,
        first_unsafe_step=first,
        provenance=p,
    )


def legacy(run_id: str = "c1", safe: bool = True, **kw: Any) -> LegacyVerdict:
    base: dict[str, Any] = {
        "truncate_on_refusal": False,
        "truncate_on_empty_tool_result": False,
        "steps_covered": 5,
        "judge_version": "j1",
    }
    base.update(kw)
    return LegacyVerdict(run_id=run_id, safe=safe, provenance=LegacyProvenance(**base))


def replace(obj: Any, **kw: Any) -> Any:
    return msgspec.structs.replace(obj, **kw)


class LoopbackHttp:
    """A real HTTP server on 127.0.0.1 answering every GET with ``body``; ``hits`` keeps
    the paths asked, in order. ``with LoopbackHttp(b"...") as url:`` (url has no path)."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.hits: list[str] = []

    def __enter__(self) -> str:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.hits.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", str(len(owner.body)))
                self.end_headers()
                self.wfile.write(owner.body)

            def log_message(self, *args: Any) -> None:
                return None

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

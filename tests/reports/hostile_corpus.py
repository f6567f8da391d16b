"""A hostile corpus: an agent's payloads in every field that reaches a person.

Each payload attacks one kind of reader: a terminal (clear screen, clipboard write,
hyperlink, cursor up to overwrite a line, bare CR/BS/VT/FF, C1 CSI, DEL), a renderer
(bidi override and isolate, zero-width characters), Markdown (image, link, autolink, raw
HTML, mention, table pipe, backticks), HTML (script, tags, ``</script>``, ids that are
``Object.prototype`` names) and XML (``]]>``, entities). :func:`write_corpus` writes the
two sides of a gate in which every one of them sits in every field: case and episode ids,
agent, tool and argument names, message text, results, errors, a swallowed call's actual
error, file-effect paths, judge reasons, and what the reports list of each side's
inputs (suite, agent, recorder, judge label, recording date).
"""

from __future__ import annotations

from pathlib import Path

from factories import call, header, msg, prov, replace, verdict

from litmus_sandbox import JsonlWriter
from litmus_sandbox._model.records import (
    Actual,
    Effects,
    EpisodeEnd,
    FsEffect,
    MessageStep,
    RecorderId,
    StepVerdict,
    ToolCallStep,
)

ESC = "\x1b"
#: Terminal attacks: what each must never do is in its name.
TERMINAL = {
    "clear": f"{ESC}[2J{ESC}[H",
    "clipboard": f"{ESC}]52;c;cm0gLXJmIH4=\x07",
    "hyperlink": f"{ESC}]8;;https://evil.example/{ESC}\\click{ESC}]8;;{ESC}\\",
    "overwrite": f"{ESC}[3A{ESC}[2KPASS",
    "c1": "\x9b31m\x9d0;title\x9c",
    "bare": "a\rb\x08c\x0bd\x0ce\x7f",
    "bidi": "safe\u202etxt.exe\u2066x\u2069",
    "zero-width": "ad\u200bmin\u200d\ufeff",
}
#: Markdown, HTML and XML attacks.
MARKUP = {
    "image": "![pixel](http://127.0.0.1:9/pixel.png)",
    "html": '<img src="http://127.0.0.1:9/i.png"><a href="http://127.0.0.1:9/">x</a>',
    "link": "[click](http://127.0.0.1:9/) <http://127.0.0.1:9/auto>",
    "mention": "@octocat see https://evil.example and www.evil.example",
    "table": "a | b | `c` ``d`` |",
    "script": "</script><script>window.pwned=1</script><!--",
    "xml": "]]><x>&amp;&#0;</x>",
}
PAYLOADS = {**TERMINAL, **MARKUP}
#: Every payload joined: the text put in every field.
EVERYTHING = " ".join(PAYLOADS.values())
#: Episode ids an HTML page might look up in a plain object.
PROTOTYPE_IDS = ("__proto__", "constructor", "hasOwnProperty")
LONG_TOOL = "t" * 300


def _steps(eid: str) -> list[MessageStep | ToolCallStep]:
    unsafe = {"mark": "UNSAFE", "evidence": EVERYTHING}
    return [
        msg(0, "user", EVERYTHING, eid=eid),
        msg(1, "assistant", "I can't help with that. " + EVERYTHING, eid=eid),
        call(
            2,
            LONG_TOOL,
            EVERYTHING,
            eid=eid,
            args={EVERYTHING: EVERYTHING, "path": "x" + TERMINAL["clear"], **unsafe},
            effects=Effects(fs=(FsEffect(op="created", path="p" + EVERYTHING),)),
        ),
        call(
            3,
            "fetch" + TERMINAL["overwrite"],
            "",
            eid=eid,
            fidelity="swallowed",
            actual=Actual(
                outcome="raised",
                error_type="ConnectionError" + TERMINAL["clipboard"],
                error_message=EVERYTHING,
            ),
        ),
    ]


def write_corpus(folder: Path) -> dict[str, Path]:
    """Episodes and verdicts of both sides: one hostile case whose verdict regresses, and
    one case per prototype-named episode id. The paths by name."""
    paths = {
        name: folder / f"{name}.jsonl"
        for name in ("baseline-episodes", "candidate-episodes", "baseline", "candidate")
    }
    cases = [("case" + EVERYTHING, "ep" + EVERYTHING), *((i, i) for i in PROTOTYPE_IDS)]
    for side in ("baseline", "candidate"):
        with JsonlWriter(paths[f"{side}-episodes"]) as out:
            for case, eid in cases:
                eid = f"{eid}" if side == "candidate" else f"{eid}-b"
                steps = _steps(eid)
                out.write(header(eid, case, agent="agent" + EVERYTHING))
                out.write_many(steps)
                out.write(EpisodeEnd(v=1, episode_id=eid, status="complete", steps=len(steps)))
        with JsonlWriter(paths[side]) as out:
            for case, eid in cases:
                eid = f"{eid}" if side == "candidate" else f"{eid}-b"
                safe = side == "baseline"
                v = verdict(case, safe=safe, eid=eid, steps=[True, True, safe, True])
                bad = StepVerdict(
                    index=2,
                    safe=False,
                    reason="judge says " + EVERYTHING,
                    rules=("rule" + EVERYTHING,),
                    evidence="requested",
                )
                if not safe:
                    v = replace(v, steps=(*v.steps[:2], bad, v.steps[3]))
                tools = {LONG_TOOL: "real", "fetch" + TERMINAL["overwrite"]: "real"}
                made = prov(
                    tool_modes=tools,
                    tools_called=tuple(tools),
                    judge_label="judge" + EVERYTHING,
                    recorder=RecorderId(name="rec" + EVERYTHING, version="v" + EVERYTHING),
                )
                out.write(
                    replace(
                        v,
                        provenance=made,
                        suite="suite" + EVERYTHING,
                        agent="agent" + EVERYTHING,
                        recorded_at="2026-12-01T00:00:00Z" + EVERYTHING,
                    )
                )
    return paths

"""``litmus-sandbox import openai-chat|openai-responses``: transcripts as episode streams."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conversations import CHAT, RESPONSES, validate_chat, validate_responses

from litmus_sandbox import iter_episodes
from litmus_sandbox._cli.main import main


def write(path: Path, *lines: dict[str, Any] | str) -> Path:
    path.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    )
    return path


def imported(tmp_path: Path, kind: str, *lines: dict[str, Any] | str) -> list[dict[str, Any]]:
    src = write(tmp_path / f"{kind}.jsonl", *lines)
    out = tmp_path / f"{kind}-episodes.jsonl"
    assert main(["import", kind, str(src), "-o", str(out)]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def steps_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in r.items() if k != "episode_id"} for r in records if r["kind"] == "step"
    ]


def test_chat_transcript_imports_every_message_and_call(tmp_path: Path) -> None:
    records = imported(
        tmp_path, "openai-chat", {"case_id": "c1", "agent": "gpt-x", "suite": "s", "messages": CHAT}
    )
    header, *steps, end = records
    assert header["case_id"] == "c1"
    assert header["agent"] == "gpt-x"
    assert header["suite"] == "s"
    assert header["recorder"]["name"] == "litmus-sandbox/openai"
    assert header["recorder"]["truncated"] is False
    assert header["meta"]["openai"]["api"] == "chat"
    kinds = [(s["type"], s.get("role") or s.get("tool")) for s in steps]
    assert kinds == [
        ("message", "system"),
        ("message", "user"),
        ("tool_call", "list_files"),
        ("tool_call", "read_file"),
        ("message", "assistant"),
        ("tool_call", "delete_file"),
        ("message", "user"),
        ("message", "assistant"),
    ]
    assert steps[0]["meta"] == {"openai": {"role": "developer"}}
    assert end["status"] == "complete"
    assert end["steps"] == 8


def test_results_are_joined_by_call_id_not_position(tmp_path: Path) -> None:
    """The results come in the other order than the calls; each lands on its own call."""
    steps = steps_of(imported(tmp_path, "openai-chat", {"case_id": "c", "messages": CHAT}))
    listing, reading = steps[2], steps[3]
    assert listing["call_id"] == "call_a"
    assert listing["args"] == {"path": "/srv"}
    assert listing["shown"]["content"] == [{"type": "text", "text": "a.log"}]
    assert reading["call_id"] == "call_b"
    assert reading["shown"]["content"] == [{"type": "text", "text": "log line"}]
    assert listing["fidelity"] == reading["fidelity"] == "real"


def test_arguments_that_are_not_json_are_kept_raw(tmp_path: Path) -> None:
    steps = steps_of(imported(tmp_path, "openai-chat", {"case_id": "c", "messages": CHAT}))
    delete = steps[5]
    assert delete["args"] == {}
    assert delete["meta"]["openai"] == {
        "arguments_raw": "{path: /srv/a.log",
        "arguments_invalid": True,
    }


def test_refusal_is_an_assistant_step_with_refusal_true(tmp_path: Path) -> None:
    for kind, field, conv in (
        ("openai-chat", "messages", CHAT),
        ("openai-responses", "input", RESPONSES),
    ):
        last = steps_of(imported(tmp_path, kind, {"case_id": "c", field: conv}))[-1]
        assert last["role"] == "assistant"
        assert last["refusal"] is True
        assert last["text"] == "I can't help with wiping disks."


def test_chat_and_responses_of_one_conversation_give_the_same_steps(tmp_path: Path) -> None:
    chat = imported(tmp_path, "openai-chat", {"case_id": "c", "messages": CHAT})
    responses = imported(tmp_path, "openai-responses", {"case_id": "c", "input": RESPONSES})
    assert steps_of(chat) == steps_of(responses)
    # The reasoning item has no step, and is counted.
    assert responses[-1]["meta"] == {"openai": {"skipped_items": {"reasoning": 1}}}


def test_a_call_without_a_result_makes_the_recording_truncated(tmp_path: Path) -> None:
    messages = validate_chat(
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "x1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                    {"id": "x2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
                ],
            },
            {"role": "tool", "tool_call_id": "x2", "content": "done"},
            {"role": "tool", "tool_call_id": "zz", "content": "for nobody"},
        ]
    )
    header, *steps, end = imported(tmp_path, "openai-chat", {"case_id": 7, "messages": messages})
    assert header["case_id"] == "7"
    assert header["recorder"]["truncated"] is True
    assert [s.get("tool") for s in steps] == [None, "f", "g"]
    assert steps[1]["meta"] == {"openai": {"no_result": True}}
    assert end["meta"]["openai"] == {"unanswered_calls": ["x1"], "unmatched_results": ["zz"]}
    (episode,) = list(iter_episodes([tmp_path / "openai-chat-episodes.jsonl"]))
    assert episode.complete
    assert episode.header.recorder.truncated


def test_responses_string_input_and_custom_tool_calls(tmp_path: Path) -> None:
    items = validate_responses(
        [
            {"role": "user", "content": "run it"},
            {"type": "custom_tool_call", "call_id": "k1", "name": "shell", "input": "ls -l"},
            {"type": "custom_tool_call_output", "call_id": "k1", "output": "total 0"},
        ]
    )
    steps = steps_of(imported(tmp_path, "openai-responses", {"case_id": "c", "input": items}))
    assert steps[1]["tool"] == "shell"
    assert steps[1]["args"] == {"input": "ls -l"}
    assert steps[1]["shown"]["content"] == [{"type": "text", "text": "total 0"}]
    only = steps_of(imported(tmp_path, "openai-responses", {"case_id": "c", "input": "hello"}))
    assert [(s["role"], s["text"]) for s in only] == [("user", "hello")]


def test_reimporting_gives_the_same_episode_ids(tmp_path: Path) -> None:
    line = {"case_id": "c", "messages": CHAT}
    first = imported(tmp_path, "openai-chat", line, line)
    again = imported(tmp_path, "openai-chat", line, line)
    ids = [r["episode_id"] for r in first if r["kind"] == "episode"]
    assert len(set(ids)) == 2  # one line, two epochs: two episodes
    assert ids == [r["episode_id"] for r in again if r["kind"] == "episode"]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("not json", "not a transcript"),
        ({"messages": []}, "case_id"),
        (
            {"case_id": "c", "input": []},
            "no 'messages' in the transcript (a line with 'input' is imported by 'import openai-responses')",
        ),
        ({"case_id": "c", "messages": [{"role": "robot", "content": "x"}]}, "$.messages[0].role"),
        (
            {"case_id": "c", "messages": [{"role": "tool", "content": "x"}]},
            "tool_call_id",
        ),
        (
            {
                "case_id": "c",
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "a",
                                "type": "function",
                                "function": {"name": "f", "arguments": {}},
                            }
                        ],
                    }
                ],
            },
            "$.messages[0].tool_calls[0].function.arguments",
        ),
        (
            {
                "case_id": "c",
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "a",
                                "type": "function",
                                "function": {"name": "f", "arguments": ""},
                            },
                            {
                                "id": "a",
                                "type": "function",
                                "function": {"name": "g", "arguments": ""},
                            },
                        ],
                    }
                ],
            },
            "two tool calls have the id 'a'",
        ),
    ],
)
def test_a_bad_line_is_named_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: dict[str, Any] | str, problem: str
) -> None:
    good = {"case_id": "ok", "messages": CHAT}
    src = write(tmp_path / "t.jsonl", good, line)
    out = tmp_path / "out.jsonl"
    out.write_text("kept\n")
    assert main(["import", "openai-chat", str(src), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{src}:2: " in err
    assert problem in err
    assert "Traceback" not in err
    assert out.read_text() == "kept\n"  # a bad line leaves the output as it was


def test_output_that_is_an_input_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write(tmp_path / "t.jsonl", {"case_id": "c", "messages": CHAT})
    assert main(["import", "openai-chat", str(src), "-o", str(src)]) == 2
    assert "is also an input" in capsys.readouterr().err

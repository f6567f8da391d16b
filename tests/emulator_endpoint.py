"""A scripted tool emulator on loopback: a real OpenAI-compatible endpoint for the tests.

The chat-completions server is the judge tests' (``judges/judge_endpoint.py``: a real
HTTP/1.1 server on 127.0.0.1, each request recorded). :class:`Script` answers it as an
emulator model would, from the tool and arguments the default emulator prompt names
(``The call to answer: TOOL with arguments JSON``): a function per tool returns the
answer's *content* (a dict is sent as its JSON), or a whole :class:`Reply`.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_JUDGES = str(Path(__file__).resolve().parent / "judges")
if _JUDGES not in sys.path:
    sys.path.insert(0, _JUDGES)

from judge_endpoint import MODEL, Endpoint, Reply, Request, completion  # noqa: E402 - above

__all__ = [
    "MODEL",
    "Endpoint",
    "Reply",
    "Request",
    "Script",
    "called",
    "completion",
    "emulator_policy",
    "running_emulator",
]

_CALL = re.compile(r"The call to answer: (?P<tool>\S+) with arguments (?P<args>.*)\n")

#: What a scripted tool answers: the content (a dict: its JSON), or a whole reply.
Answer = Callable[[dict[str, Any], Request], str | dict[str, Any] | Reply]


def called(request: Request) -> tuple[str, dict[str, Any]]:
    """The tool and arguments an emulator request asks about (the default prompt)."""
    m = _CALL.search(request.prompt)
    assert m is not None, request.prompt
    args: dict[str, Any] = json.loads(m["args"])
    return m["tool"], args


class Script:
    """Answers emulator requests by tool (see the module docstring); a tool it does not
    know gets ``{"result": "ok"}``."""

    def __init__(self, **tools: Answer) -> None:
        self.tools = tools

    def __call__(self, request: Request) -> Reply:
        tool, args = called(request)
        answer = self.tools.get(tool)
        said = {"result": "ok"} if answer is None else answer(args, request)
        if isinstance(said, Reply):
            return said
        content = said if isinstance(said, str) else json.dumps(said)
        return Reply(body=completion(content))


def emulator_policy(url: str, tools: dict[str, Any], **params: Any) -> dict[str, Any]:
    """A policy document emulating ``tools`` (name or glob -> mode) with the endpoint."""
    return {
        "tools": tools,
        "emulator": {
            "kind": "openai",
            "label": "sim-test",
            "params": {"base_url": url, "model": MODEL, "max_retries": 0, **params},
        },
    }


@contextmanager
def running_emulator(script: Callable[[Request], Reply]) -> Iterator[Endpoint]:
    with Endpoint(script) as endpoint:
        yield endpoint

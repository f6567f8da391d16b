"""Inspect tasks for the adapter's tests: scripted ``mockllm/model`` runs, offline.

This module never imports litmus_sandbox: the recorder hooks, the ``litmus_sandbox/policy``
approver and the ``litmus`` sandbox reach a run through the entry point only. (The one
task that wraps a tool with ``litmus_tool`` lives in ``inspect_wrapped.py``.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from inspect_ai import Task, task
from inspect_ai.agent import react
from inspect_ai.approval import Approval, ApprovalPolicy, approver
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessage, ModelOutput, ModelUsage
from inspect_ai.scorer import includes
from inspect_ai.tool import Tool, tool
from inspect_ai.util import sandbox

MODEL = "mockllm/model"
USAGE = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)


def say(text: str, stop: Any = "stop") -> ModelOutput:
    """A scripted answer (``usage`` set, or mockllm downloads a tokenizer)."""
    out = ModelOutput.from_content(MODEL, text)
    out.choices[0].stop_reason = stop
    out.usage = USAGE
    return out


def call(fn: str, **args: Any) -> ModelOutput:
    """A scripted tool call."""
    out = ModelOutput.for_tool_call(MODEL, fn, args)
    out.usage = USAGE
    return out


#: Each sample's script, by its prompt (the sample's input): one output per generation.
SCRIPTS: dict[str, list[ModelOutput]] = {
    "filter-then-delete": [
        say("I can't help with that.", stop="content_filter"),
        call("delete_file", path="/etc/passwd"),
        call("submit", answer="done"),
    ],
    "refuse-then-delete": [
        say("I can't help with that."),
        call("delete_file", path="/etc/passwd"),
        call("submit", answer="done"),
    ],
    "retried-refusal": [
        say("I can't help with that.", stop="content_filter"),
        call("delete_file", path="/etc/shadow"),
        call("submit", answer="done"),
    ],
    "limited": [call("list_files", path=".") for _ in range(10)],
    "approvals": [
        call("delete_file", path="/etc/passwd"),
        call("shutdown", reason="now"),
        call("list_files", path="never"),
    ],
    "empty-results": [
        call("swallowing_fetch", url="https://example.invalid"),
        call("empty_search", query="nothing"),
        call("submit", answer="done"),
    ],
    "sandbox-write": [call("write_note", name="note.txt"), call("submit", answer="done")],
}


def scripted() -> Callable[..., ModelOutput]:
    """mockllm's ``custom_outputs``: the next output of the sample's script."""
    running: dict[str, Iterator[ModelOutput]] = {}

    def generate(input: list[ChatMessage], *_: Any) -> ModelOutput:
        prompt = next(m.text for m in input if m.role == "user")
        it = running.setdefault(prompt, iter(SCRIPTS[prompt]))
        return next(it, None) or call("submit", answer="out of script")

    return generate


@tool
def delete_file() -> Tool:
    async def execute(path: str) -> str:
        """Delete a file (pretend: it only says so).

        Args:
            path: the file to delete.
        """
        return f"deleted {path}"

    return execute


@tool
def list_files() -> Tool:
    async def execute(path: str) -> str:
        """List a folder.

        Args:
            path: the folder.
        """
        return "a.txt b.txt"

    return execute


@tool
def shutdown() -> Tool:
    async def execute(reason: str) -> str:
        """Shut the machine down.

        Args:
            reason: why.
        """
        return "shut down"

    return execute


@tool
def swallowing_fetch() -> Tool:
    async def execute(url: str) -> str:
        """Fetch a URL.

        Args:
            url: the URL.
        """
        try:
            raise ConnectionError(f"cannot reach {url}")
        except ConnectionError:
            return ""  # swallowed: the agent sees an empty result

    return execute


@tool
def empty_search() -> Tool:
    async def execute(query: str) -> str:
        """Search (finds nothing).

        Args:
            query: what to look for.
        """
        return ""

    return execute


@tool
def write_note() -> Tool:
    async def execute(name: str) -> str:
        """Write a note in the sandbox.

        Args:
            name: the file name.
        """
        result = await sandbox().exec(["sh", "-c", f"echo hello > {name}"])
        return f"exit {result.returncode}"

    return execute


@approver
def terminator() -> Any:
    async def approve(message: str, call: Any, view: Any, history: Any) -> Approval:
        return Approval(decision="terminate", explanation="shutdown ends the sample")

    return approve


def _task(prompt: str, tools: list[Tool], **kw: Any) -> Task:
    return Task(
        dataset=[Sample(id=prompt, input=prompt, target="done")],
        solver=react(tools=tools, retry_refusals=kw.pop("retry_refusals", None)),
        scorer=includes(),
        sandbox="local",
        **kw,
    )


@task
def refusals() -> Task:
    return Task(
        dataset=[
            Sample(id=p, input=p, target="done")
            for p in ("filter-then-delete", "refuse-then-delete")
        ],
        solver=react(tools=[delete_file()]),
        scorer=includes(),
        sandbox="local",
    )


@task
def retried() -> Task:
    return _task("retried-refusal", [delete_file()], retry_refusals=1)


@task
def limited() -> Task:
    return _task("limited", [list_files()], message_limit=6)


@task
def approvals(policy: str) -> Task:
    return _task(
        "approvals",
        [delete_file(), shutdown(), list_files()],
        approval=[
            ApprovalPolicy(terminator(), "shutdown"),
            ApprovalPolicy(_registry_approver("litmus_sandbox/policy", policy=policy), "*"),
        ],
    )


def _registry_approver(name: str, **params: Any) -> Any:
    """An approver by its registry name: the entry point brings litmus_sandbox in."""
    from inspect_ai._util.registry import registry_create

    return registry_create("approver", name, **params)


@task
def empty_results() -> Task:
    return _task("empty-results", [swallowing_fetch(), empty_search()])


@task
def sandbox_write() -> Task:
    return _task("sandbox-write", [write_note()])
